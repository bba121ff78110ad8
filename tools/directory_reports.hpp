// ruda-inspect on directories: what a checkpoint manager would make of one (the step "latest"
// names, the newest checkpoint that loads, each one passed over and why), and a distributed
// checkpoint's steps checked against their manifests.
#pragma once

#include "file_report.hpp"

#include <filesystem>
#include <ostream>
#include <vector>

namespace ruda::tools {

// A distributed checkpoint's step directory: its manifest (read_manifest checks that the pieces
// cover each gradient exactly once), a line per gradient unless `verify`, and whether every
// piece is in its rank's file with the checksum the manifest names (the files' own payloads are
// verified with the files). Returns whether all of it holds.
bool print_distributed_step(const std::filesystem::path& dir, bool verify, std::ostream& out);

// A directory of distributed steps: the step "latest" names.
void print_distributed_latest(const std::filesystem::path& dir, std::ostream& out);

// What a checkpoint manager would make of directory `dir`, from the reports of its files (which
// were loaded completely, like load_newest_valid loads them): the step and run "latest" names
// and the newest checkpoint that loads, of that run while one of it loads, with each one passed
// over and why.
void print_directory(const std::filesystem::path& dir, const std::vector<report>& reports,
                     std::ostream& out);

} // namespace ruda::tools
