// A torch module on a GPU: its gradients and parameter values as `gradients_params` on
// `cuda_backend`, borrowing the module's device memory, and restores that upload into the
// module's own tensors, in place. Part of `ruda::torch`.
//
//     auto gpu = ruda::cuda_device::open({.ordinal = 0}).value();
//     auto grads = ruda::from_module(model, {gpu}).value();   // after torch's current stream
//     auto record = co_await grads.to_record_async<ruda::cuda_backend>();
//     ...
//     ruda::restore_gradients(record, model, {gpu}).value();  // before its next kernels
//
// ruda drives the GPU through the CUDA driver it opens at run time, so none of this needs CUDA
// to build; what needs a libtorch with CUDA is a model on the GPU, and the default stream.
#pragma once

#include <ruda/backend/cuda_backend.hpp>
#include <ruda/error.hpp>
#include <ruda/optim/gradients_params.hpp>
#include <ruda/optim/gradients_params_record.hpp>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <optional>

namespace ruda {

/// The GPU a module's tensors live on, and the stream its work runs on.
struct cuda_module_device {
    cuda_device device;
    /// The trainer's stream (`at::cuda::getCurrentCUDAStream().stream()`, say): reads of the
    /// borrowed tensors wait for the work queued on it, and a restore's uploads come after
    /// that work and before the work queued next. Empty: torch's current stream of the device
    /// when the call runs (`errc::device_unavailable` where libtorch has no CUDA,
    /// `errc::unsupported_device` where it cannot give a stream's handle: libtorch 1.x).
    std::optional<cuda_stream> stream{};
};

/// Whether the libtorch ruda::torch runs with has CUDA (its CUDA library is loaded).
[[nodiscard]] bool torch_has_cuda() noexcept;

/// The handle of torch's current CUDA stream of device `ordinal`; the errors as
/// `cuda_module_device::stream` says.
[[nodiscard]] result<cuda_stream> torch_current_cuda_stream(int ordinal);

/// Every parameter's `.grad()` that is defined, borrowed in place (no device copy; the
/// tensor handle keeps the memory while ruda may read it), each registered with its
/// parameter's name and ordered after `on.stream`. Each must be a dense (strided, contiguous)
/// CUDA tensor on `on.device` of dtype f64, f32, f16 or bf16: `errc::unsupported_device` for a
/// tensor on the CPU or another GPU, `errc::invalid_tensor` for a sparse or non-contiguous one,
/// `errc::invalid_dtype` for another dtype, `errc::duplicate_param_id` when two names hash to
/// one id; each message names the parameter. As for any borrowed tensor, the trainer leaves the
/// gradients alone until the snapshot completes, unless the device has device staging.
[[nodiscard]] result<gradients_params> from_module(const torch::nn::Module& module,
                                                   const cuda_module_device& on);

/// The parameter values themselves, borrowed the same way, for checkpoints that hold the
/// weights next to the gradients.
[[nodiscard]] result<gradients_params> parameters_from_module(const torch::nn::Module& module,
                                                              const cuda_module_device& on);

/// Uploads each gradient of `record` into its parameter's `.grad()`, in place, and clears
/// (makes undefined) the gradients of parameters the record does not hold, so the module has
/// exactly the record's gradients. A parameter whose gradient is undefined, or not a dense
/// tensor of its dtype and shape on the device, gets a new one: from torch's allocator, on
/// torch's current stream (so `on.stream` should be that stream), or, where libtorch has no
/// CUDA, in memory ruda allocates. Data stored narrower (a precision setting) is widened on the
/// host to the gradient's dtype first.
/// The uploads go after the work queued on `on.stream` and before the work queued there next;
/// the call returns once they are queued.
///
/// Everything is checked before the module changes: the record itself (as
/// `validate_gradients_record`), an id that is no parameter's (`errc::unknown_parameter`), a
/// dtype (`errc::invalid_dtype`) or shape (`errc::shape_mismatch`) other than the parameter's,
/// a parameter not on `on.device` (`errc::unsupported_device`). A driver error while copying
/// (`errc::read_failed`) leaves the module with part of the record.
[[nodiscard]] result<void> restore_gradients(const gradients_params_record& record,
                                             torch::nn::Module& module,
                                             const cuda_module_device& on);

/// Uploads each value of `record` into its parameter, in place (no autograd, no new memory:
/// optimizers keep referring to the same tensors). Checked first like `restore_gradients`;
/// every parameter must have a value (`errc::not_found` naming the first that has none) and
/// be dense (`errc::invalid_tensor`).
[[nodiscard]] result<void> restore_parameters(const gradients_params_record& record,
                                              torch::nn::Module& module,
                                              const cuda_module_device& on);

/// Every check `restore_gradients(record, module, on)` makes, changing nothing.
[[nodiscard]] result<void> check_gradients(const gradients_params_record& record,
                                           const torch::nn::Module& module,
                                           const cuda_module_device& on);
/// Every check `restore_parameters(record, module, on)` makes, changing nothing.
[[nodiscard]] result<void> check_parameters(const gradients_params_record& record,
                                            const torch::nn::Module& module,
                                            const cuda_module_device& on);

// The same calls for a module held by a holder (`torch::nn::Linear`, a `TORCH_MODULE`).
template <class T>
[[nodiscard]] result<gradients_params> from_module(const torch::nn::ModuleHolder<T>& module,
                                                   const cuda_module_device& on)
{
    return from_module(static_cast<const torch::nn::Module&>(*module), on);
}
template <class T>
[[nodiscard]] result<gradients_params>
parameters_from_module(const torch::nn::ModuleHolder<T>& module, const cuda_module_device& on)
{
    return parameters_from_module(static_cast<const torch::nn::Module&>(*module), on);
}
template <class T>
[[nodiscard]] result<void> restore_gradients(const gradients_params_record& record,
                                             torch::nn::ModuleHolder<T> module,
                                             const cuda_module_device& on)
{
    return restore_gradients(record, static_cast<torch::nn::Module&>(*module), on);
}
template <class T>
[[nodiscard]] result<void> restore_parameters(const gradients_params_record& record,
                                              torch::nn::ModuleHolder<T> module,
                                              const cuda_module_device& on)
{
    return restore_parameters(record, static_cast<torch::nn::Module&>(*module), on);
}

} // namespace ruda
