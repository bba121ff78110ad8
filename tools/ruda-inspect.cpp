// ruda-inspect FILE|DIR... [--json] [--verify]: see tools/inspect.hpp.
#include "inspect.hpp"

#include <unistd.h>

#include <iostream>

int main(int argc, char** argv)
{
    // The progress line is for a person watching: only when standard error is a terminal.
    std::ostream* progress = ::isatty(STDERR_FILENO) == 1 ? &std::cerr : nullptr;
    return ruda::tools::inspect_main(std::vector<std::string>(argv + 1, argv + argc), std::cout,
                                     progress);
}
