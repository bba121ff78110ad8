// Uploads: device memory filled through the pinned staging ring on the upload stream, into
// memory ruda allocates or in place into the trainer's own, ordered after and before the
// trainer's work on its stream.
#include "cuda_device_internals.hpp"

#include <algorithm>
#include <cstring>
#include <string>

namespace ruda::detail {

result<void> cuda_device_state::refuse_upload_in_worker() const
{
    if (in_worker()) {
        return error{errc::device_unavailable,
                     "cuda device " + std::to_string(ordinal()) +
                         ": uploads cannot run on the device's worker, which they wait for"};
    }
    return success();
}

result<void> cuda_device_state::copy_through_ring(CUdeviceptr address,
                                                  std::span<const std::uint8_t> bytes)
{
    const std::size_t piece = piece_bytes();
    for (std::size_t done = 0; done < bytes.size(); done += piece) {
        const std::size_t size = std::min(piece, bytes.size() - done);
        std::size_t offset = 0;
        {
            std::unique_lock lock{ring_mutex_};
            ring_space_.wait(lock, [&] {
                if (fault_) {
                    return true;
                }
                const auto at = ring_.allocate(size);
                offset = at.value_or(0);
                return at.has_value();
            });
            if (fault_) {
                return *fault_; // the ring's pieces will never land
            }
        }
        std::memcpy(staging_memory_ + offset, bytes.data() + done, size);
        auto copied = context_->check(api_.cuMemcpyHtoDAsync(address + done,
                                                             staging_memory_ + offset, size,
                                                             upload_stream_),
                                      errc::read_failed,
                                      "cuMemcpyHtoDAsync of " + std::to_string(size) +
                                          " bytes");
        auto landing = std::make_unique<batch>();
        landing->owner = this;
        landing->pieces.push_back({nullptr, size, offset, 0});
        if (!copied) {
            release_now(std::move(landing));
            return std::move(copied).error();
        }
        launch_landing(upload_stream_, std::move(landing));
    }
    uploads_.fetch_add(1);
    bytes_uploaded_.fetch_add(bytes.size());
    return success();
}

result<cuda_tensor_desc> cuda_device_state::upload(std::span<const std::uint8_t> bytes,
                                                   shape dims, dtype type)
{
    BOOST_OUTCOME_TRY(refuse_upload_in_worker());
    BOOST_OUTCOME_TRY(context_->make_current());
    CUdeviceptr address = 0;
    BOOST_OUTCOME_TRY(context_->check(api_.cuMemAlloc(&address, std::max<std::size_t>(
                                                                    bytes.size(), 1)),
                                      errc::allocation_too_large,
                                      "cuMemAlloc of " + std::to_string(bytes.size()) +
                                          " bytes"));
    auto memory = std::make_shared<const device_allocation>(context_, address);
    BOOST_OUTCOME_TRY(copy_through_ring(address, bytes));
    cuda_tensor_desc desc;
    desc.address = address;
    desc.bytes = bytes.size();
    desc.dims = std::move(dims);
    desc.type = type;
    desc.producer = upload_stream_;
    desc.keep_alive = std::move(memory);
    return desc;
}

result<void> cuda_device_state::upload_into(CUdeviceptr destination,
                                            std::span<const std::uint8_t> bytes,
                                            cuda_stream consumer)
{
    BOOST_OUTCOME_TRY(refuse_upload_in_worker());
    BOOST_OUTCOME_TRY(context_->make_current());
    const auto where = [&] {
        return "cuda device " + std::to_string(ordinal()) + ": " +
               std::to_string(bytes.size()) + " bytes at " + hex(destination);
    };
    CUdeviceptr base = 0;
    std::size_t size = 0;
    if (api_.cuMemGetAddressRange(&base, &size, destination) != cuda_success) {
        return error{errc::invalid_tensor,
                     where() + " cannot be uploaded: the address is not device memory"};
    }
    if (bytes.size() > size - (destination - base)) {
        return error{errc::byte_count_mismatch,
                     where() + " do not fit the allocation of " + std::to_string(size) +
                         " bytes at " + hex(base)};
    }
    {
        const std::lock_guard lock{upload_event_mutex_};
        BOOST_OUTCOME_TRY(context_->check(
            api_.cuEventRecord(consumer_event_, static_cast<CUstream>(consumer)),
            errc::read_failed, "cuEventRecord"));
        BOOST_OUTCOME_TRY(
            context_->check(api_.cuStreamWaitEvent(upload_stream_, consumer_event_, 0),
                            errc::read_failed, "cuStreamWaitEvent"));
    }
    // The consumer waits even for a part: no piece may land under its later work.
    auto copied = copy_through_ring(destination, bytes);
    auto ordered = order_after_uploads(consumer);
    if (!copied) {
        return std::move(copied).error();
    }
    return ordered;
}

result<void> cuda_device_state::order_after_uploads(cuda_stream stream)
{
    BOOST_OUTCOME_TRY(context_->make_current());
    const std::lock_guard lock{upload_event_mutex_};
    BOOST_OUTCOME_TRY(context_->check(api_.cuEventRecord(upload_event_, upload_stream_),
                                      errc::read_failed, "cuEventRecord"));
    return context_->check(
        api_.cuStreamWaitEvent(static_cast<CUstream>(stream), upload_event_, 0),
        errc::read_failed, "cuStreamWaitEvent");
}

void cuda_device_state::release_now(std::unique_ptr<batch> landing)
{
    const std::lock_guard lock{ring_mutex_};
    for (const cuda_piece& piece : landing->pieces) {
        if (piece.staging_offset) {
            ring_.release(*piece.staging_offset);
        }
    }
    ring_space_.notify_all();
}

} // namespace ruda::detail
