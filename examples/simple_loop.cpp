// A plain training loop that snapshots its accumulated gradients with the blocking
// `try_to_record`, saves them with cereal, restores them and checks they are identical; then
// the same call on a device without blocking reads, which fails cleanly instead of hanging.
// Exits non-zero if any check fails.
#include <ruda/ruda.hpp>

#include <cereal/archives/binary.hpp>

#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

namespace {

using cpu = ruda::cpu_backend;

// A toy objective per parameter: the gradient of 0.5 * (w - target)^2 is (w - target).
std::vector<float> gradient_of(const std::vector<float>& w, float target)
{
    std::vector<float> g(w.size());
    for (std::size_t i = 0; i < w.size(); ++i) {
        g[i] = w[i] - target;
    }
    return g;
}

ruda::tensor_primitive<cpu> to_tensor(const std::vector<float>& values)
{
    auto data = ruda::tensor_data::from_values(values, {values.size()}).value();
    return cpu::float_from_data(std::move(data), {}).value();
}

} // namespace

int main()
{
    const ruda::param_id weight_id{11};
    const ruda::param_id bias_id{12};
    std::vector<float> weight{0.5F, -1.0F, 2.0F, 0.25F};
    std::vector<float> bias{0.0F, 1.0F};
    std::vector<float> weight_grad(weight.size(), 0.0F);
    std::vector<float> bias_grad(bias.size(), 0.0F);
    ruda::gradients_params grads;
    int failures = 0;

    std::printf("step | snapshot entries | saved bytes | restored identical\n");
    for (int step = 1; step <= 6; ++step) {
        // Accumulate one micro-batch's gradients; the optimizer would step every 3.
        const auto gw = gradient_of(weight, 1.0F);
        const auto gb = gradient_of(bias, -0.5F);
        for (std::size_t i = 0; i < gw.size(); ++i) {
            weight_grad[i] += gw[i];
        }
        for (std::size_t i = 0; i < gb.size(); ++i) {
            bias_grad[i] += gb[i];
        }
        grads.insert<cpu>(weight_id, to_tensor(weight_grad));
        grads.insert<cpu>(bias_id, to_tensor(bias_grad));

        if (step % 2 == 0) {
            auto record = grads.try_to_record<cpu>();
            if (!record) {
                std::printf("snapshot failed: %s\n", record.error().message().c_str());
                return 1;
            }
            std::stringstream file;
            {
                cereal::BinaryOutputArchive out{file};
                out(record.value());
            }
            const std::size_t saved = file.str().size();
            ruda::gradients_params_record loaded;
            {
                cereal::BinaryInputArchive in{file};
                in(loaded);
            }
            auto restored = ruda::gradients_params::from_record<cpu>(std::move(loaded), {});
            bool identical = restored.has_value();
            for (const ruda::param_id id : {weight_id, bias_id}) {
                const auto before = grads.get<cpu>(id);
                const auto after = identical ? restored.value().get<cpu>(id) : std::nullopt;
                identical = identical && after &&
                            std::get<cpu::float_tensor>(*after).data() ==
                                std::get<cpu::float_tensor>(*before).data();
            }
            failures += identical ? 0 : 1;
            std::printf("%4d | %16zu | %11zu | %s\n", step, record.value().entries().size(),
                        saved, identical ? "yes" : "NO");
        }
        if (step % 3 == 0) {
            for (std::size_t i = 0; i < weight.size(); ++i) {
                weight[i] -= 0.1F * weight_grad[i];
                weight_grad[i] = 0;
            }
            for (std::size_t i = 0; i < bias.size(); ++i) {
                bias[i] -= 0.1F * bias_grad[i];
                bias_grad[i] = 0;
            }
        }
    }

    // A device that can only progress inside an event loop: the blocking form refuses.
    const ruda::async_device web{{.blocking_reads = false}};
    ruda::gradients_params on_web;
    on_web.insert<ruda::async_backend>(
        weight_id,
        ruda::async_backend::float_from_data(
            ruda::tensor_data::from_values(weight, {weight.size()}).value(), web)
            .value());
    const auto refused = on_web.try_to_record<ruda::async_backend>();
    const bool clean = !refused && refused.error() == ruda::errc::sync_read_unavailable &&
                       web.stats().reads_issued == 0;
    std::printf("\nwithout blocking reads: %s\n  -> %s, %llu reads issued\n",
                refused ? "unexpectedly succeeded" : refused.error().message().c_str(),
                clean ? "clean refusal" : "WRONG",
                static_cast<unsigned long long>(web.stats().reads_issued));
    failures += clean ? 0 : 1;
    return failures == 0 ? 0 : 1;
}
