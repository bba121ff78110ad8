// Uploads: device memory filled through the pinned staging ring on the upload stream, into
// memory ruda allocates or in place into the trainer's own, ordered after and before the
// trainer's work on its stream. They run on the caller's thread, never on the worker, which
// they wait for (for room in the ring). Internal to the CUDA device.
#pragma once

#include "cuda_context.hpp"
#include "cuda_shared_parts.hpp"

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>

namespace ruda::detail {

class cuda_uploads {
public:
    cuda_uploads(std::shared_ptr<const cuda_context> context, cuda_shared_parts with)
        : context_(std::move(context)), api_(context_->api()), with_(with)
    {
    }
    ~cuda_uploads();
    cuda_uploads(const cuda_uploads&) = delete;
    cuda_uploads& operator=(const cuda_uploads&) = delete;

    // The upload stream and its events.
    result<void> create();

    // Any thread but the worker: device memory filled from `bytes`.
    result<cuda_tensor_desc> upload(std::span<const std::uint8_t> bytes, shape dims, dtype type);

    // Any thread but the worker: `bytes` into memory the caller owns, after the consumer's
    // work so far, and the consumer after the copies.
    result<void> upload_into(CUdeviceptr destination, std::span<const std::uint8_t> bytes,
                             cuda_stream consumer);

    // `stream` made to wait for every upload issued so far.
    result<void> order_after_uploads(cuda_stream stream);

private:
    // An error on the worker, which an upload would wait for.
    result<void> refuse_in_worker() const;

    // `bytes` to `address` on the upload stream, in pieces through the ring: returns once they
    // are queued (the caller's bytes are in the ring by then).
    result<void> copy_through_ring(CUdeviceptr address, std::span<const std::uint8_t> bytes);

    std::shared_ptr<const cuda_context> context_;
    const driver& api_;
    cuda_shared_parts with_;
    CUstream stream_ = nullptr;
    std::mutex event_mutex_; // the two events
    CUevent upload_event_ = nullptr;
    CUevent consumer_event_ = nullptr; // the consumer's work before an upload into its memory
};

} // namespace ruda::detail
