// ruda-inspect's reading of one checkpoint file: its index, each payload's checksum, the value of
// each short section and, with --verify, a complete load; the first problem on one line.
#pragma once

#include "progress_line.hpp"

#include <ruda/checkpoint/checkpoint_file.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace ruda::tools {

struct report {
    std::filesystem::path file;
    std::optional<checkpoint_index> index;
    std::vector<bool> entry_ok;
    std::vector<bool> section_ok;
    std::optional<std::string> problem; // the first, on one line
    std::vector<std::string> section_value; // what a short section holds, as `section_value`
};

// Reads `file` through checkpoint_reader only, so a hostile file gets the same checks as any
// load: every payload's checksum when `check_payloads`, a complete load when `verify`.
report read_report(const std::filesystem::path& file, bool check_payloads, bool verify,
                   progress_line& line);

} // namespace ruda::tools
