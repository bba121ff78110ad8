// POSIX file operations for checkpoint writes; every failure names the call and the path.
#include <ruda/checkpoint/detail/posix_io.hpp>
#include <ruda/checkpoint/detail/regular_file.hpp>
#include <ruda/checkpoint/file_ops.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace ruda {
namespace detail {

error io_error_from_errno(const char* what, const std::filesystem::path& path)
{
    // strerror_r, not strerror: saves fail on the manager's writer and the I/O threads too.
    char text[256];
    const char* reason = ::strerror_r(errno, text, sizeof text); // the GNU form: may not use text
    return error{errc::io_error, std::string(what) + " " + path.string() + ": " + reason};
}

} // namespace detail

using detail::io_error_from_errno;

namespace {

// Descriptors have no path; messages name the descriptor instead.
std::filesystem::path fd_name(int fd) { return "fd " + std::to_string(fd); }

const char* kind_of(mode_t mode)
{
    if (S_ISDIR(mode)) {
        return "a directory";
    }
    if (S_ISFIFO(mode)) {
        return "a FIFO";
    }
    if (S_ISSOCK(mode)) {
        return "a socket";
    }
    if (S_ISCHR(mode)) {
        return "a character device";
    }
    if (S_ISBLK(mode)) {
        return "a block device";
    }
    return "not a file";
}

error not_regular(const std::filesystem::path& path, const char* kind)
{
    return error{errc::malformed_record,
                 path.string() + ": not a regular file (" + kind + ")"};
}

} // namespace

result<int> file_ops::create(const std::filesystem::path& path)
{
    // Exclusive and never through a link: whatever is already at `path` (a stale temporary
    // file, or a link planted there to redirect the write) is removed, not written through.
    constexpr int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    for (int attempt = 0;; ++attempt) {
        const int fd = ::open(path.c_str(), flags, 0644);
        if (fd >= 0) {
            return fd;
        }
        if (errno != EEXIST || attempt == 2) {
            return io_error_from_errno("create", path);
        }
        if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
            return io_error_from_errno("remove the stale", path);
        }
    }
}

result<std::size_t> file_ops::write(int fd, const void* data, std::size_t size)
{
    for (;;) {
        const ssize_t n = ::write(fd, data, size);
        if (n > 0) {
            return static_cast<std::size_t>(n);
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n == 0) {
            errno = EIO;
        }
        return io_error_from_errno("write", fd_name(fd));
    }
}

result<void> file_ops::pwrite(int fd, const void* data, std::size_t size, std::uint64_t offset)
{
    const auto* bytes = static_cast<const char*>(data);
    while (size > 0) {
        const ssize_t n = ::pwrite(fd, bytes, size, static_cast<off_t>(offset));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            if (n == 0) {
                errno = EIO;
            }
            return io_error_from_errno("pwrite", fd_name(fd));
        }
        bytes += n;
        size -= static_cast<std::size_t>(n);
        offset += static_cast<std::uint64_t>(n);
    }
    return success();
}

void file_ops::start_writeback(int fd, std::uint64_t offset, std::uint64_t size) noexcept
{
#if defined(SYNC_FILE_RANGE_WRITE)
    // Without the wait flags this neither blocks on the device nor consumes a writeback error,
    // which the final fsync reports.
    static_cast<void>(::sync_file_range(fd, static_cast<off64_t>(offset),
                                        static_cast<off64_t>(size), SYNC_FILE_RANGE_WRITE));
#else
    static_cast<void>(fd);
    static_cast<void>(offset);
    static_cast<void>(size);
#endif
}

result<void> file_ops::fsync(int fd)
{
    if (::fsync(fd) != 0) {
        return io_error_from_errno("fsync", fd_name(fd));
    }
    return success();
}

result<void> file_ops::close(int fd)
{
    if (::close(fd) != 0) {
        return io_error_from_errno("close", fd_name(fd));
    }
    return success();
}

result<void> file_ops::rename(const std::filesystem::path& from, const std::filesystem::path& to)
{
    if (::rename(from.c_str(), to.c_str()) != 0) {
        return io_error_from_errno("rename", from);
    }
    return success();
}

result<void> file_ops::sync_directory(const std::filesystem::path& dir)
{
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        return io_error_from_errno("open directory", dir);
    }
    const bool synced = ::fsync(fd) == 0;
    const int saved = errno;
    ::close(fd);
    if (!synced) {
        errno = saved;
        return io_error_from_errno("fsync directory", dir);
    }
    return success();
}

result<void> file_ops::remove(const std::filesystem::path& path)
{
    if (::unlink(path.c_str()) != 0) {
        return io_error_from_errno("remove", path);
    }
    return success();
}

namespace detail {

result<regular_file> open_regular_file(const std::filesystem::path& path)
{
    // O_NONBLOCK: opening a FIFO without a writer, or some devices, would otherwise wait.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        if (errno == ENXIO) { // a socket, or a FIFO or device that cannot be opened this way
            struct stat info {};
            if (::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
                return not_regular(path, kind_of(info.st_mode));
            }
        }
        return io_error_from_errno("open", path);
    }
    struct stat info {};
    if (::fstat(fd, &info) != 0) {
        auto failure = io_error_from_errno("stat", path);
        ::close(fd);
        return failure;
    }
    if (!S_ISREG(info.st_mode)) {
        ::close(fd);
        return not_regular(path, kind_of(info.st_mode));
    }
    // Reads of a regular file never block anyway; clear the flag all the same.
    static_cast<void>(::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK));
    return regular_file{fd, static_cast<std::uint64_t>(info.st_size)};
}

} // namespace detail

file_ops& posix_file_ops()
{
    static file_ops ops;
    return ops;
}

result<void> detail::read_exact_at(int fd, const std::filesystem::path& path, std::uint8_t* data,
                           std::size_t size, std::uint64_t offset)
{
    while (size > 0) {
        const ssize_t n = ::pread(fd, data, size, static_cast<off_t>(offset));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return io_error_from_errno("read", path);
        }
        if (n == 0) {
            return error{errc::malformed_record,
                         path.string() + ": the file ended early (changed while read?)"};
        }
        data += n;
        size -= static_cast<std::size_t>(n);
        offset += static_cast<std::uint64_t>(n);
    }
    return success();
}

} // namespace ruda
