// Resume a LibTorch trainer exactly: a model with dropout trained with Adam checkpoints its
// whole state (weights, gradients, Adam's moments and step counts, the random generator, the
// step) from a plain loop, the file written by the manager's thread; a fresh process's model
// and optimizer restore it and must finish bit-identical to the uninterrupted run.
#include <ruda/checkpoint/checkpoint_manager.hpp>
#include <ruda/optim/torch_training_state.hpp>

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <unistd.h>

namespace {

torch::nn::Sequential make_model()
{
    torch::manual_seed(1);
    return torch::nn::Sequential{torch::nn::Linear(8, 32), torch::nn::Tanh(),
                                 torch::nn::Dropout(0.25), torch::nn::Linear(32, 1)};
}

void train_step(torch::nn::Sequential& model, torch::optim::Adam& adam, std::int64_t step)
{
    const auto x = torch::sin(torch::arange(0, 64, torch::kFloat).reshape({8, 8}) * (step + 1));
    adam.zero_grad();
    torch::mse_loss(model->forward(x), x.sum(1, true).cos()).backward();
    adam.step();
}

} // namespace

int main()
{
    constexpr std::int64_t steps = 40;
    const auto dir = std::filesystem::temp_directory_path() /
                     ("ruda-resume-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);

    // The run: a checkpoint of everything at step 20, written while training goes on.
    auto model = make_model();
    torch::optim::Adam adam{model->parameters(), torch::optim::AdamOptions(1e-2)};
    std::optional<ruda::pending_save> saving;
    {
        ruda::checkpoint_manager manager{dir};
        for (std::int64_t step = 0; step < steps; ++step) {
            if (step == 20) {
                auto state = ruda::snapshot_training_state(*model, adam, step); // in host memory
                if (!state) {
                    std::fprintf(stderr, "snapshot: %s\n", state.error().message().c_str());
                    return 1;
                }
                saving = manager.queue_save(step, std::move(state).value()); // written apart
            }
            train_step(model, adam, step);
        }
    } // the manager's destructor waits until its saves are durable
    if (auto saved = saving->wait(); !saved) {
        std::fprintf(stderr, "save: %s\n", saved.error().message().c_str());
        return 1;
    }

    // A restart: a fresh model and optimizer, and whatever the new process drew at random.
    torch::manual_seed(12345);
    auto resumed = make_model();
    torch::optim::Adam fresh{resumed->parameters(), torch::optim::AdamOptions(1e-2)};
    const ruda::checkpoint_manager manager{dir};
    auto latest = manager.load_latest(); // every checksum verified
    auto from = latest ? ruda::restore_training_state(latest.value(), *resumed, fresh)
                       : ruda::result<std::uint64_t>{latest.error()};
    if (!from) {
        std::fprintf(stderr, "restore: %s\n", from.error().message().c_str());
        return 1;
    }
    for (auto step = static_cast<std::int64_t>(from.value()); step < steps; ++step) {
        train_step(resumed, fresh, step);
    }

    bool exact = true;
    for (const auto& item : model->named_parameters()) {
        exact = exact && torch::equal(item.value(), resumed->named_parameters()[item.key()]);
    }
    std::filesystem::remove_all(dir);
    std::printf("resumed from step %llu: final weights %s\n",
                static_cast<unsigned long long>(from.value()),
                exact ? "bit-identical to the uninterrupted run" : "DIFFER");
    return exact ? 0 : 1;
}
