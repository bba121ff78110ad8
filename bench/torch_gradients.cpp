// bench/torch_gradients: ruda snapshotting a torch model's real gradients (an MLP of `layers`
// square Linear layers after one backward), against what a C++ trainer does without ruda, all
// in one run on the same tensors:
//   snapshot: from_module + to_record_async<torch_backend> (copies on the read workers) and
//   try_to_record, against clone() of every .grad() and a memcpy of each into a fresh buffer
//   (the limit: the bytes must be copied once);
//   checkpoint: the snapshot plus save_checkpoint_file (checksums, fsync, rename), against
//   clone() plus torch::save of the gradient list and an fsync.
// With --count, instead: the work bench/python.py times through `import ruda`, done through the
// C++ API on the same tensors (`count` torch tensors of `elements` f32 each, named "t<i>"), so
// that bench/run can say what the Python layer costs on top:
//   save: try_to_record<torch_backend> (a copy of every tensor) + save_checkpoint_file;
//   load: load_checkpoint_file + a copy of each tensor into the existing one (in place).
// Figures are medians; --json writes them for bench/run.
//
//   torch_gradients [--width N] [--layers N] [--reps N] [--dir DIR] [--json PATH]
//   torch_gradients --count N --elements N [--reps N] [--dir DIR] [--json PATH]
#include "bench_util.hpp"

#include <ruda/optim/module_gradients.hpp>
#include <ruda/ruda.hpp>

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/serialize.h>
#include <torch/version.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using bench::median;
using bench::fsync_file;
using bench::seconds;
using tb = ruda::torch_backend;
namespace fs = std::filesystem;

struct settings {
    std::int64_t width = 2048;
    int layers = 8;
    std::int64_t count = 0; // > 0: the flat tensors of bench/python.py instead of the MLP
    std::int64_t elements = std::int64_t{1} << 20U;
    int reps = 5;
    fs::path dir = ".";
    std::optional<std::string> json;
};

void parse(int argc, char** argv, settings& s)
{
    bench::command_line{}
        .option("--width", s.width)
        .option("--layers", s.layers)
        .option("--count", s.count)
        .option("--elements", s.elements)
        .option("--reps", s.reps)
        .option("--dir", s.dir, "DIR")
        .option("--json", s.json, "PATH")
        .parse(argc, argv, [&s] {
            return s.width > 0 && s.layers > 0 && s.count >= 0 && s.elements > 0 && s.reps >= 1;
        });
}

int flat_tensors(const settings& s)
{
    ruda::gradients_params grads;
    std::unordered_map<std::uint64_t, torch::Tensor> by_id;
    for (std::int64_t i = 0; i < s.count; ++i) {
        std::string name = "t"; // not "t" + ...: GCC 12 warns falsely (-Wrestrict) on that
        name += std::to_string(i);
        const auto id = ruda::param_id::from_name(name);
        auto tensor = torch::randn({s.elements});
        grads.insert<tb>(id, ruda::tensor_primitive<tb>{tb::float_tensor::wrap(tensor).value()},
                         name);
        by_id.emplace(id.val(), tensor);
    }
    const fs::path path = s.dir / "torch-gradients-flat.ruda";
    std::vector<double> save_times;
    std::vector<double> load_times;
    for (int r = 0; r < s.reps; ++r) {
        fs::remove(path);
        ::sync();
        save_times.push_back(seconds([&] {
            ruda::checkpoint contents{grads.try_to_record<tb>().value()};
            ruda::save_checkpoint_file(path, contents).value();
        }));
        load_times.push_back(seconds([&] {
            const auto loaded = ruda::load_checkpoint_file(path).value();
            for (const ruda::gradient_entry& e : loaded.gradients().entries()) {
                const torch::Tensor& into = by_id.at(e.id.val());
                std::memcpy(into.data_ptr(), e.data.bytes().data(), e.data.bytes().size());
            }
        }));
    }
    fs::remove(path);
    std::printf("torch_gradients: %lld tensors of %lld f32 (%.1f MiB), median of %d: save "
                "%.2f ms, load + restore %.2f ms\n",
                static_cast<long long>(s.count), static_cast<long long>(s.elements),
                static_cast<double>(s.count * s.elements * 4) / (1 << 20), s.reps,
                median(save_times) * 1e3, median(load_times) * 1e3);
    if (s.json) {
        bench::figures f;
        f.add("save_s", median(save_times));
        f.add("load_s", median(load_times));
        f.write(*s.json);
    }
    return 0;
}


struct free_deleter {
    void operator()(void* p) const noexcept { std::free(p); }
};

} // namespace

int main(int argc, char** argv)
{
    settings s;
    parse(argc, argv, s);
    torch::manual_seed(0);
    if (s.count > 0) {
        return flat_tensors(s);
    }
    torch::nn::Sequential model;
    for (int i = 0; i < s.layers; ++i) {
        model->push_back(torch::nn::Linear(s.width, s.width));
        model->push_back(torch::nn::Tanh());
    }
    model->forward(torch::randn({16, s.width})).sum().backward();
    const auto grads = ruda::from_module(*model).value();
    std::vector<torch::Tensor> grad_tensors;
    double bytes = 0;
    for (const auto& p : model->parameters()) {
        grad_tensors.push_back(p.grad());
        bytes += static_cast<double>(p.grad().numel() * p.grad().element_size());
    }

    const fs::path ruda_path = s.dir / "torch-gradients.ruda";
    const fs::path torch_path = s.dir / "torch-gradients.pt";
    std::vector<double> async_times;
    std::vector<double> sync_times;
    std::vector<double> clone_times;
    std::vector<double> memcpy_times;
    std::vector<double> ruda_save_times;  // snapshot + durable save
    std::vector<double> torch_save_times; // clone + torch::save + fsync
    for (int r = 0; r < s.reps; ++r) {
        std::optional<ruda::gradients_params_record> record;
        async_times.push_back(seconds([&] { record = bench::run(grads.to_record_async<tb>()); }));
        if (record->entries().size() != grad_tensors.size()) {
            std::fprintf(stderr, "the snapshot has %zu gradients, the model %zu\n",
                         record->entries().size(), grad_tensors.size());
            return 1;
        }
        record.reset();
        sync_times.push_back(seconds([&] { record = grads.try_to_record<tb>().value(); }));
        record.reset();
        {
            std::vector<torch::Tensor> copies;
            clone_times.push_back(seconds([&] {
                for (const auto& g : grad_tensors) {
                    copies.push_back(g.clone());
                }
            }));
        }
        {
            std::vector<std::unique_ptr<void, free_deleter>> buffers;
            memcpy_times.push_back(seconds([&] {
                for (const auto& g : grad_tensors) {
                    const auto n = static_cast<std::size_t>(g.numel() * g.element_size());
                    buffers.emplace_back(std::malloc(n));
                    std::memcpy(buffers.back().get(), g.data_ptr(), n);
                }
            }));
        }
        fs::remove(ruda_path);
        ::sync();
        ruda_save_times.push_back(seconds([&] {
            ruda::checkpoint contents{bench::run(grads.to_record_async<tb>())};
            ruda::save_checkpoint_file(ruda_path, contents).value();
        }));
        fs::remove(torch_path);
        ::sync();
        torch_save_times.push_back(seconds([&] {
            std::vector<torch::Tensor> copies;
            for (const auto& g : grad_tensors) {
                copies.push_back(g.clone());
            }
            torch::save(copies, torch_path.string());
            fsync_file(torch_path);
        }));
    }
    fs::remove(ruda_path);
    fs::remove(torch_path);
    std::printf("torch_gradients: %d Linear(%lld, %lld) layers, %zu gradients, %.1f MiB (libtorch "
                "%s, %zu read workers), median of %d:\n"
                "  to_record_async %.2f ms, try_to_record %.2f ms, clone() %.2f ms, memcpy into "
                "fresh buffers %.2f ms\n"
                "  snapshot + save_checkpoint_file %.1f ms, clone() + torch::save + fsync %.1f ms\n",
                s.layers, static_cast<long long>(s.width), static_cast<long long>(s.width),
                grad_tensors.size(), bytes / (1 << 20), TORCH_VERSION, tb::read_workers(), s.reps,
                median(async_times) * 1e3, median(sync_times) * 1e3, median(clone_times) * 1e3,
                median(memcpy_times) * 1e3, median(ruda_save_times) * 1e3,
                median(torch_save_times) * 1e3);
    if (s.json) {
        bench::figures f;
        f.add("gradients", static_cast<double>(grad_tensors.size()));
        f.add("bytes", bytes);
        f.add("snapshot_s", median(async_times));
        f.add("snapshot_sync_s", median(sync_times));
        f.add("clone_s", median(clone_times));
        f.add("memcpy_fresh_s", median(memcpy_times));
        f.add("save_s", median(ruda_save_times));
        f.add("torch_save_fsync_s", median(torch_save_times));
        f.write(*s.json);
    }
    return 0;
}
