// Mapping files that cannot change: the seal, flag and attribute checks, and the mapping's block.
#include <ruda/tensor/detail/mapped_file.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <new>

namespace ruda::detail {
namespace {

class mapping_block final : public storage_block {
public:
    mapping_block(void* address, std::size_t length) noexcept
        : address_(address), length_(length)
    {
    }

private:
    ~mapping_block() { ::munmap(address_, length_); }
    [[nodiscard]] storage_origin origin() const noexcept override { return storage_origin::mapped; }
    void destroy() noexcept override { delete this; }

    void* address_;
    std::size_t length_;
};

} // namespace

std::string unchangeable_because(int fd)
{
#if defined(F_GET_SEALS)
    const int seals = ::fcntl(fd, F_GET_SEALS);
    const bool no_writes = seals >= 0 && (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) != 0;
    if (no_writes && (seals & F_SEAL_SHRINK) != 0) {
        return "sealed memfd";
    }
#endif
    struct statx info {};
    if (::statx(fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS, &info) == 0) {
        if ((info.stx_attributes_mask & info.stx_attributes & STATX_ATTR_IMMUTABLE) != 0) {
            return "immutable";
        }
#if defined(STATX_ATTR_VERITY)
        if ((info.stx_attributes_mask & info.stx_attributes & STATX_ATTR_VERITY) != 0) {
            return "fs-verity";
        }
#endif
    }
    return {};
}

result<storage> map_unchangeable_file(int fd, std::size_t length, const std::string& name)
{
    if (length == 0) {
        return storage{};
    }
    void* address = ::mmap(nullptr, length, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (address == MAP_FAILED) {
        char text[256]; // strerror_r: loads run on several threads
        const char* reason = ::strerror_r(errno, text, sizeof text);
        return error{errc::io_error, "mmap " + name + ": " + reason};
    }
    auto* block = new (std::nothrow) mapping_block(address, length);
    if (block == nullptr) {
        ::munmap(address, length);
        return error{errc::allocation_too_large, "Cannot allocate a mapping's block for " + name};
    }
    return adopt_block(block, static_cast<const std::uint8_t*>(address), length);
}

} // namespace ruda::detail
