// A queued save's outcome, shared by everyone who waits for it: blocking, or posted to each
// waiter's executor once the save is durable or has failed.
#include <ruda/checkpoint/detail/save_state.hpp>
#include <ruda/runtime/detail/post_completion.hpp>

#include <list>

namespace ruda::detail {

void save_state::complete(result<saved_checkpoint> outcome)
{
    std::list<waiter> to_call;
    {
        const std::lock_guard lock{mutex_};
        outcome_.emplace(std::move(outcome));
        to_call.splice(to_call.end(), waiters_);
    }
    done_cv_.notify_all();
    for (waiter& w : to_call) {
        post_completion(std::move(w.work), std::move(w.handler), *outcome_);
    }
}

void save_state::add_waiter(boost::asio::any_io_executor work, handler_type handler)
{
    std::unique_lock lock{mutex_};
    if (!outcome_) {
        waiters_.emplace_back(std::move(work), std::move(handler));
        return;
    }
    lock.unlock();
    post_completion(std::move(work), std::move(handler), *outcome_);
}

bool save_state::done() const
{
    const std::lock_guard lock{mutex_};
    return outcome_.has_value();
}

result<saved_checkpoint> save_state::wait() const
{
    std::unique_lock lock{mutex_};
    done_cv_.wait(lock, [this] { return outcome_.has_value(); });
    return *outcome_;
}

} // namespace ruda::detail
