// A torch program outside the ruda tree, built against an installed ruda's torch component:
// a module's gradients snapshotted, restored into a fresh module and compared, and a trainer's
// whole state (with Adam's) snapshot and restored.
#include <ruda/ruda.hpp>
#include <ruda/optim/module_gradients.hpp>
#include <ruda/optim/torch_training_state.hpp>

#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>

#include <cstdio>

int main()
{
    torch::manual_seed(1);
    torch::nn::Linear model(3, 2);
    model->forward(torch::randn({4, 3})).sum().backward();
    auto grads = ruda::from_module(*model);
    auto record = grads ? grads.value().try_to_record<ruda::torch_backend>()
                        : ruda::result<ruda::gradients_params_record>(grads.error());
    auto restored = record ? ruda::gradients_params::from_record<ruda::torch_backend>(
                                 record.value(), ruda::torch_backend::device{})
                           : ruda::result<ruda::gradients_params>(record.error());
    torch::nn::Linear fresh(3, 2);
    const bool restored_ok = restored && ruda::restore_gradients(restored.value(), *fresh);
    torch::optim::Adam adam{model->parameters()};
    adam.step();
    auto state = ruda::snapshot_training_state(model, adam, 1);
    torch::optim::Adam fresh_adam{fresh->parameters()};
    const bool state_ok =
        state && ruda::restore_training_state(state.value(), fresh, fresh_adam).has_value();
    const bool ok = restored_ok && state_ok && fresh->weight.equal(model->weight) &&
                    fresh->weight.grad().equal(model->weight.grad()) &&
                    fresh->bias.grad().equal(model->bias.grad());
    if (!record) {
        std::fprintf(stderr, "%s\n", record.error().message().c_str());
    }
    std::printf("ruda %s torch consumer: %s\n", RUDA_VERSION_STRING, ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
