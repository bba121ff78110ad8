// bench/python_cpp: the work bench/python.py times through `import ruda`, done through the C++
// API on the same tensors (`count` torch tensors of `elements` f32 each, named "t<i>"), so that
// bench/run can say what the Python layer costs on top:
//   save: try_to_record<torch_backend> (a copy of every tensor) + save_checkpoint_file
//   (checksums, fsync, rename, directory fsync);
//   load: load_checkpoint_file + a copy of each tensor into the existing one (a restore in
//   place).
// Figures are medians; --json writes them for bench/run.
//
//   python_cpp [--count N] [--elements N] [--reps N] [--dir DIR] [--json PATH]
#include "bench_util.hpp"

#include <ruda/backend/torch_backend.hpp>
#include <ruda/ruda.hpp>

#include <torch/types.h>
#include <torch/utils.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using tb = ruda::torch_backend;
namespace fs = std::filesystem;

struct settings {
    std::int64_t count = 64;
    std::int64_t elements = std::int64_t{1} << 20U;
    int reps = 5;
    fs::path dir = ".";
    std::optional<std::string> json;
};

} // namespace

int main(int argc, char** argv)
{
    settings s;
    bench::command_line{}
        .option("--count", s.count)
        .option("--elements", s.elements)
        .option("--reps", s.reps)
        .option("--dir", s.dir, "DIR")
        .option("--json", s.json, "PATH")
        .parse(argc, argv,
               [&s] { return s.count > 0 && s.elements > 0 && s.reps >= 1; });
    torch::manual_seed(0);
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
    const fs::path path = s.dir / "python-cpp.ruda";
    std::vector<double> save_times;
    std::vector<double> load_times;
    for (int r = 0; r < s.reps; ++r) {
        fs::remove(path);
        ::sync();
        save_times.push_back(bench::seconds([&] {
            ruda::checkpoint contents{grads.try_to_record<tb>().value()};
            ruda::save_checkpoint_file(path, contents).value();
        }));
        load_times.push_back(bench::seconds([&] {
            const auto loaded = ruda::load_checkpoint_file(path).value();
            for (const ruda::gradient_entry& e : loaded.gradients().entries()) {
                const torch::Tensor& into = by_id.at(e.id.val());
                std::memcpy(into.data_ptr(), e.data.bytes().data(), e.data.bytes().size());
            }
        }));
    }
    fs::remove(path);
    const double bytes = static_cast<double>(s.count * s.elements * 4);
    std::printf("python_cpp: %lld tensors of %lld f32 (%.1f MiB), median of %d: save %.2f ms, "
                "load + restore %.2f ms\n",
                static_cast<long long>(s.count), static_cast<long long>(s.elements),
                bytes / (1 << 20), s.reps, bench::median(save_times) * 1e3,
                bench::median(load_times) * 1e3);
    if (s.json) {
        bench::figures f;
        f.add("save_s", bench::median(save_times));
        f.add("load_s", bench::median(load_times));
        f.write(*s.json);
    }
    return 0;
}
