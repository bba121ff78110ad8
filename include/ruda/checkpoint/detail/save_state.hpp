// The durable completion of one asynchronous save: the writer completes it, waiters (handlers
// or a blocked thread) receive the outcome.
#pragma once

#include <ruda/checkpoint/saved_checkpoint.hpp>
#include <ruda/error.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>

#include <condition_variable>
#include <list>
#include <mutex>
#include <optional>
#include <utility>

namespace ruda::detail {

// The durable completion of one asynchronous save, shared by its waiters and the writer.
class save_state {
public:
    using handler_type = boost::asio::any_completion_handler<void(result<saved_checkpoint>)>;

    void complete(result<saved_checkpoint> outcome);
    /// `work` is the handler's associated executor (from `track_work`).
    void add_waiter(boost::asio::any_io_executor work, handler_type handler);
    [[nodiscard]] bool done() const;
    [[nodiscard]] result<saved_checkpoint> wait() const;

private:
    struct waiter {
        waiter(boost::asio::any_io_executor w, handler_type h)
            : work(std::move(w)), handler(std::move(h))
        {
        }
        boost::asio::any_io_executor work;
        handler_type handler;
    };
    mutable std::mutex mutex_;
    mutable std::condition_variable done_cv_;
    std::optional<result<saved_checkpoint>> outcome_;
    std::list<waiter> waiters_; // a list: any_completion_handler must never be move-assigned
};

} // namespace ruda::detail
