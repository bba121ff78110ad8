// The file operations a checkpoint write makes (and the one positioned read that loads use), as
// virtual functions with POSIX defaults, so that a test can fail any one of them or shorten a
// write without replacing the writer.
#pragma once

#include <ruda/error.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>

namespace ruda {

class file_ops {
public:
    file_ops() = default;
    file_ops(const file_ops&) = delete;
    file_ops& operator=(const file_ops&) = delete;
    virtual ~file_ops() = default;

    /// Creates `path` for writing, exclusively and without following a link: whatever is
    /// already there (a stale file, a planted link) is removed first; a file descriptor.
    virtual result<int> create(const std::filesystem::path& path);
    /// Writes up to `size` bytes at the file position; how many it wrote (at least 1).
    virtual result<std::size_t> write(int fd, const void* data, std::size_t size);
    /// Writes all `size` bytes at `offset`. A save with several writers calls this (and
    /// `start_writeback`) from several threads at once, for disjoint ranges of one file.
    virtual result<void> pwrite(int fd, const void* data, std::size_t size, std::uint64_t offset);
    /// Asks the kernel to start writing `[offset, offset + size)` to the disk now, without
    /// waiting for it (`sync_file_range` with `SYNC_FILE_RANGE_WRITE` on Linux; nothing
    /// elsewhere). Only a hint, so that the device works while later bytes are still being
    /// written and the final fsync finds little left to do; `fsync` still reports any error.
    virtual void start_writeback(int fd, std::uint64_t offset, std::uint64_t size) noexcept;
    virtual result<void> fsync(int fd);
    virtual result<void> close(int fd);
    /// Atomically replaces `to` with `from`.
    virtual result<void> rename(const std::filesystem::path& from, const std::filesystem::path& to);
    /// Makes the directory's entries (a rename, a removal) durable.
    virtual result<void> sync_directory(const std::filesystem::path& dir);
    virtual result<void> remove(const std::filesystem::path& path);
};

/// The plain POSIX operations.
[[nodiscard]] file_ops& posix_file_ops();

} // namespace ruda
