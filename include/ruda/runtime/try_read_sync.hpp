// The never-deadlocking sync wrapper: runs one async read to completion on a private
// io_context on the calling thread, or refuses at once where blocking could never finish.
#pragma once

#include <ruda/error.hpp>
#include <ruda/runtime/blocking_scope.hpp>
#include <ruda/runtime/detail/sync_context.hpp>
#include <ruda/runtime/error_mapping.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace ruda {

/// How `try_read_sync` may block.
struct sync_read_options {
    /// False when the device can never complete a blocking read (the backend's
    /// `blocking_reads(device)`); the call then refuses without reading.
    bool blocking_reads = true;
    /// Refuse when this returns true, e.g. "am I on the thread that drives the device?".
    std::function<bool()> refuse_if{};
    /// Give up after this long: the read is cancelled, allowed to unwind, and the call
    /// returns `errc::timed_out`. Empty: wait for as long as the read takes.
    std::optional<std::chrono::steady_clock::duration> deadline{};
    /// How long a cancelled read may take to unwind after the deadline. A read that ignores
    /// cancellation for longer is abandoned together with its private context (never
    /// destroyed, so nothing dangles) and the call still returns `errc::timed_out`.
    std::chrono::steady_clock::duration unwind_grace = std::chrono::seconds(5);
    /// How a refusal names the read and what it suggests instead: "Synchronous <what> is
    /// unavailable: <why>; use <instead>".
    std::string_view what = "read";
    std::string_view instead = "the async API";
};

/// Runs the read that `factory` makes and returns its result. `factory` is called on the
/// calling thread, inside a private `io_context`, with that context's executor (or with no
/// argument) and returns `boost::asio::awaitable<result<T>>`; every I/O object the read needs
/// should belong to that executor. Refuses at once with `errc::sync_read_unavailable`, calling
/// nothing, when `options.blocking_reads` is false, when the calling thread is marked
/// `no_blocking_scope` (a device worker, or a thread already inside a sync wait), or when
/// `options.refuse_if` says so. Exceptions from the read become errors.
///
///     auto data = ruda::try_read_sync(
///         [&] { return ruda::cpu_backend::float_into_data(tensor); });
template <class Factory>
[[nodiscard]] result<detail::sync_read_value<Factory>>
try_read_sync(Factory&& factory, const sync_read_options& options = {})
{
    using value_type = detail::sync_read_value<Factory>;
    using clock = std::chrono::steady_clock;
    const auto refused = [&options](std::string_view why) {
        return error{errc::sync_read_unavailable,
                     "Synchronous " + std::string{options.what} + " is unavailable: " +
                         std::string{why} + "; use " + std::string{options.instead}};
    };
    if (!options.blocking_reads) {
        return refused("the device cannot complete a blocking read");
    }
    if (blocking_forbidden_on_this_thread()) {
        return refused("this thread must not block (a device worker, an event loop or an "
                       "enclosing sync wait)");
    }
    if (options.refuse_if && options.refuse_if()) {
        return refused("refused by the caller's predicate");
    }

    no_blocking_scope inside_sync_wait;
    auto context = std::make_unique<detail::sync_context>();
    auto& io = context->io;
    auto slot = std::make_shared<detail::sync_read_slot<value_type>>();
    try {
        const auto finished = [slot](std::exception_ptr e) {
            slot->failure = e;
            slot->done = true;
        };
        auto read = detail::run_into_slot<value_type>(std::forward<Factory>(factory), slot,
                                                      io.get_executor());
        boost::asio::co_spawn(
            io, std::move(read),
            boost::asio::bind_cancellation_slot(context->cancel.slot(), finished));
    } catch (...) {
        return error_from_exception(std::current_exception(), "try_read_sync");
    }

    // Runs handlers until the read is done, `until` passes, or nothing is left to run.
    const auto run_until = [&](std::optional<clock::time_point> until) {
        while (!slot->done && (!until || clock::now() < *until)) {
            const std::size_t ran = until ? io.run_one_until(*until) : io.run_one();
            if (ran == 0 && io.stopped()) {
                break;
            }
        }
    };
    std::optional<error> timeout;
    try {
        if (!options.deadline) {
            run_until(std::nullopt);
        } else {
            // Start the read first: Asio 1.81 lets a cancel that reaches a coroutine before
            // it first runs escape from run() as an exception.
            io.poll();
            run_until(clock::now() + *options.deadline);
            if (!slot->done) {
                context->cancel.emit(boost::asio::cancellation_type::terminal);
                io.restart();
                run_until(clock::now() + options.unwind_grace);
                const auto ms =
                    std::chrono::duration_cast<std::chrono::milliseconds>(*options.deadline)
                        .count();
                if (!slot->done) {
                    detail::abandon_context(std::move(context));
                    return error{errc::timed_out,
                                 "Synchronous read timed out after " + std::to_string(ms) +
                                     " ms and ignored cancellation; it was abandoned"};
                }
                timeout = error{errc::timed_out, "Synchronous read timed out after " +
                                                     std::to_string(ms) + " ms and was cancelled"};
            }
        }
        // A device thread that posted the completion may still be inside that post; it holds
        // work on the context until it is out, so let the work drain before destroying it.
        // One still inside after the grace (a thread starved for that long) keeps the context:
        // it is abandoned, never destroyed under that thread.
        io.restart();
        io.run_for(options.unwind_grace);
        if (!io.stopped()) {
            detail::abandon_context(std::move(context));
        }
    } catch (...) {
        // A handler threw out of run(): the read's frame is destroyed with the context.
        return error_from_exception(std::current_exception(), "try_read_sync");
    }
    if (timeout) {
        return std::move(*timeout);
    }
    if (!slot->done) {
        return error{errc::read_failed,
                     "Synchronous read ended without completing (the operation dropped its "
                     "completion handler)"};
    }
    if (slot->failure) {
        return error_from_exception(slot->failure, "try_read_sync");
    }
    return std::move(*slot->value);
}

} // namespace ruda
