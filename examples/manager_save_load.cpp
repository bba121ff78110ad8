// A checkpoint directory: three saves through a `checkpoint_manager` keeping the last two, each
// with the gradients and a section of the trainer's own state; then the latest loaded back and
// its gradients restored into a fresh container. Pass a directory to keep the files.
#include "common/checkpoint_dir.hpp"

#include <ruda/ruda.hpp>

#include <cstdio>
#include <optional>
#include <vector>

int main(int argc, char** argv)
{
    using cpu = ruda::cpu_backend;
    const examples::checkpoint_dir dir{argc > 1 ? std::optional{argv[1]} : std::nullopt,
                                       "ruda-manager"};
    if (!dir.ok()) {
        return 1;
    }
    ruda::checkpoint_manager manager{dir.path(), {.keep_last = 2}};
    const ruda::param_id id = ruda::param_id::from_name("fc.weight");

    for (std::uint64_t step = 1; step <= 3; ++step) {
        ruda::gradients_params grads;
        auto values = ruda::tensor_data::from_values(std::vector<float>(4, float(step)), {2, 2});
        grads.insert<cpu>(id, cpu::float_from_data(values.value(), {}).value(), "fc.weight");
        ruda::checkpoint state;
        state.put("step", step).value();                       // any cereal-serializable value
        state.set_gradients(grads.try_to_record<cpu>().value()); // the snapshot
        const auto saved = manager.save(step, state);
        if (!saved) {
            std::printf("save failed: %s\n", saved.error().message().c_str());
            return 1;
        }
        std::printf("saved step %llu: %llu bytes\n", static_cast<unsigned long long>(step),
                    static_cast<unsigned long long>(saved.value().bytes));
    }

    auto latest = manager.load_latest(); // verified: every checksum, every check
    if (!latest) {
        std::printf("load failed: %s\n", latest.error().message().c_str());
        return 1;
    }
    std::uint64_t step = 0;
    latest.value().get("step", step).value();
    auto restored = ruda::gradients_params::from_record<cpu>(std::move(latest.value()).gradients(),
                                                              {});
    const auto steps = manager.steps().value();
    std::printf("kept steps: %zu (keep_last = 2); latest is step %llu\n", steps.size(),
                static_cast<unsigned long long>(step));
    if (!restored || steps.size() != 2 || step != 3) {
        return 1;
    }
    const auto again = restored.value().try_to_record<cpu>().value();
    const float value = again.entries().at(0).data.values<float>().value()[0];
    std::printf("%s restored: %g\n", restored.value().name(id).c_str(), value);
    return value == 3.0F ? 0 : 1;
}
