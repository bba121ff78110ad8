// How copies report that they have landed: a host function per batch, on the notify stream,
// that only posts the batch back to the worker; and, while batches are out, the worker's watch
// for a failed context, which would never run their host functions.
#include "cuda_landings.hpp"

#include <boost/asio/post.hpp>

#include <chrono>
#include <thread>

namespace ruda::detail {

namespace {

// How often the worker asks whether the context has failed while copies are out: a failed
// context never runs their host functions, so that is the only way their reads can end.
constexpr std::chrono::milliseconds context_check_interval{100};

} // namespace

result<void> cuda_landings::create(CUstream watched)
{
    watched_ = watched;
    BOOST_OUTCOME_TRY(context_->check(api_.cuStreamCreate(&notify_stream_, stream_non_blocking),
                                      errc::device_unavailable, "cuStreamCreate"));
    return context_->check(api_.cuEventCreate(&landing_event_, event_disable_timing),
                           errc::device_unavailable, "cuEventCreate");
}

cuda_landings::~cuda_landings()
{
    if (!context_->make_current()) {
        return;
    }
    if (landing_event_ != nullptr) {
        api_.cuEventDestroy(landing_event_);
    }
    if (notify_stream_ != nullptr) {
        api_.cuStreamDestroy(notify_stream_);
    }
}

void cuda_landings::wait_for_host_functions() const
{
    while (callbacks_inside_.load() != 0) {
        std::this_thread::yield(); // a host function returning from its post
    }
}

void cuda_landings::on_landed(void* user_data)
{
    auto* batch = static_cast<cuda_batch*>(user_data);
    cuda_landings* owner = batch->owner;
    owner->callbacks_inside_.fetch_add(1);
    boost::asio::post(owner->worker_,
                      [batch] { batch->owner->to_.landed(std::unique_ptr<cuda_batch>(batch)); });
    owner->callbacks_inside_.fetch_sub(1); // the last touch of the device
}

void cuda_landings::launch(CUstream stream, std::unique_ptr<cuda_batch> batch)
{
    batch->owner = this;
    {
        const std::lock_guard lock{mutex_};
        out_.insert(batch.get());
    }
    watch_context();
    if (api_.cuLaunchHostFunc(stream, &on_landed, batch.get()) == cuda_success) {
        batch.release(); // on_landed owns it now
        return;
    }
    // No host function: the only way left to know the copies are done is to wait.
    cuda_batch* raw = batch.release();
    if (const CUresult status = api_.cuStreamSynchronize(stream); status != cuda_success) {
        // The copies may not have run: the batch's reads fail, its memory is kept.
        boost::asio::post(worker_, [this, status] { to_.context_failed(status); });
        return;
    }
    boost::asio::post(worker_, [this, raw] { to_.landed(std::unique_ptr<cuda_batch>(raw)); });
}

void cuda_landings::launch_after(CUstream copy_stream, std::unique_ptr<cuda_batch> batch)
{
    if (api_.cuEventRecord(landing_event_, copy_stream) == cuda_success &&
        api_.cuStreamWaitEvent(notify_stream_, landing_event_, 0) == cuda_success) {
        launch(notify_stream_, std::move(batch));
    } else {
        launch(copy_stream, std::move(batch));
    }
}

bool cuda_landings::take_back(cuda_batch* batch)
{
    const std::lock_guard lock{mutex_};
    return out_.erase(batch) != 0;
}

std::vector<cuda_batch*> cuda_landings::give_up_all()
{
    std::vector<cuda_batch*> lost;
    {
        const std::lock_guard lock{mutex_};
        lost.assign(out_.begin(), out_.end());
        out_.clear();
    }
    for (cuda_batch* batch : lost) {
        given_up_.emplace_back(batch);
    }
    return lost;
}

std::size_t cuda_landings::out()
{
    const std::lock_guard lock{mutex_};
    return out_.size();
}

void cuda_landings::watch_context()
{
    if (!watching_context_.exchange(true)) {
        boost::asio::post(worker_, [this] { check_context_later(); });
    }
}

void cuda_landings::check_context_later()
{
    context_check_.expires_after(context_check_interval);
    context_check_.async_wait([this](const boost::system::error_code& cancelled) {
        if (cancelled || !worker_has_context_) { // without a context it cannot ask
            watching_context_.store(false);
            return;
        }
        if (out() == 0) {
            watching_context_.store(false);
            // A batch launched since the check saw the flag still set: watch for it here.
            if (out() == 0 || watching_context_.exchange(true)) {
                return;
            }
        }
        if (const CUresult status = api_.cuStreamQuery(watched_);
            status != cuda_success && status != cuda_not_ready) {
            watching_context_.store(false);
            to_.context_failed(status);
            return;
        }
        check_context_later();
    });
}

} // namespace ruda::detail
