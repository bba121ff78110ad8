// Memory a process has not touched yet costs a page fault per page at its first write, which
// on a virtual machine can cost microseconds each: for a buffer of a megabyte or more ruda maps
// its pages in one call instead, as huge pages where the kernel allows.
#pragma once

#include <cstddef>
#include <vector>

namespace ruda::detail {

/// A transparent huge page, and the size from which `prepare_pages` offers a buffer's pages to
/// the kernel as huge pages (one fault per 2 MiB instead of 512). A buffer meant to use them
/// is aligned to `huge_page`.
inline constexpr std::size_t huge_page = std::size_t{2} << 20U;
inline constexpr std::size_t huge_threshold = 2 * huge_page;

/// Maps the whole pages inside [data, data + size) for writing, in one call, as huge pages
/// from `huge_threshold`. Only a hint, and nothing for a buffer under 1 MiB: a kernel without
/// MADV_POPULATE_WRITE (before Linux 5.14) or without transparent huge pages refuses, and the
/// pages then fault in as they are written, as they would anyway. The bytes do not change.
void prepare_pages(void* data, std::size_t size) noexcept;

/// `items.reserve(count)`, with the reserved memory's pages mapped by `prepare_pages`: for a
/// vector about to be filled with `count` elements. Nothing where it already has the room.
template <class T>
void reserve_prepared(std::vector<T>& items, std::size_t count)
{
    if (count <= items.capacity()) {
        return;
    }
    items.reserve(count);
    prepare_pages(items.data(), items.capacity() * sizeof(T));
}

} // namespace ruda::detail
