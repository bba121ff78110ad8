// A file or bytes in memory, read at offsets.
#include <ruda/checkpoint/detail/byte_source.hpp>

#include <ruda/checkpoint/detail/posix_io.hpp>
#include <ruda/checkpoint/detail/regular_file.hpp>

#include <unistd.h>

#include <cstring>
#include <string>
#include <utility>

namespace ruda::detail {

result<byte_source> byte_source::open_file(const std::filesystem::path& path)
{
    BOOST_OUTCOME_TRY(const auto file, open_regular_file(path));
    byte_source source;
    source.name_ = path;
    source.fd_ = file.fd;
    source.size_ = file.size;
    return source;
}

byte_source byte_source::of_memory(std::span<const std::uint8_t> bytes, std::filesystem::path name)
{
    byte_source source;
    source.name_ = std::move(name);
    source.memory_ = bytes;
    source.size_ = bytes.size();
    return source;
}

byte_source::byte_source(byte_source&& other) noexcept
    : name_(std::move(other.name_)), fd_(std::exchange(other.fd_, -1)), memory_(other.memory_),
      size_(other.size_)
{
}

byte_source& byte_source::operator=(byte_source&& other) noexcept
{
    if (this != &other) {
        if (fd_ >= 0) {
            ::close(fd_);
        }
        name_ = std::move(other.name_);
        fd_ = std::exchange(other.fd_, -1);
        memory_ = other.memory_;
        size_ = other.size_;
    }
    return *this;
}

byte_source::~byte_source()
{
    if (fd_ >= 0) {
        ::close(fd_);
    }
}

result<void> byte_source::read_at(std::uint8_t* data, std::size_t size, std::uint64_t offset) const
{
    if (fd_ >= 0) {
        return read_exact_at(fd_, name_, data, size, offset);
    }
    if (offset > memory_.size() || size > memory_.size() - offset) {
        return error{errc::malformed_record, name_.string() + ": read past the end"};
    }
    if (size != 0) {
        std::memcpy(data, memory_.data() + offset, size);
    }
    return success();
}

} // namespace ruda::detail
