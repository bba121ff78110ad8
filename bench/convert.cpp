// bench/convert: f32 -> f16 and f32 -> bf16 conversion speed against a memcpy of the same input,
// measured in the same run. Prints a markdown table of medians; --check fails below 0.5x.
//
//   convert [--mib N] [--reps N] [--check]      (defaults: 64 MiB, 9 repetitions)
#include "bench_util.hpp"

#include <ruda/ruda.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

using bench::median;
using bench::seconds;

struct bench_case {
    std::string name;
    std::string baseline; // the case this one's ratio is against
    std::function<void()> run;
    std::vector<double> times;
};

} // namespace

int main(int argc, char** argv)
{
    std::size_t mib = 64;
    int reps = 9;
    bool check = false;
    bench::command_line{}
        .option("--mib", mib)
        .option("--reps", reps)
        .flag("--check", check)
        .parse(argc, argv, [&] { return mib > 0 && reps >= 1; });

    const std::size_t n = mib * 1024 * 1024 / sizeof(float);
    std::vector<float> input(n);
    std::mt19937 rng(1);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::generate(input.begin(), input.end(), [&] { return dist(rng); });
    const auto gradient = ruda::tensor_data::from_values(input, {n}).value();

    // Reused outputs are written once first, so no case pays for page faults.
    std::vector<float> copy_out(n, 1.0f);
    std::vector<ruda::float16> f16_out(n, ruda::float16{1});
    std::vector<ruda::bfloat16> bf16_out(n, ruda::bfloat16{1});
    std::uint64_t sink = 0;

    std::vector<bench_case> cases;
    cases.push_back({"memcpy, reused buffer", "", [&] {
                         std::memcpy(copy_out.data(), input.data(), n * sizeof(float));
                         sink += std::bit_cast<std::uint32_t>(copy_out[n / 2]);
                     }, {}});
    cases.push_back({"f32 -> f16 bulk, reused buffer", "memcpy, reused buffer", [&] {
                         ruda::convert(std::span<const float>(input), std::span(f16_out));
                         sink += f16_out[n / 2].bits;
                     }, {}});
    cases.push_back({"f32 -> bf16 bulk, reused buffer", "memcpy, reused buffer", [&] {
                         ruda::convert(std::span<const float>(input), std::span(bf16_out));
                         sink += bf16_out[n / 2].bits;
                     }, {}});
    cases.push_back({"memcpy, fresh buffer", "", [&] {
                         std::vector<std::uint8_t> fresh(n * sizeof(float));
                         std::memcpy(fresh.data(), input.data(), fresh.size());
                         sink += fresh[fresh.size() / 2];
                     }, {}});
    cases.push_back({"tensor_data::convert f16, fresh buffer", "memcpy, fresh buffer", [&] {
                         auto out = gradient.convert(ruda::dtype::f16()).value();
                         sink += out.bytes()[out.bytes().size() / 2];
                     }, {}});
    cases.push_back({"tensor_data::convert bf16, fresh buffer", "memcpy, fresh buffer", [&] {
                         auto out = gradient.convert(ruda::dtype::bf16()).value();
                         sink += out.bytes()[out.bytes().size() / 2];
                     }, {}});

    // Interleave the cases in every repetition so that machine noise hits all of them alike.
    for (int r = 0; r < reps; ++r) {
        for (auto& c : cases) {
            c.times.push_back(seconds(c.run));
        }
    }

    const double input_gb = static_cast<double>(n * sizeof(float)) / 1e9;
    std::printf("f32 input: %zu MiB, %d repetitions, bulk path %s (checksum %llu)\n\n", mib, reps,
                ruda::half_conversion_path(), static_cast<unsigned long long>(sink % 1000));
    std::printf("| case | median ms | input GB/s | ratio to baseline |\n|---|---:|---:|---:|\n");
    bool ok = true;
    for (const auto& c : cases) {
        const double t = median(c.times);
        double ratio = 1.0;
        if (!c.baseline.empty()) {
            const auto base = std::find_if(cases.begin(), cases.end(),
                                           [&](const bench_case& b) { return b.name == c.baseline; });
            ratio = median(base->times) / t;
            ok = ok && (ratio >= 0.5 || c.baseline != "memcpy, reused buffer");
        }
        std::printf("| %s | %.2f | %.2f | %s |\n", c.name.c_str(), t * 1e3, input_gb / t,
                    c.baseline.empty() ? "baseline" : (std::to_string(ratio).substr(0, 4) + "x " + c.baseline).c_str());
    }
    std::printf("\ntarget: bulk f32 -> f16 and f32 -> bf16 at >= 0.5x memcpy: %s\n",
                ok ? "met" : "MISSED");
    return check && !ok ? 1 : 0;
}
