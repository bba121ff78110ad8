// Reads on the worker, from queue to completion: the copy stream made to wait for the
// producer, device-to-host copies in pieces into a pinned record or through the ring, runs of
// small tensors read by one copy, cancellation, landings, a failed context, and the completion
// posted to the reader.
#include "cuda_reads.hpp"

#include <ruda/runtime/detail/post_completion.hpp>

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
        finish(op, cancelled_read());
        return;
    }
    if (auto failed = with_.ring.fault()) {
        finish(op, std::move(*failed));
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
        finish(op, cancelled_read());
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
                finish(op, std::move(begun).error());
                continue;
            }
            if (tensor.bytes == 0) {
                waiting_.pop_front();
                finish(op, std::nullopt);
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
                finish(op, *op->failure);
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
        complete_from_run(op, *run);
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

void cuda_reads::complete_from_run(const std::shared_ptr<cuda_read_op>& op, const cuda_run& run)
{
    if (run.failure) {
        finish(op, *run.failure);
        return;
    }
    op->destination = run.buffer.slice(op->tensor->run_offset, op->tensor->bytes);
    finish(op, op->stopped ? std::optional<error>{cancelled_read()} : std::nullopt);
}

void cuda_reads::complete_run(cuda_run& run)
{
    for (const auto& waiter : run.waiting) {
        complete_from_run(waiter, run);
    }
    run.waiting.clear();
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
            complete_run(*piece.run);
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
                finish(piece.read, *op.failure);
            } else if (op.stopped) {
                finish(piece.read, cancelled_read());
            } else {
                finish(piece.read, std::nullopt);
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
                complete_run(*piece.run);
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
    finish(op, failure);
}

void cuda_reads::finish(const std::shared_ptr<cuda_read_op>& op, std::optional<error> failure)
{
    if (op->done) {
        return;
    }
    op->done = true;
    result<storage> outcome = std::move(op->destination);
    if (failure) {
        if (*failure == errc::cancelled) {
            with_.tally.reads_cancelled.fetch_add(1);
        } else {
            with_.tally.reads_failed.fetch_add(1);
        }
        outcome = std::move(*failure);
    } else {
        with_.tally.reads_completed.fetch_add(1);
        with_.tally.bytes_read.fetch_add(op->tensor->bytes);
    }
    op->tensor.reset();
    post_completion(std::move(op->work), std::move(op->handler), std::move(outcome));
}

void cuda_reads::shut_down()
{
    shutting_down_ = true;
    while (!waiting_.empty()) {
        const auto op = waiting_.front();
        waiting_.pop_front();
        op->stopped = true;
        if (op->landed == op->issued) {
            finish(op, cancelled_read());
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
