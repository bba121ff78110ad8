// What the checkpoint file suites share (checkpoint_file_test.cpp, for round trips and writes;
// checkpoint_file_refusals_test.cpp, for the files a load refuses): a sample with sections of
// several types, a load expected to fail, a file edit, and file operations that fail on cue.
#pragma once

#include "checkpoint_test_support.hpp"

#include <ruda/checkpoint/checkpoint_file.hpp>

#include <cereal/types/map.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ruda::test {

// A section of several types: what an optimizer's state looks like to cereal.
struct optimizer_state {
    std::uint64_t step = 0;
    std::vector<double> moments;
    std::map<std::string, float> hyper;

    template <class Archive>
    void serialize(Archive& ar)
    {
        ar(step, moments, hyper);
    }
    friend bool operator==(const optimizer_state&, const optimizer_state&) = default;
};

inline ruda::checkpoint sample_checkpoint()
{
    ruda::checkpoint c{ruda::test::valid_sample()};
    c.put("step", std::uint64_t{1234}).value();
    c.put("optimizer", optimizer_state{7, {0.5, -1e-300, 3.0}, {{"lr", 0.01F}, {"beta", 0.9F}}})
        .value();
    c.put("rng", std::string("mt19937 state ...")).value();
    return c;
}

// Saves the sample and returns its path.
inline std::filesystem::path saved_sample(const temp_dir& dir)
{
    const auto path = dir / "sample.ruda";
    BOOST_REQUIRE(ruda::save_checkpoint_file(path, sample_checkpoint()));
    return path;
}

inline void expect_load_error(const std::filesystem::path& path, ruda::errc code,
                              const std::string& text,
                              const ruda::checkpoint_load_options& options = {})
{
    const auto loaded = ruda::load_checkpoint_file(path, options);
    BOOST_REQUIRE(!loaded);
    BOOST_TEST(loaded.error() == code);
    BOOST_TEST(loaded.error().message().find(text) != std::string::npos,
               "\"" << loaded.error().message() << "\" should contain \"" << text << "\"");
}

// A one-line file edit: `edit` changes the bytes.
inline void edit_file(const std::filesystem::path& path,
                      const std::function<void(std::vector<std::uint8_t>&)>& edit)
{
    auto bytes = ruda::test::read_bytes(path);
    edit(bytes);
    ruda::test::write_bytes(path, bytes);
}

// Stands for a full disk, a failing fsync or rename...: fails call number `fail_at` (counting
// every operation from 1), and may write at most `chunk` bytes per write call.
class faulty_ops : public ruda::file_ops {
public:
    int fail_at = 0;
    std::size_t chunk = 0;
    int calls = 0;

    ruda::result<int> create(const std::filesystem::path& p) override
    {
        return fail() ? injected() : ruda::file_ops::create(p);
    }
    ruda::result<std::size_t> write(int fd, const void* data, std::size_t size) override
    {
        if (fail()) {
            return injected();
        }
        return ruda::file_ops::write(fd, data, chunk != 0 ? std::min(size, chunk) : size);
    }
    ruda::result<void> pwrite(int fd, const void* data, std::size_t size,
                              std::uint64_t offset) override
    {
        return fail() ? injected() : ruda::file_ops::pwrite(fd, data, size, offset);
    }
    ruda::result<void> fsync(int fd) override
    {
        return fail() ? injected() : ruda::file_ops::fsync(fd);
    }
    ruda::result<void> close(int fd) override
    {
        if (fail()) {
            (void)ruda::file_ops::close(fd); // a failed close still releases the descriptor
            return injected();
        }
        return ruda::file_ops::close(fd);
    }
    ruda::result<void> rename(const std::filesystem::path& from,
                              const std::filesystem::path& to) override
    {
        return fail() ? injected() : ruda::file_ops::rename(from, to);
    }
    ruda::result<void> sync_directory(const std::filesystem::path& dir) override
    {
        return fail() ? injected() : ruda::file_ops::sync_directory(dir);
    }

private:
    bool fail() { return ++calls == fail_at; }
    static ruda::error injected() { return {ruda::errc::io_error, "injected: no space left on device"}; }
};

} // namespace ruda::test
