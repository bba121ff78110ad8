// The GPUs a Python process reads CUDA tensors on: one `ruda::cuda_device` per ordinal, opened
// with `ruda.open_cuda_device(...)`'s options or, at the first tensor on it, with the defaults;
// kept for the process's life and refused in a forked child (which has no CUDA state).
#pragma once

#include <ruda/backend/cuda_device.hpp>
#include <ruda/error.hpp>

#include <pybind11/pybind11.h>

namespace ruda::python {

/// The device for CUDA tensors on `ordinal`, opened now with the default options unless it is
/// open. `errc::device_unavailable` with the driver's reason, or in a process forked after the
/// device was opened.
[[nodiscard]] result<cuda_device> cuda_device_for(int ordinal);

void bind_cuda_devices(pybind11::module_& m);

} // namespace ruda::python
