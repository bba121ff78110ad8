// Runs of small tensors: adjacent small tensors of one snapshot (slices of one flat gradient
// buffer, say) that one copy reads into one pinned buffer, each read then completing with its
// slice. Internal to the CUDA device.
#pragma once

#include "cuda_context.hpp"

#include <ruda/backend/detail/cuda_tensor_desc.hpp>
#include <ruda/tensor/storage.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace ruda::detail {

struct cuda_read_op;

// A run, decided when the snapshot is taken, so that it does not depend on the order in which
// reads reach the worker; touched on the worker only from then on.
struct cuda_run {
    CUdeviceptr address = 0;
    std::size_t bytes = 0;
    std::size_t tensors = 0;
    cuda_stream producer = nullptr;
    bool issued = false;
    bool landed = false;
    std::optional<error> failure;
    storage buffer;                                    // pinned; each read gets its slice
    std::vector<std::shared_ptr<cuda_read_op>> waiting; // reads waiting for the copy to land
};

/// Any thread: marks the runs of adjacent small tensors among `tensors`, in their order, none
/// over `max_bytes` and none spanning two allocations.
result<void> group_cuda_runs(const cuda_context& context,
                             std::span<std::shared_ptr<const cuda_tensor_desc>* const> tensors,
                             std::size_t max_bytes);

} // namespace ruda::detail
