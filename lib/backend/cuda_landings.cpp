// How copies report that they have landed: a host function per batch, on the notify stream,
// that only posts the batch back to the worker; and, while batches are out, the worker's watch
// for a failed context, which would never run their host functions.
#include "cuda_device_internals.hpp"

#include <boost/asio/post.hpp>

#include <chrono>
#include <cstring>
#include <iterator>

namespace ruda::detail {

namespace {

// How often the worker asks whether the context has failed while copies are out: a failed
// context never runs their host functions, so that is the only way their reads can end.
constexpr std::chrono::milliseconds context_check_interval{100};

} // namespace

void cuda_device_state::on_landed(void* user_data)
{
    auto* landing = static_cast<batch*>(user_data);
    cuda_device_state* owner = landing->owner;
    owner->callbacks_inside_.fetch_add(1);
    boost::asio::post(owner->io_, [landing] {
        landing->owner->landed(std::unique_ptr<batch>(landing));
    });
    owner->callbacks_inside_.fetch_sub(1); // the last touch of the device
}

void cuda_device_state::launch_landing(CUstream stream, std::unique_ptr<batch> landing)
{
    {
        const std::lock_guard lock{batches_mutex_};
        batches_out_.insert(landing.get());
    }
    watch_context();
    if (api_.cuLaunchHostFunc(stream, &on_landed, landing.get()) == cuda_success) {
        landing.release(); // on_landed owns it now
        return;
    }
    // No host function: the only way left to know the copies are done is to wait.
    batch* raw = landing.release();
    if (const CUresult status = api_.cuStreamSynchronize(stream); status != cuda_success) {
        // The copies may not have run: the batch's reads fail, its memory is kept.
        boost::asio::post(io_, [this, status] { context_failed(status); });
        return;
    }
    boost::asio::post(io_, [raw] { raw->owner->landed(std::unique_ptr<batch>(raw)); });
}

void cuda_device_state::launch_read_landing(std::unique_ptr<batch> landing)
{
    if (api_.cuEventRecord(landing_event_, copy_stream_) == cuda_success &&
        api_.cuStreamWaitEvent(notify_stream_, landing_event_, 0) == cuda_success) {
        launch_landing(notify_stream_, std::move(landing));
    } else {
        launch_landing(copy_stream_, std::move(landing));
    }
}

void cuda_device_state::watch_context()
{
    if (!watching_context_.exchange(true)) {
        boost::asio::post(io_, [this] { check_context_later(); });
    }
}

void cuda_device_state::check_context_later()
{
    context_check_.expires_after(context_check_interval);
    context_check_.async_wait([this](const boost::system::error_code& cancelled) {
        if (cancelled || !worker_has_context_) { // without a context it cannot ask
            watching_context_.store(false);
            return;
        }
        if (batches_out() == 0) {
            watching_context_.store(false);
            // A batch launched since the check saw the flag still set: watch for it here.
            if (batches_out() == 0 || watching_context_.exchange(true)) {
                return;
            }
        }
        if (const CUresult status = api_.cuStreamQuery(copy_stream_);
            status != cuda_success && status != cuda_not_ready) {
            watching_context_.store(false);
            context_failed(status);
            return;
        }
        check_context_later();
    });
}

void cuda_device_state::context_failed(CUresult status)
{
    error failure = context_->failure(status, errc::read_failed,
                                      "the context failed with copies in flight");
    {
        const std::lock_guard lock{ring_mutex_};
        if (fault_) {
            failure = *fault_; // the first failure is the one every later call reports
        } else {
            fault_ = failure;
        }
    }
    ring_space_.notify_all();
    std::vector<std::unique_ptr<batch>> lost;
    {
        const std::lock_guard lock{batches_mutex_};
        for (batch* out : batches_out_) {
            lost.emplace_back(out);
        }
        batches_out_.clear();
    }
    for (const auto& landing : lost) {
        for (cuda_piece& piece : landing->pieces) {
            if (piece.run) {
                piece.run->failure = failure;
                kept_after_fault_.push_back(std::move(piece.run->buffer));
                for (const auto& waiter : piece.run->waiting) {
                    complete_from_run(waiter, *piece.run);
                }
                piece.run->waiting.clear();
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
    abandoned_.insert(abandoned_.end(), std::make_move_iterator(lost.begin()),
                      std::make_move_iterator(lost.end()));
    if (shutting_down_ && batches_out() == 0) {
        work_.reset();
    }
}

std::size_t cuda_device_state::batches_out()
{
    const std::lock_guard lock{batches_mutex_};
    return batches_out_.size();
}

std::optional<error> cuda_device_state::fault()
{
    const std::lock_guard lock{ring_mutex_};
    return fault_;
}

void cuda_device_state::fail_after_fault(const std::shared_ptr<cuda_read_op>& op,
                                         const error& failure)
{
    op->stopped = true;
    kept_after_fault_.push_back(std::move(op->destination));
    finish(op, failure);
}

void cuda_device_state::landed(std::unique_ptr<batch> landing)
{
    {
        const std::lock_guard lock{batches_mutex_};
        if (batches_out_.erase(landing.get()) == 0) {
            landing.release(); // abandoned when the context failed, which keeps it
            return;
        }
    }
    completions_.fetch_add(1);
    bool released = false;
    for (cuda_piece& piece : landing->pieces) {
        if (piece.staging_offset) {
            if (piece.read && !piece.read->stopped) {
                std::memcpy(piece.read->destination.writable_data() + piece.destination_offset,
                            staging_memory_ + *piece.staging_offset, piece.bytes);
            }
            const std::lock_guard lock{ring_mutex_};
            ring_.release(*piece.staging_offset);
            released = true;
        }
        if (piece.run) {
            piece.run->landed = true;
            queued_bytes_ -= piece.bytes;
            for (const auto& waiter : piece.run->waiting) {
                complete_from_run(waiter, *piece.run);
            }
            piece.run->waiting.clear();
            continue;
        }
        if (!piece.read) {
            continue;
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
    if (released) {
        ring_space_.notify_all();
    }
    landing.reset();
    if (shutting_down_ && batches_out() == 0) {
        work_.reset();
        context_check_.cancel();
    }
    pump();
}

} // namespace ruda::detail
