// prepare_pages: a buffer's fresh pages mapped in one call, as huge pages where it is big
// enough to hold some.
#include <ruda/tensor/detail/fresh_pages.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

namespace ruda::detail {

namespace {

// Buffers from here on get their pages mapped in one call; smaller ones usually come from
// memory the allocator already has mapped.
constexpr std::size_t populate_threshold = std::size_t{1} << 20U;

} // namespace

void prepare_pages(void* data, std::size_t size) noexcept
{
    if (size < populate_threshold) {
        return;
    }
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto begin = (reinterpret_cast<std::uintptr_t>(data) + page - 1) / page * page;
    const auto end = (reinterpret_cast<std::uintptr_t>(data) + size) / page * page;
    if (begin >= end) {
        return;
    }
    auto* first = reinterpret_cast<void*>(begin);
#if defined(MADV_HUGEPAGE)
    if (size >= huge_threshold) {
        static_cast<void>(::madvise(first, end - begin, MADV_HUGEPAGE));
    }
#endif
#if defined(MADV_POPULATE_WRITE)
    static_cast<void>(::madvise(first, end - begin, MADV_POPULATE_WRITE));
#endif
}

} // namespace ruda::detail
