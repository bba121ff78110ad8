// One snapshot run as an Asio asynchronous operation: the coroutine, its executor, the
// caller's cancellation slot and the posted completion.
#pragma once

#include <ruda/error.hpp>
#include <ruda/optim/gradients_params_record.hpp>
#include <ruda/runtime/detail/post_completion.hpp>
#include <ruda/runtime/error_mapping.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/system_context.hpp>
#include <boost/asio/system_executor.hpp>

#include <exception>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

namespace ruda::detail {

// Whether `Handler` names an executor of its own. Handlers without one (a plain callback,
// use_future) fall back to the system executor, which would run the whole operation on
// Asio's hidden system pool, so the operations that need one refuse them at compile time.
template <class Handler>
inline constexpr bool has_own_executor_v = !std::is_same_v<
    std::remove_cvref_t<decltype(boost::asio::query(
        std::declval<boost::asio::associated_executor_t<Handler, boost::asio::system_executor>>(),
        boost::asio::execution::context))>,
    boost::asio::system_context>;

/// Runs an operation on its completion token's associated executor.
struct token_executor {};

// The executor an operation runs on: the one given, or else the handler's own.
template <class Handler>
boost::asio::any_io_executor operation_executor(const Handler&,
                                                const boost::asio::any_io_executor& given)
{
    return given;
}

template <class Handler>
boost::asio::any_io_executor operation_executor(const Handler& handler, token_executor)
{
    static_assert(has_own_executor_v<Handler>,
                  "this ruda operation needs an executor to run on, and the completion token "
                  "has none (it would run on Asio's system pool): pass one as the first "
                  "argument, or bind one to the token with boost::asio::bind_executor(io, token)");
    return boost::asio::get_associated_executor(handler);
}

// The snapshot coroutine runs on a strand of the executor. The caller's cancellation slot
// reaches it through a signal of its own, emitted on that strand only while the coroutine is
// suspended inside the snapshot: Asio 1.81's co_spawn lets a cancellation that reaches a
// coroutine before it first runs, or after it finished, escape from run() as an exception.
// Every cancellation type is honoured alike: a cancelled snapshot produces nothing.
// `T`: what the snapshot produces (a record, or a record per group).
template <class Handler, class T = gradients_params_record>
class snapshot_operation : public std::enable_shared_from_this<snapshot_operation<Handler, T>> {
public:
    using operation = boost::asio::awaitable<result<T>>;

    snapshot_operation(Handler handler, const boost::asio::any_io_executor& executor)
        : handler_(std::move(handler)), strand_(boost::asio::make_strand(executor)),
          work_(track_work(boost::asio::get_associated_executor(handler_, executor)))
    {
    }

    void start(operation op)
    {
        auto slot = boost::asio::get_associated_cancellation_slot(handler_);
        if (slot.is_connected()) {
            slot.assign([weak = this->weak_from_this()](boost::asio::cancellation_type) {
                if (auto self = weak.lock()) {
                    boost::asio::post(self->strand_, [self] { self->cancel(); });
                }
            });
        }
        boost::asio::co_spawn(strand_, run(this->shared_from_this(), std::move(op)),
                              boost::asio::bind_cancellation_slot(
                                  signal_.slot(),
                                  [self = this->shared_from_this()](std::exception_ptr failure) {
                                      self->finish(failure);
                                  }));
    }

private:
    // Static and capture-free: GCC 12 mishandles some coroutine lambdas and member frames.
    static boost::asio::awaitable<void> run(std::shared_ptr<snapshot_operation> self,
                                            operation op)
    {
        self->started_ = true;
        if (self->cancel_requested_) {
            self->value_.emplace(error{errc::cancelled, "async_snapshot: cancelled"});
        } else {
            try {
                self->value_.emplace(co_await std::move(op));
            } catch (...) {
                self->value_.emplace(
                    error_from_exception(std::current_exception(), "async_snapshot"));
            }
        }
        self->finished_ = true;
    }

    // On the strand, so the coroutine is not running: before it starts, it sees the request
    // when it does; while it is suspended, the signal reaches the operation it awaits.
    void cancel()
    {
        if (!started_) {
            cancel_requested_ = true;
        } else if (!finished_) {
            signal_.emit(boost::asio::cancellation_type::terminal);
        }
    }

    void finish(std::exception_ptr failure)
    {
        if (failure || !value_) {
            value_.emplace(error_from_exception(failure, "async_snapshot"));
        }
        post_completion(std::move(work_), std::move(handler_), std::move(*value_));
    }

    Handler handler_;
    boost::asio::strand<boost::asio::any_io_executor> strand_;
    boost::asio::any_io_executor work_;
    boost::asio::cancellation_signal signal_;
    std::optional<result<T>> value_;
    bool started_ = false;
    bool cancel_requested_ = false;
    bool finished_ = false;
};

struct initiate_snapshot {
    template <class Handler, class T, class Executor>
    void operator()(Handler handler, boost::asio::awaitable<result<T>> op,
                    const Executor& executor_choice) const
    {
        const auto executor = operation_executor(handler, executor_choice);
        auto operation =
            std::make_shared<snapshot_operation<Handler, T>>(std::move(handler), executor);
        operation->start(std::move(op));
    }
};

/// Runs an already created snapshot (`to_record_async`, `to_records_async`) for any completion
/// token, on `executor` (an `any_io_executor`, or `token_executor` for the token's associated
/// one).
template <class T, class Executor, class CompletionToken>
auto async_run_snapshot(boost::asio::awaitable<result<T>> op, Executor executor,
                        CompletionToken&& token)
{
    return boost::asio::async_initiate<CompletionToken, void(result<T>)>(
        initiate_snapshot{}, token, std::move(op), std::move(executor));
}

/// A snapshot that fails with `failure` as soon as it runs.
template <class T>
boost::asio::awaitable<result<T>> failed_snapshot(error failure)
{
    co_return failure;
}

} // namespace ruda::detail
