// Whether a tensor's bytes can be cut at element boundaries, which the save plan and the restore
// both ask.
#pragma once

#include <ruda/dist/save_plan.hpp>
#include <ruda/tensor/dtype.hpp>

#include <cstdint>
#include <optional>

namespace ruda::detail {

/// The bytes of one element when `bytes` are `elements` whole elements of the unquantized
/// `stored` (and there is at least one), else nothing: quantized bytes are never cut.
inline std::optional<std::uint64_t> element_bytes(dtype stored, std::uint64_t elements,
                                                  std::uint64_t bytes)
{
    std::uint64_t product = 0;
    if (stored.is_quantized() || elements == 0 || stored.size() == 0 ||
        __builtin_mul_overflow(elements, std::uint64_t{stored.size()}, &product) ||
        product != bytes) {
        return std::nullopt;
    }
    return stored.size();
}

/// The bytes of one element when the pieces of `t` are cut at element boundaries, else nothing.
inline std::optional<std::uint64_t> cut_element_size(const tensor_layout& t)
{
    if (t.pieces.empty()) {
        return std::nullopt;
    }
    const tensor_piece& p = t.pieces.front();
    return element_bytes(t.stored, p.range.length, p.bytes);
}

} // namespace ruda::detail
