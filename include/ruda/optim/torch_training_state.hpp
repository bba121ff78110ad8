// A LibTorch trainer's whole state as one checkpoint: the model's weights and buffers, its
// gradients, the optimizer's state, the random generators' states and the step, snapshot in
// one call and restored in one call, bit for bit. Part of `ruda::torch`.
//
//     auto saved = ruda::snapshot_training_state(model, optimizer, step).value(); // host copy
//     manager.queue_save(step, std::move(saved));        // written by the manager's thread
//     ...
//     auto loaded = manager.load_latest().value();
//     std::uint64_t step = ruda::restore_training_state(loaded, model, optimizer).value();
#pragma once

#include <ruda/checkpoint/checkpoint.hpp>
#include <ruda/error.hpp>
#include <ruda/optim/async_snapshot.hpp>
#include <ruda/optim/cuda_module_gradients.hpp>
#include <ruda/optim/gradients_params.hpp>
#include <ruda/optim/snapshot_options.hpp>
#include <ruda/optim/torch_generator_state.hpp>
#include <ruda/optim/torch_optimizer_state.hpp>

#include <boost/asio/awaitable.hpp>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <string_view>
#include <utility>

namespace ruda {

/// The checkpoint group that holds the model's parameters.
inline constexpr std::string_view weights_group = "weights";
/// The group that holds the model's buffers (BatchNorm's running statistics...), when it has
/// any.
inline constexpr std::string_view buffers_group = "buffers";
/// The section that holds the step (a `std::uint64_t`).
inline constexpr std::string_view step_section = "step";

struct training_state_options {
    /// The parameters' gradients (group "gradients"): what a checkpoint in the middle of an
    /// accumulation window needs. Parameters without a gradient are left out.
    bool gradients = true;
    /// The default generators' states (group "rng", `generator_states`).
    bool generators = true;
    /// How the tensors are read (reads and bytes in flight, progress).
    snapshot_options snapshot{};
};

struct training_restore_options {
    /// What happens to the optimizer's hyper-parameters.
    hyperparameters optimizer_options = hyperparameters::restore;
    /// Whether the generators' states the checkpoint holds are restored.
    bool generators = true;
};

namespace detail {
/// The snapshot `async_snapshot_training_state` runs: the tensors captured by this call, read
/// when awaited; on the CPU when `on` is null, else on that GPU.
[[nodiscard]] boost::asio::awaitable<result<checkpoint>>
training_state_snapshot(const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
                        std::uint64_t step, const training_state_options& options,
                        const cuda_module_device* on);
} // namespace detail

/// Snapshots the whole training state into host memory: the parameters (group "weights"), the
/// buffers ("buffers"), the gradients ("gradients"), the optimizer's state (group "optimizer",
/// section "torch.optimizer": see `optimizer_state_of`), the generators' states ("rng") and
/// `step` (section "step"). Every tensor handle is captured by this call, and the small parts
/// (step counts, integer buffers, generator states) are copied in it; the float tensors are
/// read on ruda's read workers, as one snapshot with one bound on reads in flight. Completes
/// with `void(result<checkpoint>)` on the token's associated executor (a token without one
/// does not compile), once all of it is in host memory: then `optimizer.step()` and
/// `backward()` may change the tensors again. Hand the checkpoint to
/// `checkpoint_manager::async_save_record` (or `queue_save`). Errors: those of
/// `optimizer_state_of`, `generator_states` and the reads, each naming the tensor.
template <class CompletionToken>
auto async_snapshot_training_state(const torch::nn::Module& model,
                                   const torch::optim::Optimizer& optimizer, std::uint64_t step,
                                   const training_state_options& options, CompletionToken&& token)
{
    return detail::async_run_snapshot(
        detail::training_state_snapshot(model, optimizer, step, options, nullptr),
        detail::token_executor{}, std::forward<CompletionToken>(token));
}

/// The same for a model on a GPU (`cuda_module_gradients.hpp`): the parameters, gradients,
/// float buffers and optimizer states borrowed in place by `cuda_backend`, read after the work
/// queued on `on.stream` (with device staging, copied on the GPU in this call); integer
/// buffers are copied to the host in this call (torch waits for the GPU there), the
/// generators' states include each CUDA device's.
template <class CompletionToken>
auto async_snapshot_training_state(const torch::nn::Module& model,
                                   const torch::optim::Optimizer& optimizer, std::uint64_t step,
                                   const cuda_module_device& on,
                                   const training_state_options& options, CompletionToken&& token)
{
    return detail::async_run_snapshot(
        detail::training_state_snapshot(model, optimizer, step, options, &on),
        detail::token_executor{}, std::forward<CompletionToken>(token));
}

/// The same with the default options.
template <class CompletionToken>
    requires(!std::is_same_v<std::decay_t<CompletionToken>, training_state_options>)
auto async_snapshot_training_state(const torch::nn::Module& model,
                                   const torch::optim::Optimizer& optimizer, std::uint64_t step,
                                   CompletionToken&& token)
{
    return async_snapshot_training_state(model, optimizer, step, training_state_options{},
                                         std::forward<CompletionToken>(token));
}

/// The same snapshot, blocking the calling thread until it is in host memory: for a plain
/// training loop. Refuses (`errc::sync_read_unavailable`) where `try_to_record` would, on a
/// read worker.
[[nodiscard]] result<checkpoint>
snapshot_training_state(const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
                        std::uint64_t step, const training_state_options& options = {});

/// The same for a model on a GPU.
[[nodiscard]] result<checkpoint>
snapshot_training_state(const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
                        std::uint64_t step, const cuda_module_device& on,
                        const training_state_options& options = {});

/// Restores what `snapshot_training_state` saved into `model` (the same architecture) and
/// `optimizer` (a fresh one of the same type over `model`'s parameters), and returns the step:
/// the weights and buffers copied in place (optimizers keep the same tensors), the gradients
/// set (cleared where the checkpoint has none), the optimizer's state
/// (`restore_optimizer_state`), and the generators' states unless `options` says otherwise.
/// Everything is checked before anything changes: a part missing (`errc::not_found`), and
/// each part's own checks, with the codes of `restore_parameters`, `restore_gradients`,
/// `restore_optimizer_state` and `restore_generator_states`.
[[nodiscard]] result<std::uint64_t>
restore_training_state(const checkpoint& saved, torch::nn::Module& model,
                       torch::optim::Optimizer& optimizer,
                       const training_restore_options& options = {});

/// The same for a model on a GPU, with the same arguments and `on`: the weights and gradients
/// uploaded in place (`restore_parameters`, `restore_gradients` of `cuda_module_gradients.hpp`),
/// the optimizer's state tensors made on the GPU, each before the work queued next on
/// `on.stream`; buffers copied by torch.
[[nodiscard]] result<std::uint64_t>
restore_training_state(const checkpoint& saved, torch::nn::Module& model,
                       torch::optim::Optimizer& optimizer, const cuda_module_device& on,
                       const training_restore_options& options = {});

/// The same for a module held by a holder (`torch::nn::Linear`, a `TORCH_MODULE`).
template <class T>
[[nodiscard]] result<std::uint64_t>
restore_training_state(const checkpoint& saved, torch::nn::ModuleHolder<T> model,
                       torch::optim::Optimizer& optimizer,
                       const training_restore_options& options = {})
{
    return restore_training_state(saved, static_cast<torch::nn::Module&>(*model), optimizer,
                                  options);
}

/// `snapshot_training_state` of a module held by a holder.
template <class T>
[[nodiscard]] result<checkpoint>
snapshot_training_state(const torch::nn::ModuleHolder<T>& model,
                        const torch::optim::Optimizer& optimizer, std::uint64_t step,
                        const training_state_options& options = {})
{
    return snapshot_training_state(static_cast<const torch::nn::Module&>(*model), optimizer, step,
                                   options);
}

} // namespace ruda
