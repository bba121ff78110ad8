// The state of the optimizers libtorch ships (SGD, Adam, AdamW, RMSprop, Adagrad) as tensors
// keyed by parameter name and state name ("fc1.weight.exp_avg"), and back into a fresh
// optimizer over the same parameters, hyper-parameters restored or checked. Part of
// `ruda::torch`.
//
//     auto state = ruda::optimizer_state_of(optimizer, model).value();  // at this instant
//     ...                                                             // (snapshot, save)
//     ruda::restore_optimizer_state(loaded, fresh_optimizer, model).value();
#pragma once

#include <ruda/checkpoint/checkpoint.hpp>
#include <ruda/error.hpp>
#include <ruda/optim/cuda_module_gradients.hpp>
#include <ruda/optim/gradients_params.hpp>

#include <cereal/types/string.hpp>
#include <cereal/types/utility.hpp>
#include <cereal/types/vector.hpp>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace ruda {

namespace detail {
/// The key of a parameter's state in a libtorch optimizer's map, as the optimizers make it:
/// libtorch 1.x keys it by the text of the parameter's TensorImpl address, 2.x by the address.
template <class Map>
typename Map::key_type optimizer_state_key(const Map&, const at::Tensor& parameter)
{
    using key = typename Map::key_type;
    if constexpr (std::is_same_v<key, std::string>) {
        std::ostringstream text;
        text << parameter.unsafeGetTensorImpl();
        return text.str();
    } else {
        return static_cast<key>(parameter.unsafeGetTensorImpl());
    }
}
} // namespace detail

/// The checkpoint group that holds an optimizer's state tensors.
inline constexpr std::string_view optimizer_group = "optimizer";
/// The checkpoint section that describes the optimizer: `optimizer_description`.
inline constexpr std::string_view optimizer_section = "torch.optimizer";

/// One param group of an optimizer: its parameters' names, in its order, and its
/// hyper-parameters by name ("lr", "beta1", "beta2", "eps", "weight_decay", "amsgrad" as 0 or
/// 1...).
struct optimizer_param_group {
    std::vector<std::string> parameters;
    std::vector<std::pair<std::string, double>> options;

    template <class Archive>
    void serialize(Archive& ar)
    {
        ar(parameters, options);
    }
    friend bool operator==(const optimizer_param_group&, const optimizer_param_group&) = default;
};

/// What the section `optimizer_section` holds: the optimizer's type ("Adam") and param groups.
struct optimizer_description {
    std::string type;
    std::vector<optimizer_param_group> groups;

    template <class Archive>
    void serialize(Archive& ar)
    {
        ar(type, groups);
    }
    friend bool operator==(const optimizer_description&, const optimizer_description&) = default;
};

/// An optimizer's state as read at the call.
struct optimizer_state {
    /// The float state tensors (exp_avg, exp_avg_sq, momentum_buffer, sum...), shared with the
    /// optimizer, not copied, on `torch_backend` (`cuda_backend` for a model on a GPU, borrowed
    /// in place): a snapshot reads them as it reads gradients.
    /// Each is named "<parameter>.<state>", with `param_id::from_name` of that as its id.
    gradients_params tensors;
    /// The integer states (the step counts), copied at the call, named the same way: 0-d i64.
    gradients_params_record counters;
    /// The type, the param groups and their hyper-parameters.
    optimizer_description description;
};

/// The state of `optimizer`, whose parameters are named by `model`'s. Only parameters that have
/// state have entries (an Adam has none before its first step). `errc::unsupported_optimizer`
/// naming the type for an optimizer other than SGD, Adam, AdamW, RMSprop and Adagrad (LBFGS,
/// one of the user's own); `errc::unknown_parameter` for an optimizer parameter that is none of
/// `model`'s; `errc::invalid_dtype` for a state tensor torch_backend cannot read.
[[nodiscard]] result<optimizer_state> optimizer_state_of(const torch::optim::Optimizer& optimizer,
                                                         const torch::nn::Module& model);
/// The same for a model on a GPU: the float state tensors borrowed on `cuda_backend`, read after
/// the work queued on `on.stream` (the errors of `from_module(model, on)` for one that is not
/// a dense float tensor on `on.device`).
[[nodiscard]] result<optimizer_state> optimizer_state_of(const torch::optim::Optimizer& optimizer,
                                                         const torch::nn::Module& model,
                                                         const cuda_module_device& on);

/// `state` in `contents`: the group `optimizer_group` (its tensors as read by a snapshot,
/// `records`, and its counters) and the section `optimizer_section`.
[[nodiscard]] result<void> put_optimizer_state(checkpoint& contents,
                                               gradients_params_record snapshot,
                                               const optimizer_state& state);

/// What a restore does with each param group's hyper-parameters.
enum class hyperparameters : std::uint8_t {
    /// Set them to the checkpoint's, as torch's `load_state_dict` does (a learning rate a
    /// schedule changed included).
    restore,
    /// Keep the optimizer's, and refuse a checkpoint whose differ (`errc::optimizer_mismatch`).
    check,
};

/// Puts the state `contents` holds (`optimizer_group`, `optimizer_section`) into `optimizer`, a
/// fresh optimizer of the same type over the same parameters of `model`: each state tensor a
/// new tensor on its parameter's device, the step counts, and the hyper-parameters as asked.
/// Parameters without entries are left without state. Everything is checked before the
/// optimizer changes: the section (`errc::not_found` without it), the type and the param
/// groups' parameters (`errc::optimizer_mismatch`), the hyper-parameters when checked
/// (`errc::optimizer_mismatch` naming the group and value), every entry's parameter
/// (`errc::unknown_parameter`), state name (`errc::optimizer_mismatch`), dtype
/// (`errc::invalid_dtype`) and shape (`errc::shape_mismatch`), and that no state lacks a part
/// (`errc::malformed_record`).
[[nodiscard]] result<void> restore_optimizer_state(const checkpoint& contents,
                                                   torch::optim::Optimizer& optimizer,
                                                   const torch::nn::Module& model,
                                                   hyperparameters mode = hyperparameters::restore);
/// The same for a model on a GPU: each state tensor a new tensor on the GPU (torch's memory
/// where libtorch has CUDA), uploaded through ruda's staging ring before the work queued next
/// on `on.stream`.
[[nodiscard]] result<void> restore_optimizer_state(const checkpoint& contents,
                                                   torch::optim::Optimizer& optimizer,
                                                   const torch::nn::Module& model,
                                                   const cuda_module_device& on,
                                                   hyperparameters mode = hyperparameters::restore);

} // namespace ruda
