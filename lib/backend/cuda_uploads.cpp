// Uploads: device memory filled through the pinned staging ring on the upload stream, into
// memory ruda allocates or in place into the trainer's own, ordered after and before the
// trainer's work on its stream.
#include "cuda_uploads.hpp"

#include <algorithm>
#include <cstring>
#include <string>

namespace ruda::detail {

result<void> cuda_uploads::create()
{
    BOOST_OUTCOME_TRY(context_->check(api_.cuStreamCreate(&stream_, stream_non_blocking),
                                      errc::device_unavailable, "cuStreamCreate"));
    for (CUevent* event : {&upload_event_, &consumer_event_}) {
        BOOST_OUTCOME_TRY(context_->check(api_.cuEventCreate(event, event_disable_timing),
                                          errc::device_unavailable, "cuEventCreate"));
    }
    return success();
}

cuda_uploads::~cuda_uploads()
{
    if (!context_->make_current()) {
        return;
    }
    for (CUevent event : {upload_event_, consumer_event_}) {
        if (event != nullptr) {
            api_.cuEventDestroy(event);
        }
    }
    if (stream_ != nullptr) {
        api_.cuStreamDestroy(stream_);
    }
}

result<void> cuda_uploads::refuse_in_worker() const
{
    if (with_.worker.get_executor().running_in_this_thread()) {
        return error{errc::device_unavailable,
                     "cuda device " + std::to_string(context_->ordinal()) +
                         ": uploads cannot run on the device's worker, which they wait for"};
    }
    return success();
}

result<void> cuda_uploads::copy_through_ring(CUdeviceptr address,
                                             std::span<const std::uint8_t> bytes)
{
    const std::size_t piece = with_.piece_bytes;
    for (std::size_t done = 0; done < bytes.size(); done += piece) {
        const std::size_t size = std::min(piece, bytes.size() - done);
        // A failed context: the ring's pieces will never land.
        BOOST_OUTCOME_TRY(const std::size_t offset, with_.ring.acquire(size));
        std::memcpy(with_.ring.at(offset), bytes.data() + done, size);
        auto copied = context_->check(
            api_.cuMemcpyHtoDAsync(address + done, with_.ring.at(offset), size, stream_),
            errc::read_failed, "cuMemcpyHtoDAsync of " + std::to_string(size) + " bytes");
        if (!copied) {
            with_.ring.release(offset); // never queued
            return std::move(copied).error();
        }
        auto batch = std::make_unique<cuda_batch>();
        batch->pieces.push_back({nullptr, size, offset, 0});
        with_.landings.launch(stream_, std::move(batch));
    }
    with_.tally.uploads.fetch_add(1);
    with_.tally.bytes_uploaded.fetch_add(bytes.size());
    return success();
}

result<cuda_tensor_desc> cuda_uploads::upload(std::span<const std::uint8_t> bytes, shape dims,
                                              dtype type)
{
    BOOST_OUTCOME_TRY(refuse_in_worker());
    BOOST_OUTCOME_TRY(context_->make_current());
    CUdeviceptr address = 0;
    BOOST_OUTCOME_TRY(context_->check(
        api_.cuMemAlloc(&address, std::max<std::size_t>(bytes.size(), 1)),
        errc::allocation_too_large, "cuMemAlloc of " + std::to_string(bytes.size()) + " bytes"));
    auto memory = std::make_shared<const device_allocation>(context_, address);
    BOOST_OUTCOME_TRY(copy_through_ring(address, bytes));
    cuda_tensor_desc desc;
    desc.address = address;
    desc.bytes = bytes.size();
    desc.dims = std::move(dims);
    desc.type = type;
    desc.producer = stream_;
    desc.keep_alive = std::move(memory);
    return desc;
}

result<void> cuda_uploads::upload_into(CUdeviceptr destination, std::span<const std::uint8_t> bytes,
                                       cuda_stream consumer)
{
    BOOST_OUTCOME_TRY(refuse_in_worker());
    BOOST_OUTCOME_TRY(context_->make_current());
    const auto where = [&] {
        return "cuda device " + std::to_string(context_->ordinal()) + ": " +
               std::to_string(bytes.size()) + " bytes at " + hex(destination);
    };
    CUdeviceptr base = 0;
    std::size_t size = 0;
    if (api_.cuMemGetAddressRange(&base, &size, destination) != cuda_success) {
        return error{errc::invalid_tensor,
                     where() + " cannot be uploaded: the address is not device memory"};
    }
    if (bytes.size() > size - (destination - base)) {
        return error{errc::byte_count_mismatch, where() + " do not fit the allocation of " +
                                                    std::to_string(size) + " bytes at " +
                                                    hex(base)};
    }
    {
        const std::lock_guard lock{event_mutex_};
        BOOST_OUTCOME_TRY(
            context_->check(api_.cuEventRecord(consumer_event_, static_cast<CUstream>(consumer)),
                            errc::read_failed, "cuEventRecord"));
        BOOST_OUTCOME_TRY(context_->check(api_.cuStreamWaitEvent(stream_, consumer_event_, 0),
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

result<void> cuda_uploads::order_after_uploads(cuda_stream stream)
{
    BOOST_OUTCOME_TRY(context_->make_current());
    const std::lock_guard lock{event_mutex_};
    BOOST_OUTCOME_TRY(context_->check(api_.cuEventRecord(upload_event_, stream_), errc::read_failed,
                                      "cuEventRecord"));
    return context_->check(api_.cuStreamWaitEvent(static_cast<CUstream>(stream), upload_event_, 0),
                           errc::read_failed, "cuStreamWaitEvent");
}

} // namespace ruda::detail
