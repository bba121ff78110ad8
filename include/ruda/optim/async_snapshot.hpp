// The gradient snapshot as an Asio asynchronous operation, for any completion token:
// use_awaitable, use_future, deferred, as_tuple or a plain callback (see result_completion.hpp
// for how `void(result<T>)` meets each).
#pragma once

#include <ruda/optim/gradients_params.hpp>
#include <ruda/runtime/result_completion.hpp>

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/system_executor.hpp>

#include <exception>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

namespace ruda {

namespace detail {

template <class Handler>
struct snapshot_state {
    explicit snapshot_state(Handler h) : handler(std::move(h)) {}
    Handler handler;
    std::optional<result<gradients_params_record>> value;
};

template <class State>
boost::asio::awaitable<void> run_snapshot(boost::asio::awaitable<result<gradients_params_record>> op,
                                          std::shared_ptr<State> state)
{
    try {
        state->value.emplace(co_await std::move(op));
    } catch (...) {
        state->value.emplace(error_from_exception(std::current_exception(), "async_snapshot"));
    }
}

struct initiate_snapshot {
    template <class Handler>
    void operator()(Handler handler,
                    boost::asio::awaitable<result<gradients_params_record>> op) const
    {
        const auto executor =
            boost::asio::get_associated_executor(handler, boost::asio::system_executor{});
        auto slot = boost::asio::get_associated_cancellation_slot(handler);
        auto state = std::make_shared<snapshot_state<Handler>>(std::move(handler));
        auto finish = [state](std::exception_ptr failure) {
            if (failure) {
                state->value.emplace(error_from_exception(failure, "async_snapshot"));
            }
            std::move(state->handler)(std::move(*state->value));
        };
        boost::asio::co_spawn(executor, run_snapshot(std::move(op), state),
                              boost::asio::bind_cancellation_slot(slot, std::move(finish)));
    }
};

/// Runs an already created snapshot (`to_record_async`) for any completion token.
template <class CompletionToken>
auto async_run_snapshot(boost::asio::awaitable<result<gradients_params_record>> op,
                        CompletionToken&& token)
{
    return boost::asio::async_initiate<CompletionToken, void(result<gradients_params_record>)>(
        initiate_snapshot{}, token, std::move(op));
}

} // namespace detail

/// Snapshots `grads` like `to_record_async<B>(options)` (the handles are captured by this
/// call) and completes with `void(ruda::result<gradients_params_record>)`. The reads run on
/// the token's associated executor (the system executor if it has none); the token's
/// cancellation slot cancels them.
///
///     auto future = ruda::async_snapshot<ruda::cpu_backend>(grads,
///         boost::asio::bind_executor(io, boost::asio::use_future));
///     auto record = co_await ruda::async_snapshot<B>(grads, {.max_in_flight = 4},
///                                                    boost::asio::use_awaitable);
///
/// This, not `co_spawn(io, grads.to_record_async<B>(), token)`, is how a snapshot meets a
/// completion token: `co_spawn` of an `awaitable<result<T>>` does not compile (Asio 1.81 needs
/// a default-constructible value for its exception path, and `result` has none).
template <backend B, class CompletionToken>
auto async_snapshot(const gradients_params& grads, snapshot_options options,
                    CompletionToken&& token)
{
    return detail::async_run_snapshot(grads.to_record_async<B>(std::move(options)),
                                      std::forward<CompletionToken>(token));
}

/// The same with the default options.
template <backend B, class CompletionToken>
    requires(!std::is_same_v<std::decay_t<CompletionToken>, snapshot_options>)
auto async_snapshot(const gradients_params& grads, CompletionToken&& token)
{
    return async_snapshot<B>(grads, snapshot_options{}, std::forward<CompletionToken>(token));
}

} // namespace ruda
