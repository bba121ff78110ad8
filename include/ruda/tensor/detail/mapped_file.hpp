// Read-only mappings of files that cannot change while mapped. A mapping of a file that another
// process truncates raises SIGBUS at the next touch of a lost page, and one it rewrites changes
// under its readers; so ruda maps only files the kernel itself keeps from changing, and reads
// every other file into memory of its own.
#pragma once

#include <ruda/error.hpp>
#include <ruda/tensor/storage.hpp>

#include <cstddef>
#include <string>

namespace ruda::detail {

/// Why the open file `fd` cannot be truncated or written while mapped: "sealed memfd" (seals
/// against shrinking and writing, which nothing can lift), "immutable" (the inode's immutable
/// flag, which only an administrator can clear) or "fs-verity" (permanent). Empty when the
/// file can change, which is the case for an ordinary file.
[[nodiscard]] std::string unchangeable_because(int fd);

/// The first `length` bytes of `fd`, mapped read-only with every page mapped up front
/// (`storage_origin::mapped`); `errc::io_error` naming `name` if the mapping fails. Call it only
/// for a file `unchangeable_because` vouches for.
[[nodiscard]] result<storage> map_unchangeable_file(int fd, std::size_t length,
                                                    const std::string& name);

} // namespace ruda::detail
