// ruda-inspect's reports as a person reads them (a Markdown table per file) and as a program
// does (JSON).
#pragma once

#include "file_report.hpp"

#include <ostream>
#include <string>
#include <vector>

namespace ruda::tools {

// "14 gradients", or "12 tensors in 3 groups (weights 4, gradients 4, optimizer 4)".
std::string tensors_text(const checkpoint_index& index);

void print_table(const report& r, std::ostream& out);

void print_json(const std::vector<report>& reports, std::ostream& out);

} // namespace ruda::tools
