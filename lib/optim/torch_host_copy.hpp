// Tensors copied between torch and host memory at the call, for the small parts of a training
// state that no backend reads (step counts, generator states, integer buffers) and for the
// optimizer states a restore makes. Shared by ruda::torch's sources; internal.
#pragma once

#include <ruda/error.hpp>
#include <ruda/optim/gradients_params_record.hpp>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <string>

namespace ruda::detail {

/// A copy of `tensor`'s values as an entry named `name`, id `param_id::from_name(name)`: any
/// dtype `ruda_dtype` knows, from any device (copied to the host first). `errc::invalid_dtype`
/// for another dtype, `errc::invalid_tensor` for an undefined or sparse tensor.
[[nodiscard]] result<gradient_entry> host_copy(const std::string& name, const at::Tensor& tensor);

/// A new tensor on `device` holding `entry`'s values in its original dtype (narrower stored
/// data widened first). `errc::invalid_dtype` for a dtype torch lacks.
[[nodiscard]] result<at::Tensor> tensor_of(const gradient_entry& entry, const c10::Device& device);

} // namespace ruda::detail
