// What a `cuda_backend` tensor refers to: device memory, its shape and type, the stream that
// produces it and what keeps it valid. Internal.
#pragma once

#include <ruda/backend/cuda_device.hpp>
#include <ruda/tensor/dtype.hpp>
#include <ruda/tensor/tensor_data.hpp>

#include <cstddef>
#include <memory>

namespace ruda::detail {

struct cuda_run;

// What a tensor refers to; shared by its copies, never changed.
struct cuda_tensor_desc {
    std::weak_ptr<cuda_device_state> device;
    cuda_device_ptr address = 0;
    std::size_t bytes = 0;
    ruda::shape dims;
    ruda::dtype type = dtype::f32();
    /// Reads wait for the work queued here when they are issued.
    cuda_stream producer = nullptr;
    /// The trainer's memory, which it may overwrite (so device staging copies it).
    bool borrowed = false;
    /// Keeps the memory valid: the trainer's handle, ruda's allocation or a staging lease.
    std::shared_ptr<const void> keep_alive;
    /// Set by a snapshot for adjacent small tensors: one copy reads the whole run.
    std::shared_ptr<cuda_run> run;
    std::size_t run_offset = 0;
};

} // namespace ruda::detail
