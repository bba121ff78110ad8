// Runs a ruda coroutine to its end on an io_context of its own, on this thread: how a program
// without an event loop of its own calls the coroutine API.
#pragma once

#include <ruda/error.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <exception>
#include <optional>
#include <utility>

namespace examples {

template <class T>
ruda::result<T> run_to_end(boost::asio::awaitable<ruda::result<T>> op)
{
    boost::asio::io_context io;
    std::optional<ruda::result<T>> out;
    boost::asio::co_spawn(
        io, [&]() -> boost::asio::awaitable<void> { out.emplace(co_await std::move(op)); },
        [](std::exception_ptr e) {
            if (e) {
                std::rethrow_exception(e);
            }
        });
    io.run();
    return std::move(*out);
}

} // namespace examples
