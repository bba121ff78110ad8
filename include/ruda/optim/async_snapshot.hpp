// The gradient snapshot as an Asio asynchronous operation, for any completion token:
// use_awaitable, use_future, deferred, as_tuple or a plain callback (see result_completion.hpp
// for how `void(result<T>)` meets each).
#pragma once

#include <ruda/optim/detail/snapshot_operation.hpp>
#include <ruda/optim/gradients_params.hpp>
#include <ruda/runtime/result_completion.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/execution/executor.hpp>
#include <boost/asio/is_executor.hpp>

#include <type_traits>
#include <utility>

namespace ruda {

/// An executor that `async_snapshot` and friends accept as their first argument.
template <class T>
concept io_executor =
    boost::asio::execution::executor<T> || boost::asio::is_executor<T>::value;

/// Snapshots `grads` like `to_record_async<B>(options)` (the handles are captured by this
/// call) and completes with `void(ruda::result<gradients_params_record>)`. The reads run on
/// `executor`, and the completion on the token's associated executor, `executor` if it has
/// none. The token's cancellation slot cancels the reads in flight, for every cancellation
/// type (terminal, partial and total alike: a cancelled snapshot produces nothing), and the
/// operation completes with `errc::cancelled`.
///
///     auto future = ruda::async_snapshot<ruda::cpu_backend>(io.get_executor(), grads,
///                                                           boost::asio::use_future);
template <backend B, io_executor Executor, class CompletionToken>
auto async_snapshot(const Executor& executor, const gradients_params& grads,
                    snapshot_options options, CompletionToken&& token)
{
    return detail::async_run_snapshot(grads.to_record_async<B>(std::move(options)),
                                      boost::asio::any_io_executor{executor},
                                      std::forward<CompletionToken>(token));
}

/// The same with the default options.
template <backend B, io_executor Executor, class CompletionToken>
    requires(!std::is_same_v<std::decay_t<CompletionToken>, snapshot_options>)
auto async_snapshot(const Executor& executor, const gradients_params& grads,
                    CompletionToken&& token)
{
    return async_snapshot<B>(executor, grads, snapshot_options{},
                             std::forward<CompletionToken>(token));
}

/// The same on the token's associated executor: a coroutine's with `use_awaitable`, the
/// bound one with `bind_executor`. A token without one (a plain callback, `use_future`) does
/// not compile here; pass the executor as the first argument instead.
///
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
                                      detail::token_executor{},
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
