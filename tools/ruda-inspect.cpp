// ruda-inspect FILE|DIR... [--json] [--verify]: see tools/inspect.hpp.
#include "inspect.hpp"

#include <iostream>

int main(int argc, char** argv)
{
    return ruda::tools::inspect_main(std::vector<std::string>(argv + 1, argv + argc), std::cout);
}
