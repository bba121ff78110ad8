// A torch module's CUDA tensors as cuda_backend sees them: borrowed for reads, and new tensors
// filled from host data. Shared by ruda::torch's sources; internal.
#pragma once

#include <ruda/backend/cuda_backend.hpp>
#include <ruda/error.hpp>
#include <ruda/optim/cuda_module_gradients.hpp>
#include <ruda/tensor/tensor_data.hpp>

#include <ATen/core/Tensor.h>

namespace ruda::detail {

/// The trainer's stream: the one `on` names, else torch's current stream of its device.
[[nodiscard]] result<cuda_stream> stream_of(const cuda_module_device& on);

/// `tensor` borrowed in place by cuda_backend, read after the work queued on `producer`: a
/// dense float tensor on `on.device`, else the errors of `from_module(module, on)`.
[[nodiscard]] result<tensor_primitive<cuda_backend>>
borrow(at::Tensor tensor, const cuda_module_device& on, cuda_stream producer);

/// A new tensor like `like` (its device, dtype and sizes) holding `values` (of its dtype):
/// torch's memory, on torch's current stream, where libtorch has CUDA, filled through ruda's
/// staging ring before the work queued next on `consumer`; else memory ruda allocates, filled
/// on its upload stream, which sets `filled_on_upload_stream` (order `consumer` after the
/// uploads once all are made).
[[nodiscard]] result<at::Tensor> new_device_tensor(tensor_data values, const at::Tensor& like,
                                                   const cuda_module_device& on,
                                                   cuda_stream consumer,
                                                   bool& filled_on_upload_stream);

} // namespace ruda::detail
