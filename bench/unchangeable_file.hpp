// A checkpoint file the kernel keeps from changing, which ruda maps instead of reading: what
// bench/checkpoint's mapped load reads.
#pragma once

#include "bench_util.hpp"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace bench {

// A file ruda may map: `path` itself with the immutable flag set where this process may set it
// (root, on a file system that keeps the flag), cleared again on destruction; otherwise a
// sealed memfd holding a copy of it.
class unchangeable_file {
public:
    explicit unchangeable_file(const std::filesystem::path& path) : path_(path)
    {
        fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd_ < 0) {
            die("open " + path.string());
        }
        if (::ioctl(fd_, FS_IOC_GETFLAGS, &flags_) == 0) {
            int immutable = flags_ | FS_IMMUTABLE_FL;
            immutable_ = ::ioctl(fd_, FS_IOC_SETFLAGS, &immutable) == 0;
        }
        if (immutable_) {
            return;
        }
        const int memfd = ::memfd_create("bench-checkpoint", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (memfd < 0) {
            die("memfd_create");
        }
        const auto size = static_cast<std::size_t>(std::filesystem::file_size(path));
        std::vector<std::uint8_t> bytes(size);
        if (::pread(fd_, bytes.data(), size, 0) != static_cast<ssize_t>(size) ||
            ::write(memfd, bytes.data(), size) != static_cast<ssize_t>(size) ||
            ::fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) != 0) {
            die("sealed memfd");
        }
        ::close(fd_);
        fd_ = memfd;
        path_ = "/proc/self/fd/" + std::to_string(memfd);
    }
    ~unchangeable_file()
    {
        if (immutable_) {
            static_cast<void>(::ioctl(fd_, FS_IOC_SETFLAGS, &flags_));
        }
        ::close(fd_);
    }
    unchangeable_file(const unchangeable_file&) = delete;
    unchangeable_file& operator=(const unchangeable_file&) = delete;
    [[nodiscard]] const std::filesystem::path& path() const { return path_; }
    [[nodiscard]] bool immutable() const { return immutable_; }

private:
    std::filesystem::path path_;
    int fd_ = -1;
    int flags_ = 0;
    bool immutable_ = false;
};

} // namespace bench
