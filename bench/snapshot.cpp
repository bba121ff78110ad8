// bench/snapshot: what a gradient snapshot (`to_record_async`) costs, each case against a
// baseline measured in the same run.
//   (a) large tensors on cpu_backend (64 x 4 MiB f32): throughput against a memcpy of the same
//       bytes into freshly allocated buffers, the least any host-owned snapshot must do;
//   (b) many small tensors on cpu_backend (100,000 x 16 f32): microseconds per tensor, the
//       runtime's own cost, with a bare copy of each tensor as the floor;
//   (c) async_backend with 2 ms per read (256 tensors): wall time with the default options,
//       and with windows of 1, 4, 16 and 64 reads in flight (--windows), against the reference
//       implementation's loop, which awaits one read at a time.
// Baselines and snapshots alternate; figures are medians. --json writes the figures for
// bench/run. --check fails when (a) is under 0.8x, (b) over 2 us per tensor, or (c) with the
// defaults under 6x.
//
//   snapshot [--tensors N] [--mib-per-tensor N] [--small N] [--device-tensors N]
//            [--latency-ms N] [--windows N,N,...] [--reps N] [--json PATH] [--check]
#include "bench_util.hpp"

#include <ruda/ruda.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

using bench::median;
using bench::run;
using bench::seconds;
using cpu = ruda::cpu_backend;
using gpu = ruda::async_backend;

template <ruda::backend B>
ruda::gradients_params make_grads(std::size_t count, std::size_t floats,
                                  const typename B::device& device)
{
    ruda::gradients_params grads;
    for (std::size_t i = 0; i < count; ++i) {
        std::vector<float> values(floats);
        for (std::size_t k = 0; k < floats; ++k) {
            values[k] = static_cast<float>(i) + static_cast<float>(k) * 1e-3F;
        }
        auto data = ruda::tensor_data::from_values(std::move(values), {floats}).value();
        grads.insert<B>(ruda::param_id{i + 1}, B::float_from_data(std::move(data), device).value());
    }
    return grads;
}

// The sources of `grads`' cpu tensors, in id order.
std::vector<const ruda::tensor_data*> sources(const ruda::gradients_params& grads)
{
    std::vector<const ruda::tensor_data*> out;
    for (const ruda::param_id id : grads.ids()) {
        out.push_back(&std::get<cpu::float_tensor>(*grads.get<cpu>(id)).data());
    }
    return out;
}

// The reference implementation's snapshot: every read awaited before the next starts.
boost::asio::awaitable<ruda::result<std::vector<ruda::gradient_entry>>>
one_read_at_a_time(const ruda::gradients_params& grads)
{
    std::vector<ruda::gradient_entry> entries;
    for (const ruda::param_id id : grads.ids()) {
        const auto tensor = grads.get<gpu>(id);
        auto data = co_await ruda::into_data<gpu>(*tensor);
        if (!data) {
            co_return data.error();
        }
        entries.push_back({id, ruda::dtype_of<gpu>(*tensor), std::move(data).value()});
    }
    co_return entries;
}

struct settings {
    std::size_t tensors = 64;
    std::size_t mib_per_tensor = 4;
    std::size_t small = 100000;
    std::size_t device_tensors = 256;
    long latency_ms = 2;
    std::vector<std::size_t> windows{1, 4, 16, 64};
    int reps = 5;
    std::optional<std::string> json;
    bool check = false;
};

// "1,4,16" -> {1, 4, 16}; empty when any item is not a positive number.
std::vector<std::size_t> parse_list(const std::string& text)
{
    std::vector<std::size_t> out;
    std::size_t start = 0;
    while (start <= text.size()) {
        const std::size_t end = std::min(text.find(',', start), text.size());
        const std::string item = text.substr(start, end - start);
        char* rest = nullptr;
        const unsigned long value = std::strtoul(item.c_str(), &rest, 10);
        if (item.empty() || *rest != '\0' || value == 0) {
            return {};
        }
        out.push_back(value);
        start = end + 1;
    }
    return out;
}

void parse(int argc, char** argv, settings& s)
{
    bench::command_line{}
        .option("--tensors", s.tensors)
        .option("--mib-per-tensor", s.mib_per_tensor)
        .option("--small", s.small)
        .option("--device-tensors", s.device_tensors)
        .option("--latency-ms", s.latency_ms)
        .option("--windows", "N,N,...",
                [&s](std::string_view list) {
                    s.windows = parse_list(std::string{list});
                    return true;
                })
        .option("--reps", s.reps)
        .option("--json", s.json, "PATH")
        .flag("--check", s.check)
        .parse(argc, argv, [&s] {
            return s.tensors > 0 && s.mib_per_tensor > 0 && s.small > 0 && s.device_tensors > 0 &&
                   s.latency_ms >= 0 && !s.windows.empty() && s.reps >= 1;
        });
}

} // namespace

int main(int argc, char** argv)
{
    settings s;
    parse(argc, argv, s);
    std::size_t sink = 0;

    // (a) Large tensors: snapshot throughput against memcpy into fresh buffers.
    const std::size_t floats = s.mib_per_tensor * (std::size_t{1} << 20U) / sizeof(float);
    const auto large = make_grads<cpu>(s.tensors, floats, {});
    const auto large_sources = sources(large);
    const double total_bytes = static_cast<double>(s.tensors * floats * sizeof(float));
    std::vector<double> memcpy_times;
    std::vector<double> large_times;
    for (int r = 0; r < s.reps; ++r) {
        {
            std::vector<std::unique_ptr<std::uint8_t[]>> copies(large_sources.size());
            memcpy_times.push_back(seconds([&] {
                for (std::size_t i = 0; i < large_sources.size(); ++i) {
                    const auto& bytes = large_sources[i]->bytes();
                    copies[i].reset(new std::uint8_t[bytes.size()]);
                    std::memcpy(copies[i].get(), bytes.data(), bytes.size());
                }
            }));
            sink += copies.back()[1];
        } // freed outside the timing, like the record below
        std::optional<ruda::gradients_params_record> record;
        large_times.push_back(seconds([&] { record.emplace(run(large.to_record_async<cpu>())); }));
        sink += record->entries().size();
    }
    const double memcpy_gbs = total_bytes / median(memcpy_times) / 1e9;
    const double large_gbs = total_bytes / median(large_times) / 1e9;
    const double large_ratio = large_gbs / memcpy_gbs;
    std::printf("## (a) %zu tensors x %zu MiB f32 on cpu_backend, median of %d\n\n", s.tensors,
                s.mib_per_tensor, s.reps);
    std::printf("| path | median ms | GB/s | ratio to baseline |\n|---|---:|---:|---:|\n");
    std::printf("| memcpy into fresh buffers (baseline) | %.2f | %.2f | 1.00x |\n",
                median(memcpy_times) * 1e3, memcpy_gbs);
    std::printf("| to_record_async | %.2f | %.2f | %.2fx |\n\n", median(large_times) * 1e3,
                large_gbs, large_ratio);

    // (b) Many small tensors: the cost per tensor.
    const auto small = make_grads<cpu>(s.small, 16, {});
    const auto small_sources = sources(small);
    std::vector<double> copy_times;
    std::vector<double> async_times;
    std::vector<double> sync_times;
    for (int r = 0; r < s.reps; ++r) {
        {
            std::vector<ruda::tensor_data> copies;
            copies.reserve(small_sources.size());
            copy_times.push_back(seconds([&] {
                for (const ruda::tensor_data* source : small_sources) {
                    copies.push_back(*source);
                }
            }));
            sink += copies.size();
        }
        std::optional<ruda::gradients_params_record> record;
        async_times.push_back(seconds([&] { record.emplace(run(small.to_record_async<cpu>())); }));
        sink += record->entries().size();
        record.reset();
        sync_times.push_back(seconds([&] { record.emplace(small.try_to_record<cpu>().value()); }));
        sink += record->entries().size();
    }
    const double per = 1e6 / static_cast<double>(s.small);
    const double copy_us = median(copy_times) * per;
    const double async_us = median(async_times) * per;
    const double sync_us = median(sync_times) * per;
    std::printf("## (b) %zu tensors x 16 f32 on cpu_backend, median of %d\n\n", s.small, s.reps);
    std::printf("| path | us per tensor | over the copy, us |\n|---|---:|---:|\n");
    std::printf("| tensor_data copy (floor) | %.3f | - |\n", copy_us);
    std::printf("| to_record_async | %.3f | %.3f |\n", async_us, async_us - copy_us);
    std::printf("| try_to_record | %.3f | %.3f |\n\n", sync_us, sync_us - copy_us);

    // (c) Latency hiding on a device with 2 ms per read. 64 transfer engines, so the reads in
    // flight are limited by the snapshot's options alone.
    const ruda::async_device device{{.latency = std::chrono::milliseconds(s.latency_ms),
                                     .bytes_per_second = 12e9, .concurrent_transfers = 64}};
    const auto on_device = make_grads<gpu>(s.device_tensors, 16384, device);
    const int device_reps = std::min(s.reps, 3);
    std::vector<double> serial_times;
    std::vector<double> windowed_times;
    std::vector<std::vector<double>> window_times(s.windows.size());
    std::vector<std::size_t> window_peaks(s.windows.size());
    std::size_t peak = 0;
    // One snapshot with `options`; returns the most reads that were in flight at once.
    const auto time_snapshot = [&](std::vector<double>& times, ruda::snapshot_options options) {
        device.reset_peak();
        times.push_back(seconds([&] {
            sink += run(on_device.to_record_async<gpu>(std::move(options))).entries().size();
        }));
        return device.stats().peak_in_flight;
    };
    for (int r = 0; r < device_reps; ++r) {
        serial_times.push_back(seconds([&] { sink += run(one_read_at_a_time(on_device)).size(); }));
        peak = std::max(peak, time_snapshot(windowed_times, {}));
        for (std::size_t w = 0; w < s.windows.size(); ++w) {
            window_peaks[w] = std::max(
                window_peaks[w], time_snapshot(window_times[w], {.max_in_flight = s.windows[w]}));
        }
    }
    const double serial = median(serial_times);
    const double windowed = median(windowed_times);
    const double speedup = serial / windowed;
    const ruda::snapshot_options defaults;
    std::printf("## (c) %zu tensors x 64 KiB on async_backend, %ld ms per read, median of %d\n\n",
                s.device_tensors, s.latency_ms, device_reps);
    std::printf("| path | wall ms | peak reads in flight | speed-up vs baseline |\n"
                "|---|---:|---:|---:|\n");
    std::printf("| one read at a time (reference, baseline) | %.1f | 1 | 1.00x |\n", serial * 1e3);
    std::printf("| to_record_async, defaults (%zu reads, %zu MiB in flight) | %.1f | %zu | %.2fx |\n",
                defaults.max_in_flight, defaults.max_in_flight_bytes >> 20U, windowed * 1e3, peak,
                speedup);
    for (std::size_t w = 0; w < s.windows.size(); ++w) {
        std::printf("| to_record_async, max_in_flight = %zu | %.1f | %zu | %.2fx |\n", s.windows[w],
                    median(window_times[w]) * 1e3, window_peaks[w],
                    serial / median(window_times[w]));
    }
    std::printf("\n(checksum %zu)\n", sink);

    if (s.json) {
        bench::figures f;
        f.add("large_memcpy_fresh_s", median(memcpy_times));
        f.add("large_snapshot_s", median(large_times));
        f.add("small_copy_us", copy_us);
        f.add("small_snapshot_us", async_us);
        f.add("small_try_to_record_us", sync_us);
        f.add("device_serial_s", serial);
        f.add("device_defaults_s", windowed);
        for (std::size_t w = 0; w < s.windows.size(); ++w) {
            f.add("device_window_" + std::to_string(s.windows[w]) + "_s", median(window_times[w]));
            f.add("device_window_" + std::to_string(s.windows[w]) + "_peak",
                  static_cast<double>(window_peaks[w]));
        }
        f.write(*s.json);
    }

    if (s.check) {
        int failed = 0;
        if (large_ratio < 0.8) {
            std::fprintf(stderr, "FAIL (a): %.2fx memcpy, under 0.8x\n", large_ratio);
            ++failed;
        }
        if (async_us > 2.0) {
            std::fprintf(stderr, "FAIL (b): %.3f us per tensor, over 2 us\n", async_us);
            ++failed;
        }
        if (speedup < 6.0) {
            std::fprintf(stderr, "FAIL (c): %.2fx the one-at-a-time loop, under 6x\n", speedup);
            ++failed;
        }
        return failed == 0 ? 0 : 1;
    }
    return 0;
}
