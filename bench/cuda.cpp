// bench/cuda: snapshots of gradients in GPU memory through cuda_backend, against the link's
// limit measured in the same run (one pinned device-to-host copy per tensor, back to back on
// one stream) and against one synchronous copy per tensor (what `.cpu()` does per tensor).
//
//   cuda [--tensors 64] [--mib-per-tensor 64] [--small 20000] [--small-bytes 1024] [--reps 3]
//        [--driver libcuda.so.1] [--json PATH]
//
// Without a driver or a GPU it prints "skipped: <reason>" and writes {"available": 0}.
#include "bench_util.hpp"

#include <ruda/backend/cuda_backend.hpp>
#include <ruda/backend/detail/cuda_driver.hpp>
#include <ruda/optim/gradients_params.hpp>

#include <cstring>
#include <iostream>
#include <map>
#include <string>
#include <vector>

namespace {

namespace drv = ruda::detail::cuda;
using cuda = ruda::cuda_backend;

struct args {
    std::size_t tensors = 64;
    std::size_t mib_per_tensor = 64;
    std::size_t small = 20000;
    std::size_t small_bytes = 1024;
    int reps = 3;
    std::string driver = "libcuda.so.1";
    std::string json;
};

args parse(int argc, char** argv)
{
    args a;
    bench::command_line{}
        .option("--tensors", a.tensors)
        .option("--mib-per-tensor", a.mib_per_tensor)
        .option("--small", a.small)
        .option("--small-bytes", a.small_bytes)
        .option("--reps", a.reps)
        .option("--driver", a.driver, "LIBRARY")
        .option("--json", a.json, "PATH")
        .parse(argc, argv, [&a] { return a.reps >= 1; });
    return a;
}

void check(drv::CUresult status, const char* what)
{
    if (status != drv::cuda_success) {
        std::cerr << what << " failed: CUDA error " << status << "\n";
        std::exit(1);
    }
}

// The bench's own driver calls, in the primary context, on this thread.
struct raw {
    explicit raw(const drv::driver& d) : api(d)
    {
        check(api.cuDevicePrimaryCtxRetain(&context, 0), "cuDevicePrimaryCtxRetain");
        check(api.cuCtxSetCurrent(context), "cuCtxSetCurrent");
        check(api.cuStreamCreate(&stream, drv::stream_non_blocking), "cuStreamCreate");
        check(api.cuEventCreate(&begin, drv::event_default), "cuEventCreate");
        check(api.cuEventCreate(&end, drv::event_default), "cuEventCreate");
    }
    ~raw()
    {
        api.cuCtxSetCurrent(context);
        for (const drv::CUdeviceptr p : allocations) {
            api.cuMemFree(p);
        }
        api.cuEventDestroy(begin);
        api.cuEventDestroy(end);
        api.cuStreamDestroy(stream);
        api.cuDevicePrimaryCtxRelease(0);
    }
    raw(const raw&) = delete;
    raw& operator=(const raw&) = delete;

    drv::CUdeviceptr alloc(std::size_t bytes)
    {
        drv::CUdeviceptr p = 0;
        check(api.cuMemAlloc(&p, bytes), "cuMemAlloc");
        allocations.push_back(p);
        return p;
    }
    void sync() { check(api.cuStreamSynchronize(stream), "cuStreamSynchronize"); }
    // Milliseconds of GPU time between the two events.
    float elapsed_ms()
    {
        check(api.cuEventSynchronize(end), "cuEventSynchronize");
        float ms = 0;
        check(api.cuEventElapsedTime(&ms, begin, end), "cuEventElapsedTime");
        return ms;
    }

    const drv::driver& api;
    std::vector<drv::CUdeviceptr> allocations;
    drv::CUcontext context = nullptr;
    drv::CUstream stream = nullptr;
    drv::CUevent begin = nullptr;
    drv::CUevent end = nullptr;
};

// Pinned host memory the bench's own baseline copies land in.
struct pinned_buffer {
    pinned_buffer(const drv::driver& d, std::size_t n) : api(d), bytes(n)
    {
        data = static_cast<std::uint8_t*>(std::aligned_alloc(4096, (n + 4095) / 4096 * 4096));
        std::memset(data, 0, n);
        check(api.cuMemHostRegister(data, (n + 4095) / 4096 * 4096, 1), "cuMemHostRegister");
    }
    ~pinned_buffer()
    {
        api.cuMemHostUnregister(data);
        std::free(data);
    }
    const drv::driver& api;
    std::size_t bytes;
    std::uint8_t* data;
};

ruda::gradients_params borrowed_tensors(raw& gpu, const ruda::cuda_device& device,
                                        drv::CUdeviceptr base, std::size_t count,
                                        std::size_t bytes)
{
    ruda::gradients_params grads;
    for (std::size_t i = 0; i < count; ++i) {
        grads.insert<cuda>(ruda::param_id{i + 1},
                           cuda::borrow(device, base + i * bytes, {bytes / 4}, ruda::dtype::f32(),
                                        gpu.stream, nullptr)
                               .value());
    }
    return grads;
}

} // namespace

int main(int argc, char** argv)
{
    const args a = parse(argc, argv);
    bench::figures out;
    auto device = ruda::cuda_device::open({.driver_library = a.driver});
    if (!device) {
        std::cout << "skipped: " << device.error().message() << "\n";
        out.add("available", 0);
        if (!a.json.empty()) {
            out.write(a.json);
        }
        return 0;
    }
    const drv::driver& api = *drv::open_driver(a.driver).value();
    raw gpu{api};
    std::cout << "device: " << device.value().name() << ", driver " << device.value().driver_version()
              << "\n";
    out.add("available", 1);

    // Large: `tensors` tensors of `mib_per_tensor` MiB in one allocation, filled with a pattern.
    const std::size_t tensor_bytes = a.mib_per_tensor << 20U;
    const std::size_t total = tensor_bytes * a.tensors;
    const drv::CUdeviceptr large = gpu.alloc(total);
    {
        pinned_buffer pattern{api, tensor_bytes};
        for (std::size_t i = 0; i < tensor_bytes; ++i) {
            pattern.data[i] = static_cast<std::uint8_t>(i * 131U + 7U);
        }
        for (std::size_t t = 0; t < a.tensors; ++t) {
            check(api.cuMemcpyHtoDAsync(large + t * tensor_bytes, pattern.data, tensor_bytes, gpu.stream),
                  "cuMemcpyHtoDAsync");
        }
        gpu.sync();
    }

    // The link's limit: every tensor copied into pinned memory, back to back on one stream.
    double limit_s = 0;
    {
        pinned_buffer target{api, total};
        limit_s = bench::median_of(a.reps + 1, [&] {
            return bench::seconds([&] {
                for (std::size_t t = 0; t < a.tensors; ++t) {
                    check(api.cuMemcpyDtoHAsync(target.data + t * tensor_bytes, large + t * tensor_bytes,
                                                tensor_bytes, gpu.stream),
                          "cuMemcpyDtoHAsync");
                }
                gpu.sync();
            });
        });
    }
    out.add("large_bytes", static_cast<double>(total));
    out.add("pinned_limit_s", limit_s);
    std::cout << "pinned D2H limit: " << static_cast<double>(total) / limit_s / 1e9 << " GB/s\n";

    // ruda: the first snapshot pins its record buffers; later ones reuse them.
    auto grads = borrowed_tensors(gpu, device.value(), large, a.tensors, tensor_bytes);
    std::optional<ruda::gradients_params_record> kept;
    const double first_s = bench::seconds([&] { kept = bench::run(grads.to_record_async<cuda>()); });
    {
        // Verify the bytes once.
        const auto& entry = kept->entries().back();
        for (std::size_t i = 0; i < tensor_bytes; i += 4099) {
            if (entry.data.bytes()[i] != static_cast<std::uint8_t>(i * 131U + 7U)) {
                std::cerr << "snapshot bytes differ at " << i << "\n";
                return 1;
            }
        }
    }
    kept.reset();
    const double snapshot_s = bench::median_of(a.reps, [&] {
        return bench::seconds([&] { (void)bench::run(grads.to_record_async<cuda>()); });
    });
    out.add("first_snapshot_s", first_s);
    out.add("snapshot_s", snapshot_s);
    std::cout << "snapshot: " << static_cast<double>(total) / snapshot_s / 1e9 << " GB/s ("
              << limit_s / snapshot_s << "x the limit); first (pins): " << first_s << " s\n";

    // Restore: uploads through the pinned staging ring.
    {
        auto record = bench::run(grads.to_record_async<cuda>());
        const double restore_s = bench::seconds([&] {
            auto restored = ruda::gradients_params::from_record<cuda>(std::move(record), device.value());
            if (!restored) {
                std::cerr << "restore failed: " << restored.error().message() << "\n";
                std::exit(1);
            }
            check(device.value().order_after_uploads(gpu.stream).has_value() ? 0 : 1, "order_after_uploads");
            gpu.sync();
        });
        out.add("restore_s", restore_s);
        std::cout << "restore: " << static_cast<double>(total) / restore_s / 1e9 << " GB/s\n";
    }

    // Device-side staging: the trainer's stream is held only for the device-to-device copy,
    // and the host only for the call.
    {
        auto staging = ruda::cuda_device::open({.driver_library = a.driver,
                                                .device_staging_bytes = total + (1U << 20U)})
                           .value();
        auto staged_grads = borrowed_tensors(gpu, staging, large, a.tensors, tensor_bytes);
        (void)bench::run(staged_grads.to_record_async<cuda>()); // pins the record buffers
        std::vector<double> host_ms;
        std::vector<double> gpu_ms;
        std::vector<double> drained_s;
        for (int r = 0; r < a.reps; ++r) {
            check(api.cuEventRecord(gpu.begin, gpu.stream), "cuEventRecord");
            const auto start = bench::clock_type::now();
            auto pending = staged_grads.to_record_async<cuda>();
            const auto returned = bench::clock_type::now();
            check(api.cuEventRecord(gpu.end, gpu.stream), "cuEventRecord"); // the trainer's next kernel
            (void)bench::run(std::move(pending));
            const auto drained = bench::clock_type::now();
            host_ms.push_back(std::chrono::duration<double, std::milli>(returned - start).count());
            gpu_ms.push_back(gpu.elapsed_ms());
            drained_s.push_back(std::chrono::duration<double>(drained - start).count());
        }
        out.add("staged_host_blocked_ms", bench::median(host_ms));
        out.add("staged_stream_held_ms", bench::median(gpu_ms));
        out.add("staged_done_s", bench::median(drained_s));
        std::cout << "device staging: host blocked " << bench::median(host_ms)
                  << " ms, trainer stream held " << bench::median(gpu_ms) << " ms, in host memory after "
                  << bench::median(drained_s) << " s\n";
    }

    // Small: many tiny tensors, against one synchronous copy each.
    {
        const drv::CUdeviceptr base = gpu.alloc(a.small * a.small_bytes);
        auto small = borrowed_tensors(gpu, device.value(), base, a.small, a.small_bytes);
        pinned_buffer target{api, a.small_bytes};
        const double per_copy_s = bench::median_of(a.reps, [&] {
            return bench::seconds([&] {
                for (std::size_t i = 0; i < a.small; ++i) {
                    check(api.cuMemcpyDtoHAsync(target.data, base + i * a.small_bytes, a.small_bytes,
                                                gpu.stream),
                          "cuMemcpyDtoHAsync");
                    gpu.sync();
                }
            });
        }) / static_cast<double>(a.small);
        const ruda::snapshot_options wide{.max_in_flight = 4096,
                                          .max_in_flight_bytes = std::size_t{1} << 30U};
        (void)bench::run(small.to_record_async<cuda>(wide)); // pins the record buffers
        const double per_tensor_s = bench::median_of(a.reps, [&] {
            return bench::seconds([&] { (void)bench::run(small.to_record_async<cuda>(wide)); });
        }) / static_cast<double>(a.small);
        out.add("small_tensors", static_cast<double>(a.small));
        out.add("small_sync_copy_us", per_copy_s * 1e6);
        out.add("small_per_tensor_us", per_tensor_s * 1e6);
        std::cout << "small: " << per_tensor_s * 1e6 << " us per tensor; a synchronous copy each: "
                  << per_copy_s * 1e6 << " us\n";
    }
    if (!a.json.empty()) {
        out.write(a.json);
    }
    return 0;
}
