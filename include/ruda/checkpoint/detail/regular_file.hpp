// Opening a file that a load reads: never blocking on what is not a regular file (a FIFO
// without a writer, a device), and refusing it at once with what it is.
#pragma once

#include <ruda/error.hpp>

#include <cstdint>
#include <filesystem>

namespace ruda::detail {

struct regular_file {
    int fd = -1;            // open for reading; the caller closes it
    std::uint64_t size = 0; // its length when opened
};

/// Opens `path` for reading. `errc::malformed_record` "not a regular file (a FIFO)" for a
/// directory, FIFO, socket or device, without blocking and without reading it;
/// `errc::io_error` if it cannot be opened. The message names `path`.
[[nodiscard]] result<regular_file> open_regular_file(const std::filesystem::path& path);

} // namespace ruda::detail
