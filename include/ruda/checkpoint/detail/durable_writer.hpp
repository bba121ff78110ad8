// Writes a file atomically and durably: into `<path>.tmp`, appended through a bounded buffer or
// written at offsets by several threads, then fsync, close, rename over `path`, and fsync of the
// directory. Until `commit` succeeds the target is untouched; a writer destroyed before that
// closes and removes its temporary file.
#pragma once

#include <ruda/checkpoint/file_ops.hpp>
#include <ruda/error.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

namespace ruda::detail {

class durable_writer {
public:
    /// Writes of at least this many bytes bypass the buffer.
    static constexpr std::size_t buffer_size = std::size_t{1} << 20U;
    /// Appended bytes are handed to the device (`file_ops::start_writeback`) in steps of this
    /// size, so the disk works while the rest is written and the fsync finds little left:
    /// steadier and faster than one fsync of everything (docs/BENCHMARKS.md).
    static constexpr std::uint64_t writeback_step = std::uint64_t{8} << 20U;

    /// Creates `<path>.tmp` (replacing a stale one).
    [[nodiscard]] static result<std::unique_ptr<durable_writer>> create(std::filesystem::path path,
                                                                        file_ops& ops);
    durable_writer(const durable_writer&) = delete;
    durable_writer& operator=(const durable_writer&) = delete;
    ~durable_writer();

    /// Appends `bytes`.
    [[nodiscard]] result<void> write(std::span<const std::uint8_t> bytes);
    /// Writes `bytes` at `offset`, anywhere in the file. With `start_writeback`, safe to call
    /// from several threads at once for disjoint ranges, as long as no thread appends meanwhile.
    [[nodiscard]] result<void> write_at(std::span<const std::uint8_t> bytes,
                                        std::uint64_t offset) const;
    /// Hands `[offset, offset + size)` to the device now (`file_ops::start_writeback`).
    void start_writeback(std::uint64_t offset, std::uint64_t size) const noexcept
    {
        ops_.start_writeback(fd_, offset, size);
    }
    /// Bytes appended so far.
    [[nodiscard]] std::uint64_t size() const noexcept { return size_; }
    /// Flush, fsync, close, rename over the target, fsync of the directory.
    [[nodiscard]] result<void> commit();

    [[nodiscard]] static std::filesystem::path temporary_path(const std::filesystem::path& path);

private:
    durable_writer(std::filesystem::path path, file_ops& ops, int fd);
    result<void> flush();
    result<void> write_all(std::span<const std::uint8_t> bytes);
    error fail(const error& cause) const;
    // Whether the temporary name still names the file this writer created: another save to
    // the same path removes a temporary file it finds there and creates its own.
    [[nodiscard]] bool still_ours() const noexcept;

    std::filesystem::path path_;
    std::filesystem::path temporary_;
    file_ops& ops_;
    int fd_;
    std::vector<std::uint8_t> buffer_;
    std::uint64_t size_ = 0;
    std::uint64_t written_ = 0;   // bytes handed to the file by appends
    std::uint64_t writeback_ = 0; // appended bytes before this offset are in writeback
    bool committed_ = false;
    std::uint64_t device_ = 0; // the temporary file's identity when created
    std::uint64_t inode_ = 0;
};

} // namespace ruda::detail
