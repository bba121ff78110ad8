// Sections of a checkpoint: unique, bounded UTF-8 names in insertion order, found through an
// index so that a checkpoint of many sections loads in n log n.
#include <ruda/checkpoint/checkpoint.hpp>
#include <ruda/checkpoint/detail/utf8.hpp>
#include <ruda/optim/validate_record.hpp>

namespace ruda {

result<void> checkpoint::put_bytes(std::string name, std::vector<std::uint8_t> bytes)
{
    if (name.empty() || name.size() > max_name_length) {
        return error{errc::malformed_record, "A section name must have 1 to " +
                                                 std::to_string(max_name_length) +
                                                 " bytes, not " + std::to_string(name.size())};
    }
    if (!detail::valid_utf8(name)) {
        return error{errc::malformed_record, "A section name must be UTF-8 text"};
    }
    const auto [at, added] = by_name_.try_emplace(name, sections_.size());
    if (!added) {
        sections_[at->second].bytes = std::move(bytes);
        return success();
    }
    sections_.push_back({std::move(name), std::move(bytes)});
    return success();
}

const checkpoint_section* checkpoint::find(std::string_view name) const noexcept
{
    const auto at = by_name_.find(name);
    return at == by_name_.end() ? nullptr : &sections_[at->second];
}

result<void> validate_for_saving(const gradients_params_record& record)
{
    BOOST_OUTCOME_TRY(validate_gradients_record(record));
    for (const gradient_entry& entry : record.entries()) {
        if (entry.data.shape().size() > checkpoint::max_rank) {
            return error{errc::malformed_record,
                         "Gradient for parameter " + to_string(entry.id) + " has " +
                             std::to_string(entry.data.shape().size()) +
                             " dimensions; a checkpoint holds at most " +
                             std::to_string(checkpoint::max_rank)};
        }
        if (entry.name.size() > checkpoint::max_parameter_name_length) {
            return error{errc::malformed_record,
                         "Parameter " + to_string(entry.id) + " has a name of " +
                             std::to_string(entry.name.size()) +
                             " bytes; a checkpoint holds at most " +
                             std::to_string(checkpoint::max_parameter_name_length)};
        }
        if (!detail::valid_utf8(entry.name)) {
            return error{errc::malformed_record,
                         "Parameter " + to_string(entry.id) + " has a name that is not UTF-8"};
        }
    }
    return unique_parameter_names(record.entries());
}

} // namespace ruda
