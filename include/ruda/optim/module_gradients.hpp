// A torch module's gradients and parameter values as `gradients_params` on `torch_backend`,
// keyed by `param_id::from_name` of each parameter's name ("0.weight", "fc1.bias"), and the
// way back into a module. Part of `ruda::torch`.
//
//     auto grads = ruda::from_module(model).value();            // every defined .grad()
//     auto record = co_await grads.to_record_async<ruda::torch_backend>();
//     ...
//     ruda::restore_gradients(record, model).value();
//
// Every call takes a `torch::nn::Module&` or a module holder (`torch::nn::Linear`, a
// `TORCH_MODULE`), and the restores a record or a `gradients_params`, on the CPU as on a GPU
// (`cuda_module_gradients.hpp`).
#pragma once

#include <ruda/backend/torch_backend.hpp>
#include <ruda/error.hpp>
#include <ruda/optim/gradients_params.hpp>

#include <ruda/optim/gradients_params_record.hpp>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <type_traits>

namespace ruda {

/// Every parameter's `.grad()` that is defined (parameters without one are left out), sharing
/// the module's tensors, not copies, each registered with its parameter's name.
/// `errc::invalid_dtype` for a gradient of a dtype torch_backend cannot read,
/// `errc::invalid_tensor` for a sparse one, `errc::unsupported_device` for one on a device it
/// cannot read (a CUDA tensor: see `cuda_module_gradients.hpp`), and
/// `errc::duplicate_param_id` when two names hash to one id; each message names the parameter.
[[nodiscard]] result<gradients_params> from_module(const torch::nn::Module& module);

/// Sets each parameter's `.grad()` to the gradient under its id and clears (makes undefined)
/// the gradients of parameters `grads` does not hold, so the module has exactly the gradients
/// of the snapshot. Everything is checked before the module changes: an id that is no
/// parameter's (`errc::unknown_parameter`), a quantized or other backend's entry
/// (`errc::backend_mismatch`), a dtype (`errc::invalid_dtype`) or shape
/// (`errc::shape_mismatch`) other than the parameter's.
[[nodiscard]] result<void> restore_gradients(const gradients_params& grads,
                                             torch::nn::Module& module);

/// The parameter values themselves (detached, sharing the module's storage), for checkpoints
/// that hold the weights next to the gradients.
[[nodiscard]] result<gradients_params> parameters_from_module(const torch::nn::Module& module);

/// Copies each value into its parameter, in place and without autograd. Checked first like
/// `restore_gradients`; every parameter must have a value (`errc::not_found` naming the
/// first that has none).
[[nodiscard]] result<void> restore_parameters(const gradients_params& values,
                                              torch::nn::Module& module);

/// `restore_gradients` of a record: restored onto the CPU (`from_record<torch_backend>`, with
/// its checks), then set. The same arguments as the GPU restore.
[[nodiscard]] result<void> restore_gradients(const gradients_params_record& record,
                                             torch::nn::Module& module);
/// `restore_parameters` of a record, likewise.
[[nodiscard]] result<void> restore_parameters(const gradients_params_record& record,
                                              torch::nn::Module& module);

/// Every check `restore_gradients` makes, changing nothing.
[[nodiscard]] result<void> check_gradients(const gradients_params& grads,
                                           const torch::nn::Module& module);
/// Every check `restore_parameters` makes, changing nothing.
[[nodiscard]] result<void> check_parameters(const gradients_params& values,
                                            const torch::nn::Module& module);

// The same calls for a module held by a holder (`torch::nn::Linear`, a `TORCH_MODULE`): the
// holder shares the module, so the restores change the one it holds.
template <class T>
[[nodiscard]] result<gradients_params> from_module(const torch::nn::ModuleHolder<T>& module)
{
    return from_module(static_cast<const torch::nn::Module&>(*module));
}
template <class T>
[[nodiscard]] result<gradients_params>
parameters_from_module(const torch::nn::ModuleHolder<T>& module)
{
    return parameters_from_module(static_cast<const torch::nn::Module&>(*module));
}
template <class Tensors, class T>
    requires std::is_same_v<Tensors, gradients_params> ||
             std::is_same_v<Tensors, gradients_params_record>
[[nodiscard]] result<void> restore_gradients(const Tensors& grads,
                                             torch::nn::ModuleHolder<T> module)
{
    return restore_gradients(grads, static_cast<torch::nn::Module&>(*module));
}
template <class Tensors, class T>
    requires std::is_same_v<Tensors, gradients_params> ||
             std::is_same_v<Tensors, gradients_params_record>
[[nodiscard]] result<void> restore_parameters(const Tensors& values,
                                              torch::nn::ModuleHolder<T> module)
{
    return restore_parameters(values, static_cast<torch::nn::Module&>(*module));
}

} // namespace ruda
