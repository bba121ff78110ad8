// One manager per checkpoint directory: an exclusive flock on `<directory>/.lock`, which records
// who holds it for the message a second manager gives. The kernel drops it when the
// descriptor's last copy closes: with the process, however it ends.
#pragma once

#include <ruda/error.hpp>

#include <filesystem>

namespace ruda::detail {

class directory_lock {
public:
    directory_lock() = default;
    ~directory_lock();
    directory_lock(const directory_lock&) = delete;
    directory_lock& operator=(const directory_lock&) = delete;

    /// Takes the lock of `directory` (which exists), or keeps the one held already.
    /// `errc::directory_in_use` naming the holder's pid and host when another holds it.
    [[nodiscard]] result<void> hold(const std::filesystem::path& directory);

private:
    int fd_ = -1;
};

} // namespace ruda::detail
