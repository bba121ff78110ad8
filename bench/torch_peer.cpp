// bench/torch_peer: what a C++ trainer does without ruda, with Debian's libtorch, on the same
// tensors as bench/checkpoint (tensor i holds i + k * 0.001 at index k, made in f32):
//   snapshot: clone() of every tensor;
//   save: torch::save of the tensor list, alone and followed by an fsync of the file
//   (torch::save does not sync; a checkpoint that must survive a crash needs it);
//   load: torch::load of the list (torch checks no checksum).
// Each save starts on a quiet disk, as in bench/checkpoint. Figures are medians; --json writes
// them for bench/run.
//
//   torch_peer [--tensors N] [--elements N] [--dtype f32|bf16] [--reps N] [--dir DIR]
//              [--json PATH]
#include "bench_util.hpp"

#include <torch/serialize.h>
#include <torch/types.h>
#include <torch/version.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace {

using bench::median;
using bench::fsync_file;
using bench::seconds;
namespace fs = std::filesystem;

struct settings {
    std::size_t tensors = 64;
    std::size_t elements = std::size_t{1} << 20U;
    torch::Dtype dtype = torch::kFloat;
    int reps = 5;
    fs::path dir = ".";
    std::optional<std::string> json;
};

void parse(int argc, char** argv, settings& s)
{
    bench::command_line{}
        .option("--tensors", s.tensors)
        .option("--elements", s.elements)
        .option("--dtype", "f32|bf16",
                [&s](std::string_view name) {
                    s.dtype = name == "bf16" ? torch::kBFloat16 : torch::kFloat;
                    return name == "f32" || name == "bf16";
                })
        .option("--reps", s.reps)
        .option("--dir", s.dir, "DIR")
        .option("--json", s.json, "PATH")
        .parse(argc, argv, [&s] { return s.tensors > 0 && s.elements > 0 && s.reps >= 1; });
}


} // namespace

int main(int argc, char** argv)
{
    settings s;
    parse(argc, argv, s);
    std::vector<torch::Tensor> grads;
    for (std::size_t i = 0; i < s.tensors; ++i) {
        const auto k = torch::arange(static_cast<std::int64_t>(s.elements), torch::kFloat);
        grads.push_back((k * 1e-3F + static_cast<float>(i)).to(s.dtype));
    }
    const fs::path path = s.dir / "torch-cpp.pt";
    std::vector<double> clone_times;
    std::vector<double> save_times;
    std::vector<double> durable_times; // save + fsync
    std::vector<double> load_times;
    double sink = 0;
    for (int r = 0; r < s.reps; ++r) {
        {
            std::vector<torch::Tensor> copies;
            clone_times.push_back(seconds([&] {
                copies.reserve(grads.size());
                for (const auto& g : grads) {
                    copies.push_back(g.clone());
                }
            }));
            sink += copies.back()[1].item<double>();
        } // freed outside the timing
        fs::remove(path);
        ::sync();
        save_times.push_back(seconds([&] { torch::save(grads, path.string()); }));
        durable_times.push_back(save_times.back() + seconds([&] { fsync_file(path); }));
        std::vector<torch::Tensor> loaded;
        load_times.push_back(seconds([&] { torch::load(loaded, path.string()); }));
        if (loaded.size() != grads.size() || !torch::equal(loaded.back(), grads.back())) {
            std::fprintf(stderr, "torch::load gave back other tensors\n");
            return 1;
        }
        sink += static_cast<double>(loaded.size());
    }
    const double file_bytes = static_cast<double>(fs::file_size(path));
    fs::remove(path);
    std::printf("torch_peer (libtorch %s): clone %.2f ms, torch::save %.1f ms (with fsync %.1f ms), "
                "torch::load %.1f ms, file %.2f MiB, median of %d (checksum %g)\n",
                TORCH_VERSION, median(clone_times) * 1e3, median(save_times) * 1e3,
                median(durable_times) * 1e3, median(load_times) * 1e3, file_bytes / (1 << 20),
                s.reps, sink);
    if (s.json) {
        bench::figures f;
        f.add("clone_s", median(clone_times));
        f.add("save_s", median(save_times));
        f.add("save_fsync_s", median(durable_times));
        f.add("load_s", median(load_times));
        f.add("file_bytes", file_bytes);
        f.write(*s.json);
    }
    return 0;
}
