// How copies report that they have landed: a host function per batch that only posts the batch
// back to the worker, and, while batches are out, the worker's watch for a failed context, which
// would never run their host functions. Internal to the CUDA device.
#pragma once

#include "cuda_context.hpp"
#include "cuda_in_flight.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

namespace ruda::detail {

class cuda_landings {
public:
    // What the worker does with a batch whose copies have landed, and when the context failed.
    struct receiver {
        std::function<void(std::unique_ptr<cuda_batch>)> landed;
        std::function<void(CUresult)> context_failed;
    };

    cuda_landings(std::shared_ptr<const cuda_context> context, boost::asio::io_context& worker,
                  receiver to)
        : context_(std::move(context)), api_(context_->api()), worker_(worker), to_(std::move(to))
    {
    }
    ~cuda_landings();
    cuda_landings(const cuda_landings&) = delete;
    cuda_landings& operator=(const cuda_landings&) = delete;

    // The notify stream and its event. `watched`: the stream the watch asks about the context.
    result<void> create(CUstream watched);

    // Any thread: a host function reports `batch` once the stream's copies so far are done.
    void launch(CUstream stream, std::unique_ptr<cuda_batch> batch);

    // The same for the copy stream, which must not wait for host functions (each would stall it
    // for a round trip to the host): they run on the notify stream, after an event on it.
    void launch_after(CUstream copy_stream, std::unique_ptr<cuda_batch> batch);

    // The worker, for a batch that was reported landed: false when it was given up (the
    // context failed), and is still kept here.
    bool take_back(cuda_batch* batch);

    // The worker, when the context failed: every batch out is given up, kept (a copy may still
    // land in the memory its pieces name), and returned to be failed.
    std::vector<cuda_batch*> give_up_all();

    // Any thread: batches launched and not landed (nor given up).
    std::size_t out();

    // The worker: the watch stops (the device is going and no batch is out).
    void stop_watching() { context_check_.cancel(); }

    // The worker's thread, before it runs: it has no context, so the watch cannot ask.
    void worker_lacks_context() { worker_has_context_ = false; }

    // Waits for the host functions still inside their post to the worker to return.
    void wait_for_host_functions() const;

private:
    // Driver thread: the only thing it does is post the batch back to the worker. The worker
    // may handle it, run out of work and end before post() has returned here, so the landings
    // count the host functions still inside, and the device waits for none to be left.
    static void on_landed(void* user_data);

    // Any thread, once a batch is out: the worker checks the context until none is left.
    void watch_context();

    // The worker: asks again in a while whether the context has failed.
    void check_context_later();

    std::shared_ptr<const cuda_context> context_;
    const driver& api_;
    boost::asio::io_context& worker_;
    receiver to_;
    CUstream watched_ = nullptr;
    CUstream notify_stream_ = nullptr;
    CUevent landing_event_ = nullptr; // the worker's only
    bool worker_has_context_ = true;
    std::atomic<int> callbacks_inside_{0};
    std::mutex mutex_;
    std::unordered_set<cuda_batch*> out_;               // launched, not landed; under mutex_
    std::vector<std::unique_ptr<cuda_batch>> given_up_; // the worker's
    std::atomic<bool> watching_context_{false};
    boost::asio::steady_timer context_check_{worker_}; // the worker's
};

} // namespace ruda::detail
