// A read on the worker, from queue to completion: the copy stream made to wait for the
// producer, device-to-host copies in pieces into a pinned record or through the ring, runs of
// small tensors read by one copy, cancellation, and the completion posted to the reader.
#include "cuda_device_internals.hpp"

#include <ruda/runtime/detail/post_completion.hpp>

#include <boost/asio/post.hpp>

#include <algorithm>
#include <string>

namespace ruda::detail {

void cuda_device_state::start(const std::shared_ptr<cuda_read_op>& op)
{
    if (shutting_down_ || op->stopped) {
        finish(op, cancelled_read());
        return;
    }
    if (auto failed = fault()) {
        finish(op, std::move(*failed));
        return;
    }
    waiting_.push_back(op);
    // Reads submitted together are issued together: one producer wait, one host function.
    if (!pump_posted_) {
        pump_posted_ = true;
        boost::asio::post(io_, [this] {
            pump_posted_ = false;
            pump();
        });
    }
}

void cuda_device_state::cancel(const std::shared_ptr<cuda_read_op>& op)
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

void cuda_device_state::pump()
{
    auto landing = std::make_unique<batch>();
    landing->owner = this;
    std::size_t landing_bytes = 0;
    std::vector<CUstream> waited;
    while (!waiting_.empty() && !shutting_down_) {
        const auto op = waiting_.front();
        const cuda_tensor_desc& tensor = *op->tensor;
        if (tensor.run) {
            if (!tensor.run->issued && queued_bytes_ > 0 &&
                queued_bytes_ + tensor.run->bytes > ring_.capacity()) {
                break;
            }
            waiting_.pop_front();
            landing_bytes += join_run(op, waited, *landing);
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
        const std::size_t size = std::min(piece_bytes(), tensor.bytes - op->issued);
        if (queued_bytes_ > 0 && queued_bytes_ + size > ring_.capacity()) {
            break; // the stream has enough queued; more once a batch lands
        }
        // Straight into a pinned record, or through the pinned ring into a plain one.
        std::optional<std::size_t> staging;
        std::uint8_t* target = nullptr;
        if (options_.pinned_records) {
            target = op->destination.writable_data() + op->issued;
        } else {
            const std::lock_guard lock{ring_mutex_};
            staging = ring_.allocate(size);
            if (!staging) {
                break;
            }
            target = staging_memory_ + *staging;
        }
        const CUresult status = api_.cuMemcpyDtoHAsync(target, tensor.address + op->issued,
                                                       size, copy_stream_);
        if (status != cuda_success) {
            if (staging) {
                const std::lock_guard lock{ring_mutex_};
                ring_.release(*staging);
            }
            waiting_.pop_front();
            op->stopped = true;
            op->failure = context_->failure(status, errc::read_failed,
                                            "cuMemcpyDtoHAsync of " + std::to_string(size) +
                                                " bytes at offset " +
                                                std::to_string(op->issued));
            if (op->landed == op->issued) {
                finish(op, *op->failure);
            }
            continue;
        }
        pieces_.fetch_add(1);
        landing->pieces.push_back({op, size, staging, op->issued});
        landing_bytes += size;
        op->issued += size;
        queued_bytes_ += size;
        if (op->issued == tensor.bytes) {
            waiting_.pop_front();
        }
        // Large pieces report their landing each, so the stream is refilled while busy;
        // small ones share a host function.
        if (landing_bytes >= piece_bytes() / 2) {
            launch_read_landing(std::move(landing));
            landing = std::make_unique<batch>();
            landing->owner = this;
            landing_bytes = 0;
        }
    }
    if (!landing->pieces.empty()) {
        launch_read_landing(std::move(landing));
    }
}

std::size_t cuda_device_state::join_run(const std::shared_ptr<cuda_read_op>& op,
                                        std::vector<CUstream>& waited, batch& landing)
{
    op->started = true;
    const auto run = op->tensor->run;
    std::size_t queued = 0;
    if (!run->issued) {
        run->issued = true;
        queued = issue_run(*run, waited);
        if (queued > 0) {
            landing.pieces.push_back({nullptr, run->bytes, std::nullopt, 0, run});
        }
    }
    if (run->landed || run->failure) {
        complete_from_run(op, *run);
    } else {
        run->waiting.push_back(op);
    }
    return queued;
}

std::size_t cuda_device_state::issue_run(cuda_run& run, std::vector<CUstream>& waited)
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
    const CUresult status = api_.cuMemcpyDtoHAsync(buffer.value().writable_data(),
                                                   run.address, run.bytes, copy_stream_);
    if (status != cuda_success) {
        run.failure = context_->failure(status, errc::read_failed,
                                        "cuMemcpyDtoHAsync of " + std::to_string(run.bytes) +
                                            " bytes of " + std::to_string(run.tensors) +
                                            " small tensors");
        return 0;
    }
    pieces_.fetch_add(1);
    run.buffer = std::move(buffer).value();
    queued_bytes_ += run.bytes;
    return run.bytes;
}

void cuda_device_state::complete_from_run(const std::shared_ptr<cuda_read_op>& op,
                                          const cuda_run& run)
{
    if (run.failure) {
        finish(op, *run.failure);
        return;
    }
    op->destination = run.buffer.slice(op->tensor->run_offset, op->tensor->bytes);
    finish(op, op->stopped ? std::optional<error>{cancelled_read()} : std::nullopt);
}

result<void> cuda_device_state::begin_read(cuda_read_op& op, std::vector<CUstream>& waited)
{
    op.started = true;
    if (!worker_has_context_) {
        return error{errc::device_unavailable, "cuda device " + std::to_string(ordinal()) +
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

result<void> cuda_device_state::wait_for_producer(cuda_stream stream, std::vector<CUstream>& waited)
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

void cuda_device_state::finish(const std::shared_ptr<cuda_read_op>& op,
                               std::optional<error> failure)
{
    if (op->done) {
        return;
    }
    op->done = true;
    result<storage> outcome = std::move(op->destination);
    if (failure) {
        if (*failure == errc::cancelled) {
            reads_cancelled_.fetch_add(1);
        } else {
            reads_failed_.fetch_add(1);
        }
        outcome = std::move(*failure);
    } else {
        reads_completed_.fetch_add(1);
        bytes_read_.fetch_add(op->tensor->bytes);
    }
    op->tensor.reset();
    post_completion(std::move(op->work), std::move(op->handler), std::move(outcome));
}

void cuda_device_state::shut_down()
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
    if (batches_out() == 0) {
        work_.reset();
        context_check_.cancel();
    }
}

} // namespace ruda::detail
