// The memory a load may take, held on the files that cost the most per byte: a checkpoint or a
// safetensors file of many tiny items peaks at no more than its own size plus 1 KiB per tensor
// or section (docs/CHECKPOINTS.md). Each load runs in a child process whose peak resident size
// is reset first, so the figure is the load's alone. Sanitizers change every allocation's
// size, so under them the loads run (on fewer items) and the bound is not checked.
#include "checkpoint_test_support.hpp"

#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/checkpoint/safetensors.hpp>

#include <boost/test/unit_test.hpp>

#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <string>

namespace {

using ruda::test::temp_dir;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool sanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool sanitized = true;
#else
constexpr bool sanitized = false;
#endif
#else
constexpr bool sanitized = false;
#endif

// Fewer under the sanitizers, where the loads run for their checks alone and cost ten times as much.
constexpr std::size_t items = sanitized ? 10000 : 100000;
constexpr std::uint64_t per_item = 1024;

// A field of /proc/self/status in KiB ("VmHWM", "VmRSS").
long status_kib(const std::string& field)
{
    std::ifstream status{"/proc/self/status"};
    std::string line;
    while (std::getline(status, line)) {
        if (line.starts_with(field + ":")) {
            return std::stol(line.substr(field.size() + 1));
        }
    }
    return -1;
}

struct peak {
    bool loaded = false;
    std::uint64_t bytes = 0; // how far the peak resident size rose during the load
};

// Runs `load` in a child with its freed memory returned and its peak reset.
peak measured(const std::function<bool()>& load)
{
    int out[2];
    BOOST_REQUIRE(::pipe(out) == 0);
    std::fflush(nullptr); // or the child's exit would write the test log's buffered lines again
    const pid_t child = ::fork();
    BOOST_REQUIRE(child >= 0);
    if (child == 0) {
        ::malloc_trim(0);
        std::ofstream{"/proc/self/clear_refs"} << "5"; // the peak restarts from the current size
        const long before = status_kib("VmHWM");
        peak p;
        p.loaded = load();
        const long after = status_kib("VmHWM");
        p.bytes = before < 0 || after < before ? ~std::uint64_t{0}
                                               : static_cast<std::uint64_t>(after - before) * 1024;
        const bool sent = ::write(out[1], &p, sizeof p) == static_cast<ssize_t>(sizeof p);
        ::_exit(sent ? 0 : 1);
    }
    ::close(out[1]);
    peak p;
    const bool received = ::read(out[0], &p, sizeof p) == static_cast<ssize_t>(sizeof p);
    ::close(out[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    BOOST_REQUIRE(received);
    return p;
}

void check_bound(const std::filesystem::path& file, const std::function<bool()>& load)
{
    const auto p = measured(load);
    BOOST_TEST(p.loaded);
    const std::uint64_t bound = std::filesystem::file_size(file) + items * per_item;
    BOOST_TEST_MESSAGE(file.filename().string() << ": " << std::filesystem::file_size(file)
                                                << " bytes, the load's peak rose by " << p.bytes
                                                << ", bound " << bound);
    if (!sanitized) {
        BOOST_TEST(p.bytes <= bound);
    }
}

ruda::gradients_params_record tiny_entries(const ruda::shape& dims)
{
    std::vector<ruda::gradient_entry> entries;
    entries.reserve(items);
    const auto f32 = ruda::dtype::f32();
    const std::size_t bytes = dims.empty() || dims[0] != 0 ? 4 : 0;
    for (std::size_t id = 0; id < items; ++id) {
        entries.push_back({ruda::param_id{id}, f32, ruda::tensor_data{std::vector<std::uint8_t>(bytes, 1), dims, f32}});
    }
    return ruda::gradients_params_record{std::move(entries)};
}

} // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_memory)

BOOST_AUTO_TEST_CASE(a_checkpoint_of_many_tiny_items_loads_within_its_bound)
{
    const temp_dir dir;
    const auto load = [](const std::filesystem::path& path) {
        return [path] { return ruda::load_checkpoint_file(path).has_value(); };
    };
    // Entries of one value, of none, and of 64 dimensions (the most), then one-byte sections.
    const std::vector<std::pair<std::string, ruda::shape>> kinds{
        {"scalars.ruda", {1}}, {"empty.ruda", {0}}, {"deep.ruda", ruda::shape(64, 1)}};
    for (const auto& [name, dims] : kinds) {
        BOOST_REQUIRE(ruda::save_checkpoint_file(dir / name, ruda::checkpoint{tiny_entries(dims)}));
        check_bound(dir / name, load(dir / name));
    }
    ruda::checkpoint sections;
    for (std::size_t k = 0; k < items; ++k) {
        BOOST_REQUIRE(sections.put_bytes(std::to_string(k), {1}));
    }
    BOOST_REQUIRE(ruda::save_checkpoint_file(dir / "sections.ruda", sections));
    check_bound(dir / "sections.ruda", load(dir / "sections.ruda"));
}

BOOST_AUTO_TEST_CASE(a_safetensors_file_of_many_tiny_tensors_imports_within_its_bound)
{
    const temp_dir dir;
    const auto path = dir / "many.safetensors";
    BOOST_REQUIRE(ruda::export_safetensors(tiny_entries({1}), path));
    check_bound(path, [&path] { return ruda::import_safetensors(path).has_value(); });
}

BOOST_AUTO_TEST_SUITE_END()
