// What the ruda-inspect suites share (inspect_test.cpp, inspect_groups_test.cpp): the tool run
// in-process, a sample file, a payload corrupted.
#pragma once

#include "../checkpoint/checkpoint_test_support.hpp"

#include <inspect.hpp>

#include <ruda/checkpoint/checkpoint_file.hpp>

#include <cstdint>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

namespace ruda::test {

/// What ruda-inspect printed and its exit status.
struct run_result {
    int status;
    std::string out;
};

/// ruda-inspect run in-process with `args`.
inline run_result inspect(const std::vector<std::string>& args)
{
    std::ostringstream out;
    const int status = ruda::tools::inspect_main(args, out);
    return {status, out.str()};
}

/// A sound checkpoint file of every dtype, step 9, saved as `dir / name`.
inline std::filesystem::path sample_file(const temp_dir& dir, const std::string& name)
{
    ruda::checkpoint c{ruda::test::valid_sample()};
    c.put("step", std::uint64_t{9}).value();
    const auto path = dir / name;
    ruda::save_checkpoint_file(path, c).value();
    return path;
}

inline void corrupt_first_payload(const std::filesystem::path& path)
{
    const auto offset = ruda::checkpoint_reader::open(path).value().index().entries[0].payload.offset;
    auto bytes = ruda::test::read_bytes(path);
    bytes[offset] ^= 0x04;
    ruda::test::write_bytes(path, bytes);
}

inline bool contains(const std::string& text, const std::string& part)
{
    return text.find(part) != std::string::npos;
}

} // namespace ruda::test
