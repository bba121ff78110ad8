// Bounded-concurrency gather: runs `count` async operations with at most `window` in flight
// (and, optionally, at most a total weight such as bytes in flight) and returns their values
// in input order, or the first failure with the rest cancelled.
#pragma once

#include <ruda/error.hpp>
#include <ruda/runtime/detail/gather_run.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cstddef>
#include <limits>
#include <utility>
#include <vector>

namespace ruda {

/// How much a gather may have in flight: at most `max_in_flight` operations (0 acts as 1) and
/// at most `max_in_flight_weight` summed over their weights. An operation heavier than the
/// whole budget still runs, alone, so every gather can finish.
struct gather_limits {
    std::size_t max_in_flight = 1;
    std::size_t max_in_flight_weight = std::numeric_limits<std::size_t>::max();
};

/// Like `gather(count, window, factory)` below, within `limits`: operation `i` weighs
/// `weight(i)` (bytes it will produce, say), and operations start in index order only while
/// both the count and the summed weight in flight stay within the limits.
///
///     auto all = co_await ruda::gather(tensors.size(), {.max_in_flight = 8,
///                                                       .max_in_flight_weight = 256 << 20},
///         [&](std::size_t i) { return sizes[i]; },
///         [&](std::size_t i) { return ruda::cpu_backend::float_into_data(tensors[i]); });
template <class Weight, class Factory>
boost::asio::awaitable<result<std::vector<detail::gather_value<Factory>>>>
gather(std::size_t count, gather_limits limits, Weight weight, Factory factory)
{
    using value_type = detail::gather_value<Factory>;
    if (count == 0) {
        co_return std::vector<value_type>{};
    }
    co_return co_await boost::asio::async_initiate<decltype(boost::asio::use_awaitable),
                                                   void(result<std::vector<value_type>>)>(
        detail::start_gather<value_type, Factory, Weight>{}, boost::asio::use_awaitable, count,
        limits.max_in_flight, limits.max_in_flight_weight, std::move(weight), std::move(factory));
}

/// Awaits `factory(0) … factory(count - 1)`, each a `boost::asio::awaitable<result<T>>`, with
/// at most `window` (at least 1) of them in flight at once. Returns the values in index order.
/// The first failure (an error or an exception) cancels the operations still in flight, starts
/// no more, and is what the gather returns; no partial result comes out. Cancelling the
/// awaiting coroutine cancels every operation in flight.
///
///     auto all = co_await ruda::gather(tensors.size(), 16,
///         [&](std::size_t i) { return ruda::cpu_backend::float_into_data(tensors[i]); });
template <class Factory>
boost::asio::awaitable<result<std::vector<detail::gather_value<Factory>>>>
gather(std::size_t count, std::size_t window, Factory factory)
{
    return gather(count, gather_limits{.max_in_flight = window}, detail::no_weight{},
                  std::move(factory));
}

} // namespace ruda
