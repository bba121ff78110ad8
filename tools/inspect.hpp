// ruda-inspect: what a checkpoint file holds (entries and sections, each payload's checksum
// verified), as tables or JSON, and with --verify a one-line verdict per file.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace ruda::tools {

/// Runs ruda-inspect with `args` (without the program name), writing to `out`. Returns the
/// exit status: 0 when every file is sound, 1 when any is not, 2 on a usage error.
int inspect_main(const std::vector<std::string>& args, std::ostream& out);

} // namespace ruda::tools
