// Small POSIX helpers of the checkpoint I/O: an exact positioned read and errno as an error.
#pragma once

#include <ruda/error.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>

namespace ruda::detail {

/// Reads exactly `size` bytes of `fd` at `offset` (`path` names it in messages):
/// `errc::io_error` if the read fails, `errc::malformed_record` if the file ends first.
[[nodiscard]] result<void> read_exact_at(int fd, const std::filesystem::path& path,
                                         std::uint8_t* data, std::size_t size,
                                         std::uint64_t offset);

/// `errc::io_error` with "`what` `path`: strerror(errno)".
[[nodiscard]] error io_error_from_errno(const char* what, const std::filesystem::path& path);

} // namespace ruda::detail
