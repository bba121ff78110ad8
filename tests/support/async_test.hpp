// Test helpers for asynchronous code: a watchdog that fails a hung test instead of letting it
// hang CI, and a runner that drives a coroutine on an io_context for a bounded time.
#pragma once

#include <ruda/error.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <chrono>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

namespace ruda::test {

/// How long a test may wait for what must happen before it calls that a hang. Far longer than
/// any test needs: a limit only turns a hang into a failure with a reason, and must never fail
/// a slow run. A process at nice 19 on a machine whose cores are all busy runs 50 to 100 times
/// slower than alone; a test starved like that once took over 20 s just to fill a 512 MiB tensor.
inline constexpr std::chrono::seconds hang_limit{300};

/// Ends the whole test process with a message naming `what` if the scope lives longer than
/// `limit`: a hang becomes a failure with a reason.
class watchdog {
public:
    explicit watchdog(const char* what, std::chrono::seconds limit = hang_limit)
        : thread_([this, what, limit] {
              std::unique_lock lock{mutex_};
              if (!done_cv_.wait_for(lock, limit, [this] { return done_; })) {
                  std::fprintf(stderr, "watchdog: '%s' still running after %lld s; failing\n",
                               what, static_cast<long long>(limit.count()));
                  std::fflush(stderr);
                  std::_Exit(3);
              }
          })
    {
    }
    ~watchdog()
    {
        {
            const std::lock_guard lock{mutex_};
            done_ = true;
        }
        done_cv_.notify_one();
        thread_.join();
    }
    watchdog(const watchdog&) = delete;
    watchdog& operator=(const watchdog&) = delete;

private:
    std::mutex mutex_;
    std::condition_variable done_cv_;
    bool done_ = false;
    std::thread thread_; // last: starts after the state it waits on
};

/// Where a spawned coroutine leaves its outcome.
template <class T>
struct spawned {
    std::optional<result<T>> value;
    std::exception_ptr failure;
    std::atomic<bool> done{false}; // read by the test thread while others run the context
};

template <class T>
boost::asio::awaitable<void> store_into(boost::asio::awaitable<result<T>> op,
                                        std::shared_ptr<spawned<T>> out)
{
    out->value.emplace(co_await std::move(op));
}

/// Spawns `op` on `io`, optionally bound to `cancel`; drive `io` and then look at the outcome.
template <class T>
std::shared_ptr<spawned<T>> spawn(boost::asio::io_context& io,
                                  boost::asio::awaitable<result<T>> op,
                                  boost::asio::cancellation_signal* cancel = nullptr)
{
    auto out = std::make_shared<spawned<T>>();
    auto on_done = [out](std::exception_ptr e) {
        out->failure = e;
        out->done = true;
    };
    if (cancel != nullptr) {
        boost::asio::co_spawn(io, store_into(std::move(op), out),
                              boost::asio::bind_cancellation_slot(cancel->slot(), on_done));
    } else {
        boost::asio::co_spawn(io, store_into(std::move(op), out), on_done);
    }
    return out;
}

/// Runs `io` until `done()` holds or `limit` passes; returns whether `done()` holds (a short
/// `limit` checks that something does not happen). It stops
/// as soon as `done()` holds, while a device's or a manager's thread may still be returning
/// from its post to `io`: declare `io` before them, so it is destroyed after them.
inline bool run_until(boost::asio::io_context& io, const std::function<bool()>& done,
                      std::chrono::milliseconds limit = hang_limit)
{
    const auto until = std::chrono::steady_clock::now() + limit;
    while (!done() && std::chrono::steady_clock::now() < until) {
        io.restart();
        io.run_for(std::chrono::milliseconds(1));
    }
    return done();
}

/// Spawns `op`, runs `io` for at most `limit` and returns the result; empty if it never
/// finished (check with BOOST_REQUIRE).
template <class T>
std::optional<result<T>> run_to_end(boost::asio::io_context& io,
                                    boost::asio::awaitable<result<T>> op,
                                    std::chrono::milliseconds limit = hang_limit)
{
    auto out = spawn(io, std::move(op));
    if (!run_until(io, [&] { return out->done.load(); }, limit) || out->failure) {
        return std::nullopt;
    }
    return std::move(out->value);
}

} // namespace ruda::test
