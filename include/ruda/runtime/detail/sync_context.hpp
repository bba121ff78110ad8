// The private loop of one sync wait (`ruda::try_read_sync`, runtime/try_read_sync.hpp): how the
// read is made, where its result lands, and the context that runs it.
#pragma once

#include <ruda/error.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>

#include <concepts>
#include <exception>
#include <memory>
#include <optional>
#include <utility>

namespace ruda::detail {

template <class Factory>
auto make_read(Factory& factory, const boost::asio::io_context::executor_type& ex)
{
    if constexpr (std::invocable<Factory&, const boost::asio::io_context::executor_type&>) {
        return factory(ex);
    } else {
        return factory();
    }
}

template <class Factory>
using sync_read_value = typename decltype(make_read(
    std::declval<Factory&>(),
    std::declval<const boost::asio::io_context::executor_type&>()))::value_type::value_type;

// Shared between the caller and the spawned wrapper, so that an abandoned read that completes
// late writes into live memory rather than into the caller's dead stack frame.
template <class T>
struct sync_read_slot {
    std::optional<result<T>> value;
    std::exception_ptr failure;
    bool done = false;
};

// The private loop of one sync wait. The signal outlives the context because the spawned
// read keeps its cancellation handler in the signal.
struct sync_context {
    boost::asio::cancellation_signal cancel;
    boost::asio::io_context io{1};
};

// Keeps an abandoned sync context reachable and alive for the rest of the process.
void abandon_context(std::unique_ptr<sync_context> context);

// A capture-free coroutine (GCC miscompiles some capturing coroutine lambdas).
template <class T, class Factory>
boost::asio::awaitable<void> run_into_slot(Factory factory,
                                           std::shared_ptr<sync_read_slot<T>> slot,
                                           boost::asio::io_context::executor_type ex)
{
    slot->value.emplace(co_await make_read(factory, ex));
}

} // namespace ruda::detail
