#include <ruda/tensor/detail/host_buffer.hpp>

#include <sys/mman.h>
#include <unistd.h>

namespace ruda::detail {
namespace {

// Smaller buffers usually come from memory the allocator already has mapped.
constexpr std::size_t populate_threshold = std::size_t{1} << 20U;

// Maps the whole pages inside [data, data + size) for writing, in one call. Only a hint: a
// kernel older than Linux 5.14 refuses MADV_POPULATE_WRITE, and then the pages fault in as
// they are written, as they would anyway.
void populate(std::uint8_t* data, std::size_t size)
{
#if defined(MADV_POPULATE_WRITE)
    if (size < populate_threshold) {
        return;
    }
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto begin = (reinterpret_cast<std::uintptr_t>(data) + page - 1) / page * page;
    const auto end = (reinterpret_cast<std::uintptr_t>(data) + size) / page * page;
    if (begin < end) {
        static_cast<void>(::madvise(reinterpret_cast<void*>(begin), end - begin,
                                    MADV_POPULATE_WRITE));
    }
#else
    static_cast<void>(data);
    static_cast<void>(size);
#endif
}

} // namespace

std::vector<std::uint8_t> host_buffer_capacity(std::size_t size)
{
    std::vector<std::uint8_t> buffer;
    buffer.reserve(size);
    populate(buffer.data(), size);
    return buffer;
}

std::vector<std::uint8_t> host_buffer(std::size_t size)
{
    auto buffer = host_buffer_capacity(size);
    buffer.resize(size);
    return buffer;
}

std::vector<std::uint8_t> host_buffer_copy(std::span<const std::uint8_t> bytes)
{
    auto buffer = host_buffer_capacity(bytes.size());
    buffer.assign(bytes.begin(), bytes.end());
    return buffer;
}

} // namespace ruda::detail
