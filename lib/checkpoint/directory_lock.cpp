// One manager per checkpoint directory: an exclusive flock on `.lock`, and who holds it.
#include <ruda/checkpoint/detail/directory_lock.hpp>
#include <ruda/checkpoint/detail/posix_io.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <string>

namespace ruda::detail {

namespace {

constexpr std::string_view lock_name = ".lock";

} // namespace

directory_lock::~directory_lock()
{
    if (fd_ >= 0) {
        ::close(fd_); // releases the lock
    }
}

result<void> directory_lock::hold(const std::filesystem::path& directory)
{
    if (fd_ >= 0) {
        return success();
    }
    const auto path = directory / lock_name;
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        return io_error_from_errno("open the lock", path);
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK) {
            auto failure = io_error_from_errno("lock", path);
            ::close(fd);
            return failure;
        }
        std::array<char, 256> holder{};
        const ssize_t n = ::pread(fd, holder.data(), holder.size() - 1, 0);
        ::close(fd);
        const std::string who =
            n > 0 ? std::string(holder.data(), static_cast<std::size_t>(n)) : "holder unknown";
        return error{errc::directory_in_use, "Checkpoint directory " + directory.string() +
                                                 " is in use by another manager (" + who +
                                                 "); one manager per directory"};
    }
    std::array<char, 256> host{};
    static_cast<void>(::gethostname(host.data(), host.size() - 1));
    const std::string holder = "pid " + std::to_string(::getpid()) + " on " + host.data();
    // Only a courtesy for the message: the lock itself is what counts.
    if (::ftruncate(fd, 0) == 0) {
        static_cast<void>(::pwrite(fd, holder.data(), holder.size(), 0));
    }
    fd_ = fd;
    return success();
}

} // namespace ruda::detail
