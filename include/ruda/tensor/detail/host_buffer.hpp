// Large host buffers for tensor bytes that are about to be overwritten (a snapshot's copy, a
// checkpoint's payload). Half the cost of filling fresh memory is the kernel faulting it in
// one 4 KiB page at a time; these ask it to map all of a large buffer's pages in one call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace ruda::detail {

/// `size` zero bytes.
[[nodiscard]] std::vector<std::uint8_t> host_buffer(std::size_t size);

/// An empty buffer with room for `size` bytes, its pages mapped: append to it (piece by piece,
/// say) without first paying the zero-fill of a sized buffer.
[[nodiscard]] std::vector<std::uint8_t> host_buffer_capacity(std::size_t size);

/// A copy of `bytes`.
[[nodiscard]] std::vector<std::uint8_t> host_buffer_copy(std::span<const std::uint8_t> bytes);

} // namespace ruda::detail
