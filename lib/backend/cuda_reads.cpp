// Reads on the worker, from queue to completion: the copy stream made to wait for the
// producer, device-to-host copies in pieces into a pinned record or through the ring, runs of
// small tensors read by one copy, cancellation, landings and a failed context. How a read then
// completes is cuda_in_flight.cpp's.
#include "cuda_reads.hpp"

#include <boost/asio/post.hpp>

#include <algorithm>
#include <cstring>
#include <string>

namespace ruda::detail {

result<void> cuda_reads::create(std::shared_ptr<storage_pool> record_pool)
{
    record_pool_ = std::move(record_pool);
    BOOST_OUTCOME_TRY(context_->check(api_.cuStreamCreate(&copy_stream_, stream_non_blocking),
                                      errc::device_unavailable, "cuStreamCreate"));
    return context_->check(api_.cuEventCreate(&read_event_, event_disable_timing),
                           errc::device_unavailable, "cuEventCreate");
}

cuda_reads::~cuda_reads()
{
    if (!context_->make_current()) {
        return;
    }
    if (read_event_ != nullptr) {
        api_.cuEventDestroy(read_event_);
    }
    if (copy_stream_ != nullptr) {
        api_.cuStreamDestroy(copy_stream_);
    }
}

void cuda_reads::start(const std::shared_ptr<cuda_read_op>& op)
{
    if (shutting_down_ || op->stopped) {
        op->finish(cancelled_read(), with_.tally);
        return;
    }
    if (auto failed = with_.ring.fault()) {
        op->finish(std::move(*failed), with_.tally);
        return;
    }
    waiting_.push_back(op);
    // Reads submitted together are issued together: one producer wait, one host function.
    if (!pump_posted_) {
        pump_posted_ = true;
        boost::asio::post(with_.worker, [this] {
            pump_posted_ = false;
            pump();
        });
    }
}

void cuda_reads::cancel(const std::shared_ptr<cuda_read_op>& op)
{
    if (op->done || op->stopped) {
        return;
    }
    op->stopped = true;
    std::erase(waiting_, op);
    if (op->landed == op->issued) {
        op->finish(cancelled_read(), with_.tally);
    }
}

void cuda_reads::pump()
{
    auto batch = std::make_unique<cuda_batch>();
    std::size_t batch_bytes = 0;
    std::vector<CUstream> waited;
    const std::size_t stream_room = with_.ring.capacity();
    while (!waiting_.empty() && !shutting_down_) {
        const auto op = waiting_.front();
        const cuda_tensor_desc& tensor = *op->tensor;
        if (tensor.run) {
            if (!tensor.run->issued && queued_bytes_ > 0 &&
                queued_bytes_ + tensor.run->bytes > stream_room) {
                break;
            }
            waiting_.pop_front();
            batch_bytes += join_run(op, waited, *batch);
            continue;
        }
        if (!op->started) {
            if (auto begun = begin_read(*op, waited); !begun) {
                waiting_.pop_front();
                op->stopped = true;
                op->finish(std::move(begun).error(), with_.tally);
                continue;
            }
            if (tensor.bytes == 0) {
                waiting_.pop_front();
                op->finish(std::nullopt, with_.tally);
                continue;
            }
        }
        const std::size_t size = std::min(with_.piece_bytes, tensor.bytes - op->issued);
        if (queued_bytes_ > 0 && queued_bytes_ + size > stream_room) {
            break; // the stream has enough queued; more once a batch lands
        }
        // Straight into a pinned record, or through the pinned ring into a plain one.
        std::optional<std::size_t> staging;
        std::uint8_t* target = nullptr;
        if (record_pool_) {
            target = op->destination.writable_data() + op->issued;
        } else {
            staging = with_.ring.try_acquire(size);
            if (!staging) {
                break;
            }
            target = with_.ring.at(*staging);
        }
        const CUresult status =
            api_.cuMemcpyDtoHAsync(target, tensor.address + op->issued, size, copy_stream_);
        if (status != cuda_success) {
            if (staging) {
                with_.ring.release(*staging);
            }
            waiting_.pop_front();
            op->stopped = true;
            op->failure = context_->failure(status, errc::read_failed,
                                            "cuMemcpyDtoHAsync of " + std::to_string(size) +
                                                " bytes at offset " + std::to_string(op->issued));
            if (op->landed == op->issued) {
                op->finish(*op->failure, with_.tally);
            }
            continue;
        }
        with_.tally.pieces.fetch_add(1);
        batch->pieces.push_back({op, size, staging, op->issued});
        batch_bytes += size;
        op->issued += size;
        queued_bytes_ += size;
        if (op->issued == tensor.bytes) {
            waiting_.pop_front();
        }
        // Large pieces report their landing each, so the stream is refilled while busy;
        // small ones share a host function.
        if (batch_bytes >= with_.piece_bytes / 2) {
            with_.landings.launch_after(copy_stream_, std::move(batch));
            batch = std::make_unique<cuda_batch>();
            batch_bytes = 0;
        }
    }
    if (!batch->pieces.empty()) {
        with_.landings.launch_after(copy_stream_, std::move(batch));
    }
}

std::size_t cuda_reads::join_run(const std::shared_ptr<cuda_read_op>& op,
                                 std::vector<CUstream>& waited, cuda_batch& batch)
{
    op->started = true;
    const auto run = op->tensor->run;
    std::size_t queued = 0;
    if (!run->issued) {
        run->issued = true;
        queued = issue_run(*run, waited);
        if (queued > 0) {
            batch.pieces.push_back({nullptr, run->bytes, std::nullopt, 0, run});
        }
    }
    if (run->landed || run->failure) {
        op->finish_from(*run, with_.tally);
    } else {
        run->waiting.push_back(op);
    }
    return queued;
}

std::size_t cuda_reads::issue_run(cuda_run& run, std::vector<CUstream>& waited)
{
    auto buffer = record_pool_->acquire(run.bytes);
    if (!buffer) {
        run.failure = buffer.error();
        return 0;
    }
    if (auto waits = wait_for_producer(run.producer, waited); !waits) {
        run.failure = waits.error();
        return 0;
    }
    const CUresult status = api_.cuMemcpyDtoHAsync(buffer.value().writable_data(), run.address,
                                                   run.bytes, copy_stream_);
    if (status != cuda_success) {
        run.failure =
            context_->failure(status, errc::read_failed,
                              "cuMemcpyDtoHAsync of " + std::to_string(run.bytes) + " bytes of " +
                                  std::to_string(run.tensors) + " small tensors");
        return 0;
    }
    with_.tally.pieces.fetch_add(1);
    run.buffer = std::move(buffer).value();
    queued_bytes_ += run.bytes;
    return run.bytes;
}

result<void> cuda_reads::begin_read(cuda_read_op& op, std::vector<CUstream>& waited)
{
    op.started = true;
    if (!worker_has_context_) {
        return error{errc::device_unavailable, "cuda device " +
                                                   std::to_string(context_->ordinal()) +
                                                   ": the worker has no context"};
    }
    const std::size_t size = op.tensor->bytes;
    if (record_pool_) {
        BOOST_OUTCOME_TRY(op.destination, record_pool_->acquire(size));
    } else {
        BOOST_OUTCOME_TRY(op.destination, storage::try_allocate(size));
    }
    return wait_for_producer(op.tensor->producer, waited);
}

result<void> cuda_reads::wait_for_producer(cuda_stream stream, std::vector<CUstream>& waited)
{
    const auto producer = static_cast<CUstream>(stream);
    if (std::find(waited.begin(), waited.end(), producer) == waited.end()) {
        waited.push_back(producer);
        BOOST_OUTCOME_TRY(context_->check(api_.cuEventRecord(read_event_, producer),
                                          errc::read_failed, "cuEventRecord"));
        BOOST_OUTCOME_TRY(context_->check(api_.cuStreamWaitEvent(copy_stream_, read_event_, 0),
                                          errc::read_failed, "cuStreamWaitEvent"));
    }
    return success();
}

void cuda_reads::landed(std::unique_ptr<cuda_batch> batch)
{
    if (!with_.landings.take_back(batch.get())) {
        batch.release(); // given up when the context failed: the landings keep it
        return;
    }
    with_.tally.completions.fetch_add(1);
    for (cuda_piece& piece : batch->pieces) {
        if (piece.staging_offset) {
            if (piece.read && !piece.read->stopped) {
                std::memcpy(piece.read->destination.writable_data() + piece.destination_offset,
                            with_.ring.at(*piece.staging_offset), piece.bytes);
            }
            with_.ring.release(*piece.staging_offset);
        }
        if (piece.run) {
            piece.run->landed = true;
            queued_bytes_ -= piece.bytes;
            finish_waiters(*piece.run, with_.tally);
            continue;
        }
        if (!piece.read) {
            continue; // an upload's
        }
        cuda_read_op& op = *piece.read;
        op.landed += piece.bytes;
        queued_bytes_ -= piece.bytes;
        if (op.landed == op.issued && (op.stopped || op.issued == op.tensor->bytes)) {
            if (op.failure) {
                op.finish(*op.failure, with_.tally);
            } else if (op.stopped) {
                op.finish(cancelled_read(), with_.tally);
            } else {
                op.finish(std::nullopt, with_.tally);
            }
        }
    }
    batch.reset();
    end_if_done();
    pump();
}

void cuda_reads::context_failed(CUresult status)
{
    const error failure = with_.ring.fail(
        context_->failure(status, errc::read_failed, "the context failed with copies in flight"));
    for (cuda_batch* lost : with_.landings.give_up_all()) {
        for (cuda_piece& piece : lost->pieces) {
            if (piece.run) {
                piece.run->failure = failure;
                kept_after_fault_.push_back(std::move(piece.run->buffer));
                finish_waiters(*piece.run, with_.tally);
            } else if (piece.read) {
                fail_after_fault(piece.read, failure);
            }
        }
    }
    while (!waiting_.empty()) {
        const auto op = waiting_.front();
        waiting_.pop_front();
        fail_after_fault(op, failure);
    }
    queued_bytes_ = 0;
    end_if_done();
}

void cuda_reads::fail_after_fault(const std::shared_ptr<cuda_read_op>& op, const error& failure)
{
    op->stopped = true;
    kept_after_fault_.push_back(std::move(op->destination));
    op->finish(failure, with_.tally);
}

void cuda_reads::shut_down()
{
    shutting_down_ = true;
    while (!waiting_.empty()) {
        const auto op = waiting_.front();
        waiting_.pop_front();
        op->stopped = true;
        if (op->landed == op->issued) {
            op->finish(cancelled_read(), with_.tally);
        }
    }
    end_if_done();
}

void cuda_reads::end_if_done()
{
    if (shutting_down_ && with_.landings.out() == 0) {
        worker_may_end_();
    }
}

} // namespace ruda::detail
