// Whether an error's message holds some words: how the suites check that a refusal names what it
// refuses (the parameter, the file, the rank).
#pragma once

#include <ruda/error.hpp>

#include <string>
#include <string_view>

namespace ruda::test {

inline bool says(const ruda::error& e, std::string_view words)
{
    return e.message().find(words) != std::string::npos;
}

} // namespace ruda::test
