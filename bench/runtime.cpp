// bench/runtime: what bounded concurrency buys on a device with latency, and what ruda's
// runtime costs per read. Part 1 reads 256 tensors of 2 ms latency each from an async_device
// through `gather` with windows 1, 4, 16 and 64; the baseline is window 1 in the same run.
// Part 2 reads tiny cpu_backend tensors, so the time per read is the runtime's own overhead
// on top of the copy, which is timed alone as the baseline. Prints markdown tables of medians.
// --check fails when window 16 is under 12x faster than window 1.
//
//   runtime [--reads N] [--latency-ms N] [--reps N] [--cpu-reads N] [--check]
#include "bench_util.hpp"

#include <ruda/ruda.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace {

using bench::median;
using bench::run;
using bench::seconds;

template <class Tensor, class Read>
boost::asio::awaitable<ruda::result<std::vector<ruda::tensor_data>>>
read_all(const std::vector<Tensor>& tensors, std::size_t window, Read read)
{
    const auto read_one = [&tensors, read](std::size_t i) { return read(tensors[i]); };
    co_return co_await ruda::gather(tensors.size(), window, read_one);
}

} // namespace

int main(int argc, char** argv)
{
    std::size_t reads = 256;
    long latency_ms = 2;
    int reps = 3;
    std::size_t cpu_reads = 200000;
    bool check = false;
    bench::command_line{}
        .option("--reads", reads)
        .option("--latency-ms", latency_ms)
        .option("--reps", reps)
        .option("--cpu-reads", cpu_reads)
        .flag("--check", check)
        .parse(argc, argv,
               [&] { return reads > 0 && latency_ms >= 0 && reps >= 1 && cpu_reads > 0; });

    // Part 1: latency hiding. 64 transfer engines, so the window is the only limit.
    const ruda::async_device device{{.latency = std::chrono::milliseconds(latency_ms),
                                     .concurrent_transfers = 64}};
    std::vector<ruda::async_backend::float_tensor> on_device;
    for (std::size_t i = 0; i < reads; ++i) {
        auto data = ruda::tensor_data::from_values(std::vector<float>(256, float(i)), {256});
        on_device.push_back(ruda::async_backend::float_from_data(std::move(data).value(), device)
                                .value());
    }
    const auto device_read = [](const ruda::async_backend::float_tensor& t) {
        return ruda::async_backend::float_into_data(t);
    };
    std::printf("## gather over async_device: %zu reads, %ld ms latency each, median of %d\n\n",
                reads, latency_ms, reps);
    std::printf("| window | wall ms | ideal ms | speed-up vs window 1 | peak in flight |\n");
    std::printf("|---:|---:|---:|---:|---:|\n");
    double window1 = 0;
    double window16_speedup = 0;
    for (const std::size_t window : {1U, 4U, 16U, 64U}) {
        std::vector<double> times;
        std::size_t peak = 0;
        for (int r = 0; r < reps; ++r) {
            device.reset_peak();
            times.push_back(seconds([&] {
                const auto all = run(read_all(on_device, window, device_read));
                if (all.size() != reads) {
                    std::exit(1);
                }
            }));
            peak = std::max(peak, device.stats().peak_in_flight);
        }
        const double wall = median(times);
        if (window == 1) {
            window1 = wall;
        }
        const double speedup = window1 / wall;
        if (window == 16) {
            window16_speedup = speedup;
        }
        const double ideal_ms = static_cast<double>((reads + window - 1) / window) *
                                static_cast<double>(latency_ms);
        std::printf("| %zu | %.1f | %.1f | %.2fx | %zu |\n", window, wall * 1e3, ideal_ms,
                    speedup, peak);
    }

    // Part 2: the runtime's own cost per read, on reads that complete at once.
    std::vector<ruda::cpu_backend::float_tensor> on_host;
    for (std::size_t i = 0; i < cpu_reads; ++i) {
        auto data = ruda::tensor_data::from_values(std::vector<float>{float(i)}, {1});
        on_host.push_back(ruda::cpu_backend::float_from_data(std::move(data).value(), {}).value());
    }
    const auto host_read = [](const ruda::cpu_backend::float_tensor& t) {
        return ruda::cpu_backend::float_into_data(t);
    };
    std::vector<double> copy_times;
    std::vector<double> gather_times;
    std::vector<double> sync_times;
    std::size_t sink = 0;
    const std::size_t sync_reads = std::min<std::size_t>(cpu_reads, 20000);
    for (int r = 0; r < reps; ++r) {
        copy_times.push_back(seconds([&] {
            for (const auto& t : on_host) {
                const ruda::tensor_data copy = t.data();
                sink += copy.bytes().size();
            }
        }));
        gather_times.push_back(seconds([&] { sink += run(read_all(on_host, 16, host_read)).size(); }));
        sync_times.push_back(seconds([&] {
            for (std::size_t i = 0; i < sync_reads; ++i) {
                auto data = ruda::try_read_sync([&] { return host_read(on_host[i]); });
                sink += data ? data.value().bytes().size() : 0;
            }
        }));
    }
    const double per_copy = median(copy_times) / static_cast<double>(cpu_reads) * 1e6;
    const double per_gather = median(gather_times) / static_cast<double>(cpu_reads) * 1e6;
    const double per_sync = median(sync_times) / static_cast<double>(sync_reads) * 1e6;
    std::printf("\n## per-read cost on cpu_backend (4-byte tensors), median of %d\n\n", reps);
    std::printf("| path | reads | us per read | overhead over the copy, us |\n");
    std::printf("|---|---:|---:|---:|\n");
    std::printf("| tensor_data copy (baseline) | %zu | %.3f | - |\n", cpu_reads, per_copy);
    std::printf("| gather, window 16 | %zu | %.3f | %.3f |\n", cpu_reads, per_gather,
                per_gather - per_copy);
    std::printf("| try_read_sync, one read each | %zu | %.3f | %.3f |\n", sync_reads, per_sync,
                per_sync - per_copy);
    std::printf("\n(checksum %zu)\n", sink);

    if (check && window16_speedup < 12.0) {
        std::fprintf(stderr, "FAIL: window 16 is %.2fx faster than window 1, under 12x\n",
                     window16_speedup);
        return 1;
    }
    return 0;
}
