// Unsigned integers as little-endian bytes, the byte order of every ruda and safetensors field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace ruda::detail {

/// Writes the low `out.size()` (at most 8) bytes of `value` into `out`, least significant first.
inline void store_le(std::span<std::uint8_t> out, std::uint64_t value) noexcept
{
    for (std::size_t i = 0; i < out.size(); ++i) {
        out[i] = static_cast<std::uint8_t>(value >> (8 * i));
    }
}

/// The value of `bytes` (at most 8), least significant first.
[[nodiscard]] inline std::uint64_t load_le(std::span<const std::uint8_t> bytes) noexcept
{
    std::uint64_t value = 0;
    for (std::size_t i = 0; i < bytes.size(); ++i) {
        value |= std::uint64_t{bytes[i]} << (8 * i);
    }
    return value;
}

} // namespace ruda::detail
