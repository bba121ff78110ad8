// What every benchmark program needs: timing a callable, the median of repeated runs, and
// running a ruda coroutine to completion on a fresh io_context on this thread.
#pragma once

#include <ruda/error.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

namespace bench {

using clock_type = std::chrono::steady_clock;

inline double seconds(const std::function<void()>& f)
{
    const auto start = clock_type::now();
    f();
    return std::chrono::duration<double>(clock_type::now() - start).count();
}

inline double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

template <class T>
boost::asio::awaitable<void> store(boost::asio::awaitable<ruda::result<T>> op,
                                   std::optional<ruda::result<T>>& out)
{
    out.emplace(co_await std::move(op));
}

/// Runs `op` on a fresh io_context on this thread; exits the program if it fails.
template <class T>
T run(boost::asio::awaitable<ruda::result<T>> op)
{
    boost::asio::io_context io{1};
    std::optional<ruda::result<T>> out;
    boost::asio::co_spawn(io, store(std::move(op), out), [](std::exception_ptr e) {
        if (e) {
            std::rethrow_exception(e);
        }
    });
    io.run();
    if (!out || !*out) {
        std::fprintf(stderr, "benchmark operation failed: %s\n",
                     out ? out->error().message().c_str() : "never completed");
        std::exit(1);
    }
    return std::move(*out).value();
}

} // namespace bench
