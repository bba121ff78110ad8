// Device staging: a buffer in device memory into which a snapshot's call copies the trainer's
// borrowed tensors, on a stream of its own ordered after their producers' work so far and before
// their next, so that the trainer may overwrite them at once; each staged copy holds its part of
// the buffer until its last handle (its read landed) is gone. Internal to the CUDA device.
#pragma once

#include "cuda_context.hpp"
#include "staging_ring.hpp"

#include <ruda/backend/detail/cuda_tensor_desc.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>

namespace ruda::detail {

class device_staging : public std::enable_shared_from_this<device_staging> {
public:
    /// A buffer of `bytes` on the context's device, with its stream and events.
    static result<std::shared_ptr<device_staging>>
    create(std::shared_ptr<const cuda_context> context, std::size_t bytes);
    ~device_staging();
    device_staging(const device_staging&) = delete;
    device_staging& operator=(const device_staging&) = delete;

    /// Any thread: replaces each borrowed tensor among `tensors` by its copy in the buffer,
    /// counting the tensors staged and those the buffer had no room for (read in place).
    result<void> stage(std::span<std::shared_ptr<const cuda_tensor_desc>* const> tensors,
                       std::atomic<std::uint64_t>& staged, std::atomic<std::uint64_t>& unstaged);

private:
    struct lease;
    explicit device_staging(std::shared_ptr<const cuda_context> context, std::size_t bytes);

    std::shared_ptr<const cuda_context> context_;
    std::mutex mutex_; // the ring, and the stream's events
    staging_ring ring_;
    CUdeviceptr base_ = 0;
    CUstream stream_ = nullptr;
    CUevent begin_event_ = nullptr; // the producers' work so far, which the copies follow
    CUevent end_event_ = nullptr;   // the copies, which the producers' next work follows
};

} // namespace ruda::detail
