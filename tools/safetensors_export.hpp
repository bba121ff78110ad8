// ruda-inspect --export-safetensors: a group of a checkpoint, after a complete verified load,
// written as safetensors.
#pragma once

#include "progress_line.hpp"

#include <filesystem>
#include <optional>
#include <ostream>
#include <string>

namespace ruda::tools {

// Loads `file` completely (every check a load makes) and writes a group of it to `out_path`;
// a directory or a manager's "latest" stands for the checkpoint "latest" names. Returns the
// exit status.
int export_safetensors_of(std::filesystem::path file, const std::optional<std::string>& group,
                          const std::filesystem::path& out_path, std::ostream& out,
                          progress_line& line);

} // namespace ruda::tools
