// ruda-inspect: what a checkpoint file holds (entries and sections, each payload's checksum
// verified), as tables or JSON, and with --verify a one-line verdict per file.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace ruda::tools {

/// Runs ruda-inspect with `args` (without the program name), writing to `out`, and a progress
/// line for each file it reads to `progress` when given (a terminal: the line is rewritten in
/// place with '\r' and erased at the end). Returns the exit status: 0 when every file is
/// sound, 1 when any is not, 2 on a usage error.
int inspect_main(const std::vector<std::string>& args, std::ostream& out,
                 std::ostream* progress = nullptr);

/// A size as a person reads it: "48 B", "1.5 KiB", "2.0 GiB" (units of 1024, one decimal).
std::string human_size(std::uint64_t bytes);

} // namespace ruda::tools
