// What a load reads from: a regular file (opened without blocking, refused at once when it is
// anything else) or bytes in memory, read at offsets either way. Shared by checkpoint and
// safetensors loads.
#pragma once

#include <ruda/error.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

namespace ruda::detail {

class byte_source {
public:
    /// `path` through `open_regular_file`: `errc::malformed_record` for what is not a regular
    /// file, `errc::io_error` if it cannot be opened. Closed when the source goes.
    [[nodiscard]] static result<byte_source> open_file(const std::filesystem::path& path);
    /// `bytes`, which must outlive the source; `name` stands for a path in messages.
    [[nodiscard]] static byte_source of_memory(std::span<const std::uint8_t> bytes,
                                               std::filesystem::path name);

    byte_source() = default;
    byte_source(byte_source&& other) noexcept;
    byte_source& operator=(byte_source&& other) noexcept;
    byte_source(const byte_source&) = delete;
    byte_source& operator=(const byte_source&) = delete;
    ~byte_source();

    [[nodiscard]] const std::filesystem::path& name() const noexcept { return name_; }
    [[nodiscard]] std::uint64_t size() const noexcept { return size_; }
    /// The open file, or -1 for bytes in memory.
    [[nodiscard]] int fd() const noexcept { return fd_; }

    /// Exactly `size` bytes at `offset`: `errc::malformed_record` past the end (for a file that
    /// shrank since it was opened, too), `errc::io_error` when the read fails.
    [[nodiscard]] result<void> read_at(std::uint8_t* data, std::size_t size,
                                       std::uint64_t offset) const;

private:
    std::filesystem::path name_;
    int fd_ = -1;
    std::span<const std::uint8_t> memory_{};
    std::uint64_t size_ = 0;
};

} // namespace ruda::detail
