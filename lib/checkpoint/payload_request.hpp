// One payload a load reads (where it lies in the file, where its bytes end up, how messages
// name it) and the zero padding a reader checks around the payloads: what the reader's load and
// its payload reads share.
#pragma once

#include <ruda/checkpoint/checkpoint_file.hpp>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>

namespace ruda::detail {

// How messages name a payload.
inline std::string payload_name(param_id entry)
{
    return "the gradient of parameter " + to_string(entry);
}

inline std::string payload_name(const checkpoint_section_info& section)
{
    return "section " + section.name;
}

inline bool all_zero(std::span<const std::uint8_t> bytes)
{
    return std::all_of(bytes.begin(), bytes.end(), [](std::uint8_t b) { return b == 0; });
}

} // namespace ruda::detail

namespace ruda {

// One payload to load, and where its bytes end up. It holds a copy of where the payload lies,
// so that a reader being consumed can free its index before the payloads arrive.
struct checkpoint_reader::payload_request {
    payload_location payload;
    param_id entry{0};                      // the entry's id, when `section` is null
    const checkpoint_section_info* section; // null for an entry
    storage bytes;

    [[nodiscard]] std::string name() const
    {
        return section == nullptr ? detail::payload_name(entry) : detail::payload_name(*section);
    }
};

} // namespace ruda
