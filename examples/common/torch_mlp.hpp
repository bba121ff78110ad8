// The torch MLP of torch_trainer, trained with Adam and gradient accumulation, and what the
// trainer's checks need: the same weights and data in every run, where training stands, and
// two models compared bit for bit.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>

#include <cstdint>
#include <cstring>
#include <memory>

namespace torch_mlp {

constexpr std::int64_t inputs = 32;
constexpr std::int64_t hidden = 128;
constexpr std::int64_t outputs = 8;
constexpr std::int64_t batch = 64;
constexpr std::int64_t accumulate = 4; // micro-batches per optimizer step
constexpr std::int64_t samples = 4096;
constexpr double learning_rate = 1e-3;

struct mlp : torch::nn::Module {
    mlp()
    {
        fc1 = register_module("fc1", torch::nn::Linear(inputs, hidden));
        fc2 = register_module("fc2", torch::nn::Linear(hidden, hidden));
        fc3 = register_module("fc3", torch::nn::Linear(hidden, outputs));
    }
    torch::Tensor forward(const torch::Tensor& x)
    {
        return fc3->forward(torch::tanh(fc2->forward(torch::tanh(fc1->forward(x)))));
    }
    torch::nn::Linear fc1{nullptr};
    torch::nn::Linear fc2{nullptr};
    torch::nn::Linear fc3{nullptr};
};

// The same weights in every run: the seed decides them (on the CPU, then moved).
inline std::shared_ptr<mlp> fresh_model(const c10::Device& device)
{
    torch::manual_seed(1);
    auto model = std::make_shared<mlp>();
    model->to(device);
    return model;
}

struct dataset {
    explicit dataset(const c10::Device& device)
    {
        torch::manual_seed(2);
        x = torch::randn({samples, inputs});
        y = torch::sin(x.matmul(torch::randn({inputs, outputs})) * 0.2);
        x = x.to(device);
        y = y.to(device);
    }
    torch::Tensor x;
    torch::Tensor y;
};

// Where training stands: `micro` micro-batches of step `step` are accumulated.
struct position {
    std::uint64_t step = 0;
    std::uint64_t micro = 0;
    friend bool operator==(const position&, const position&) = default;
    template <class Archive>
    void serialize(Archive& ar)
    {
        ar(step, micro);
    }
};

// One micro-batch: forward, backward (gradients accumulate in place), and at the end of a
// window the Adam step and the gradients set to none. Returns the micro-batch's loss.
inline double train_micro_batch(const dataset& data, mlp& model, torch::optim::Adam& optimizer,
                                position& at)
{
    const std::int64_t index = static_cast<std::int64_t>(at.step) * accumulate +
                               static_cast<std::int64_t>(at.micro);
    const std::int64_t begin = (index * batch) % samples;
    const auto x = data.x.slice(0, begin, begin + batch);
    const auto y = data.y.slice(0, begin, begin + batch);
    const auto loss = torch::mse_loss(model.forward(x), y) / static_cast<double>(accumulate);
    loss.backward();
    if (++at.micro == static_cast<std::uint64_t>(accumulate)) {
        optimizer.step();
        for (auto& p : model.parameters()) {
            p.mutable_grad() = torch::Tensor{}; // set to none: later snapshots never race it
        }
        at.micro = 0;
        ++at.step;
    }
    return loss.item<double>() * static_cast<double>(accumulate);
}

inline bool same_bits(const torch::Tensor& a, const torch::Tensor& b)
{
    if (a.defined() != b.defined()) {
        return false;
    }
    if (!a.defined()) {
        return true;
    }
    const auto ha = a.cpu().contiguous();
    const auto hb = b.cpu().contiguous();
    return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() &&
           (a.numel() == 0 || std::memcmp(ha.data_ptr(), hb.data_ptr(),
                                          static_cast<std::size_t>(a.numel()) *
                                              a.element_size()) == 0);
}

// Weights and gradients of two models, bit for bit.
inline bool same_state(mlp& a, mlp& b)
{
    const auto pa = a.named_parameters();
    const auto pb = b.named_parameters();
    for (const auto& item : pa) {
        const auto& other = pb[item.key()];
        if (!same_bits(item.value(), other) || !same_bits(item.value().grad(), other.grad())) {
            return false;
        }
    }
    return pa.size() == pb.size();
}

// A copy of a model's weights and gradients, as the snapshot must hold them.
inline std::shared_ptr<mlp> copy_of(mlp& model, const c10::Device& device)
{
    auto copy = fresh_model(device);
    const auto from = model.named_parameters();
    const torch::NoGradGuard no_grad;
    for (auto& item : copy->named_parameters()) {
        item.value().copy_(from[item.key()]);
        const auto& grad = from[item.key()].grad();
        item.value().mutable_grad() = grad.defined() ? grad.clone() : torch::Tensor{};
    }
    return copy;
}

} // namespace torch_mlp
