// Sections of a checkpoint: unique, bounded UTF-8 names in insertion order, found through an
// index so that a checkpoint of many sections loads in n log n. Groups: few, found by name.
#include <ruda/checkpoint/checkpoint.hpp>
#include <ruda/checkpoint/detail/utf8.hpp>
#include <ruda/optim/validate_record.hpp>

namespace ruda {

result<void> check_item_name(std::string_view name, std::string_view what)
{
    if (name.empty() || name.size() > checkpoint::max_name_length) {
        return error{errc::malformed_record, std::string(what) + " name must have 1 to " +
                                                 std::to_string(checkpoint::max_name_length) +
                                                 " bytes, not " + std::to_string(name.size())};
    }
    if (!detail::valid_utf8(name)) {
        return error{errc::malformed_record, std::string(what) + " name must be UTF-8 text"};
    }
    return success();
}

result<void> checkpoint::put_bytes(std::string name, std::vector<std::uint8_t> bytes)
{
    BOOST_OUTCOME_TRY(check_item_name(name, "A section"));
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

result<void> checkpoint::put_group(std::string name, gradients_params_record tensors)
{
    BOOST_OUTCOME_TRY(check_item_name(name, "A group"));
    for (tensor_group& g : groups_) {
        if (g.name == name) {
            g.tensors = std::move(tensors);
            return success();
        }
    }
    groups_.push_back({std::move(name), std::move(tensors)});
    return success();
}

const gradients_params_record* checkpoint::group(std::string_view name) const noexcept
{
    for (const tensor_group& g : groups_) {
        if (g.name == name) {
            return &g.tensors;
        }
    }
    return nullptr;
}

result<gradients_params_record> checkpoint::take_group(std::string_view name)
{
    for (auto g = groups_.begin(); g != groups_.end(); ++g) {
        if (g->name != name) {
            continue;
        }
        auto tensors = std::move(g->tensors);
        if (g == groups_.begin()) {
            g->tensors = {};
        } else {
            groups_.erase(g);
        }
        return tensors;
    }
    return error{errc::not_found, "Checkpoint has no group " + std::string(name)};
}

result<void> checkpoint::set_identity(run_identity identity)
{
    BOOST_OUTCOME_TRY(check_identity(identity));
    identity_ = std::move(identity);
    return success();
}

result<void> validate_for_saving(const checkpoint& contents)
{
    for (const tensor_group& g : contents.groups()) {
        const bool gradients = g.name == checkpoint::gradients_group;
        if (auto valid = validate_for_saving(g.tensors, gradients); !valid) {
            if (gradients) {
                return valid;
            }
            return error{valid.error().code(),
                         "Group " + g.name + ": " + valid.error().message()};
        }
    }
    if (contents.identity()) {
        BOOST_OUTCOME_TRY(check_identity(*contents.identity()));
    }
    return success();
}

result<void> validate_for_saving(const gradients_params_record& record, bool gradients)
{
    BOOST_OUTCOME_TRY(gradients ? validate_gradients_record(record)
                                : validate_tensor_group(record));
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
