// Gradients out to safetensors and back: an export any safetensors reader (numpy, PyTorch, the
// Hugging Face library) opens, each tensor under its parameter's name and with the dtype it
// had; then the file imported, checked in full before anything is allocated, and compared.
#include "common/checkpoint_dir.hpp"

#include <ruda/ruda.hpp>

#include <cstdio>
#include <optional>
#include <vector>

int main(int argc, char** argv)
{
    using cpu = ruda::cpu_backend;
    const examples::checkpoint_dir dir{argc > 1 ? std::optional{argv[1]} : std::nullopt,
                                       "ruda-safetensors"};
    if (!dir.ok()) {
        return 1;
    }
    ruda::gradients_params grads;
    const auto weight = ruda::tensor_data::from_values(std::vector<float>{0.5F, -1.0F, 2.0F, 4.0F},
                                                       {2, 2});
    const auto bias = ruda::tensor_data::from_values(std::vector<double>{0.125, -0.25}, {2});
    grads.insert<cpu>(ruda::param_id::from_name("fc.weight"),
                      cpu::float_from_data(weight.value(), {}).value(), "fc.weight");
    grads.insert<cpu>(ruda::param_id::from_name("fc.bias"),
                      cpu::float_from_data(bias.value(), {}).value(), "fc.bias");
    const auto record = grads.try_to_record<cpu>().value();

    const auto path = dir.path() / "gradients.safetensors";
    const auto written = ruda::export_safetensors(record, path); // durable: fsync and rename
    if (!written) {
        std::printf("export failed: %s\n", written.error().message().c_str());
        return 1;
    }
    const auto imported = ruda::import_safetensors(path);
    if (!imported) {
        std::printf("import failed: %s\n", imported.error().message().c_str());
        return 1;
    }
    for (const auto& entry : imported.value().entries()) {
        std::printf("%s: %s, %zu bytes\n", entry.name.c_str(), to_string(entry.dtype).c_str(),
                    entry.data.bytes().size());
    }
    const bool same = imported.value() == record;
    std::printf("%llu bytes written; imported %s the snapshot\n",
                static_cast<unsigned long long>(written.value()), same ? "equals" : "DIFFERS FROM");
    return same ? 0 : 1;
}
