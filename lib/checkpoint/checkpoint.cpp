// Sections of a checkpoint: unique, bounded names in insertion order.
#include <ruda/checkpoint/checkpoint.hpp>

#include <algorithm>

namespace ruda {

result<void> checkpoint::put_bytes(std::string name, std::vector<std::uint8_t> bytes)
{
    if (name.empty() || name.size() > max_name_length) {
        return error{errc::malformed_record, "A section name must have 1 to " +
                                                 std::to_string(max_name_length) +
                                                 " bytes, not " + std::to_string(name.size())};
    }
    const auto same = [&name](const checkpoint_section& s) { return s.name == name; };
    if (const auto found = std::find_if(sections_.begin(), sections_.end(), same);
        found != sections_.end()) {
        found->bytes = std::move(bytes);
        return success();
    }
    sections_.push_back({std::move(name), std::move(bytes)});
    return success();
}

const checkpoint_section* checkpoint::find(std::string_view name) const noexcept
{
    for (const checkpoint_section& s : sections_) {
        if (s.name == name) {
            return &s;
        }
    }
    return nullptr;
}

} // namespace ruda
