// bench/torch_cuda: a torch model's gradients on the GPU (16 Linear layers of 4096 x 4096, 1 GiB
// of f32) snapshotted through ruda, against what a C++ trainer does without ruda, in one run on
// the same tensors:
//   ruda: from_module(model, {gpu}) + to_record_async<cuda_backend> (reads ordered after
//   torch's current stream into pinned record buffers, reused from one snapshot to the next);
//   .cpu() of every .grad();
//   copy_(non_blocking) of every .grad() into pinned host tensors allocated once, then one
//   synchronize: the link's speed through torch.
// Then the host's time in the snapshot call when the device has a staging buffer (the trainer
// goes on as soon as it returns), per GiB. Figures are medians; --json writes them.
//
//   torch_cuda [--layers N] [--width N] [--reps N] [--json PATH]
//
// Without a libtorch with CUDA, a GPU or its driver, it prints "skipped: <reason>" and writes
// {"available": 0}.
#include "bench_util.hpp"

#include <ruda/optim/cuda_module_gradients.hpp>

#include <torch/cuda.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/types.h>
#include <torch/version.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace {

using cuda = ruda::cuda_backend;

struct settings {
    std::int64_t layers = 16;
    std::int64_t width = 4096;
    int reps = 5;
    std::string json;
};

ruda::gradients_params borrow(const torch::nn::Module& model, const ruda::cuda_device& gpu)
{
    auto grads = ruda::from_module(model, {gpu});
    if (!grads) {
        std::fprintf(stderr, "from_module: %s\n", grads.error().message().c_str());
        std::exit(1);
    }
    return std::move(grads).value();
}

int skipped(const settings& s, const std::string& why)
{
    std::printf("skipped: %s\n", why.c_str());
    if (!s.json.empty()) {
        bench::figures out;
        out.add("available", 0);
        out.write(s.json);
    }
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    settings s;
    bench::command_line{}
        .option("--layers", s.layers)
        .option("--width", s.width)
        .option("--reps", s.reps)
        .option("--json", s.json, "PATH")
        .parse(argc, argv, [&s] { return s.layers >= 1 && s.width >= 1 && s.reps >= 1; });
    if (!ruda::torch_has_cuda() || !torch::cuda::is_available()) {
        return skipped(s, "libtorch " TORCH_VERSION " has no CUDA here, or sees no GPU");
    }
    auto opened = ruda::cuda_device::open();
    if (!opened) {
        return skipped(s, opened.error().message());
    }
    const ruda::cuda_device gpu = opened.value();

    const c10::Device device{c10::kCUDA, 0};
    torch::nn::Sequential model;
    for (std::int64_t i = 0; i < s.layers; ++i) {
        model->push_back(torch::nn::Linear(torch::nn::LinearOptions(s.width, s.width)));
    }
    model->to(device);
    std::vector<at::Tensor> grads;
    std::size_t total = 0;
    for (auto& p : model->parameters()) {
        p.mutable_grad() = torch::randn_like(p);
        grads.push_back(p.grad());
        total += p.grad().nbytes();
    }
    torch::cuda::synchronize();
    const double gib = static_cast<double>(total) / static_cast<double>(1U << 30U);
    std::printf("%zu gradients, %.3f GiB of f32 on %s (libtorch %s, driver %d)\n", grads.size(),
                gib, gpu.name().c_str(), TORCH_VERSION, gpu.driver_version());

    // ruda, after one snapshot that pins the record buffers.
    auto borrowed = borrow(*model, gpu);
    (void)bench::run(borrowed.to_record_async<cuda>());
    const double ruda_s = bench::median_of(s.reps, [&] {
        return bench::seconds([&] { (void)bench::run(borrowed.to_record_async<cuda>()); });
    });

    const double cpu_s = bench::median_of(s.reps, [&] {
        std::vector<at::Tensor> copies;
        return bench::seconds([&] {
            for (const auto& g : grads) {
                copies.push_back(g.cpu());
            }
        });
    });

    std::vector<at::Tensor> pinned;
    for (const auto& g : grads) {
        pinned.push_back(torch::empty(g.sizes(), g.options().device(c10::kCPU).pinned_memory(true)));
    }
    const double pinned_s = bench::median_of(s.reps, [&] {
        return bench::seconds([&] {
            for (std::size_t i = 0; i < grads.size(); ++i) {
                pinned[i].copy_(grads[i], /*non_blocking=*/true);
            }
            torch::cuda::synchronize();
        });
    });

    // Device staging: the call copies the gradients on the GPU and returns; the reads drain
    // from the staging buffer afterwards.
    auto staging = ruda::cuda_device::open({.device_staging_bytes = total + (1U << 20U)});
    if (!staging) {
        std::fprintf(stderr, "device staging: %s\n", staging.error().message().c_str());
        return 1;
    }
    auto staged = borrow(*model, staging.value());
    (void)bench::run(staged.to_record_async<cuda>());
    const double blocked_ms = bench::median_of(s.reps, [&] {
        const auto start = bench::clock_type::now();
        auto pending = staged.to_record_async<cuda>();
        const auto returned = bench::clock_type::now();
        (void)bench::run(std::move(pending));
        return std::chrono::duration<double, std::milli>(returned - start).count();
    });

    const double gb = static_cast<double>(total) / 1e9;
    std::printf("\n| what | s | GB/s | ruda's ratio | target | met |\n|---|---:|---:|---:|---:|---|\n");
    std::printf("| ruda snapshot (from_module + to_record_async) | %.4f | %.2f | | | |\n", ruda_s,
                gb / ruda_s);
    std::printf("| copy_(non_blocking) into pinned, synchronize | %.4f | %.2f | %.2fx | >= 0.8x | %s |\n",
                pinned_s, gb / pinned_s, pinned_s / ruda_s, pinned_s / ruda_s >= 0.8 ? "yes" : "no");
    std::printf("| .cpu() of every .grad() | %.4f | %.2f | %.2fx | >= 10x | %s |\n", cpu_s,
                gb / cpu_s, cpu_s / ruda_s, cpu_s / ruda_s >= 10 ? "yes" : "no");
    std::printf("| trainer blocked, device staging (ms per GiB) | %.3f | | | <= 2 | %s |\n",
                blocked_ms / gib, blocked_ms / gib <= 2 ? "yes" : "no");

    if (!s.json.empty()) {
        bench::figures out;
        out.add("available", 1);
        out.add("bytes", static_cast<double>(total));
        out.add("ruda_s", ruda_s);
        out.add("pinned_s", pinned_s);
        out.add("cpu_s", cpu_s);
        out.add("staged_blocked_ms", blocked_ms);
        out.write(s.json);
    }
    return 0;
}
