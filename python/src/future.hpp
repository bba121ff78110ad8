// The state behind a `ruda.Future`: completed once, by its operation on a C++ thread or by a
// cancel from Python; waited for with the GIL released; its done-callbacks run under the GIL.
#pragma once

#include <ruda/error.hpp>

#include <pybind11/pybind11.h>

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace ruda::python {

class future_state {
public:
    /// Makes the Python value of a success, under the GIL, at each `result()`: the operation's
    /// own value stays C++, so the state may die on any thread.
    using value_maker = std::function<pybind11::object()>;

    /// `cancellable`: whether `cancel()` may end the operation before it claims the state.
    explicit future_state(bool cancellable = true) : cancellable_(cancellable) {}
    future_state(const future_state&) = delete;
    future_state& operator=(const future_state&) = delete;
    ~future_state();

    // The operation's side, any thread, GIL or not.

    /// Takes the right to complete the state; false when a cancel came first (the operation
    /// then stops and writes nothing). After it, `cancel()` refuses.
    bool claim();
    /// Completes a claimed (or unclaimed and not cancelled) state; a cancelled one stays.
    void succeed(value_maker value);
    void fail(error why);
    /// Fails with a code only the Python module has ("unsafe_section").
    void fail(std::string code, std::string message);
    /// Whether a cancel was asked for: the operation polls this between pieces of work.
    [[nodiscard]] bool cancel_requested() const;

    // Python's side, GIL held.

    [[nodiscard]] bool done() const;
    [[nodiscard]] bool cancelled() const;
    /// Cancels an operation that has not claimed the state: it completes now as cancelled.
    bool cancel();
    /// Waits with the GIL released, in slices that let Ctrl-C through; `timeout` in seconds,
    /// none for ever. Returns whether the state is done.
    bool wait(std::optional<double> timeout);
    /// The value, or raises the failure (`asyncio.CancelledError` when cancelled). Refuses on a
    /// thread that runs an asyncio event loop, unless done: a wait there would block the loop
    /// that may have to run for the operation to finish.
    pybind11::object result(std::optional<double> timeout);
    /// The failure as an exception object, none on success; raises like `result` while pending.
    pybind11::object exception(std::optional<double> timeout);
    /// Calls `callback()` once the state is done (at once when it already is), under the GIL,
    /// on the completing thread; an exception from it is reported as unraisable.
    void add_done_callback(pybind11::object callback);

private:
    struct cancelled_tag {};
    struct python_failure {
        std::string code;
        std::string message;
    };
    using outcome = std::variant<std::monostate, value_maker, error, python_failure, cancelled_tag>;

    void complete(outcome what, bool by_operation);
    void run_callbacks();
    void wait_ready(std::optional<double> timeout);

    const bool cancellable_;
    mutable std::mutex mutex_;
    std::condition_variable ready_;
    bool claimed_ = false;
    bool cancel_requested_ = false;
    outcome outcome_;
    std::vector<pybind11::object> callbacks_; // touched only under the GIL
};

/// A Python error that is ruda's: refuses a sync wait inside a running event loop.
void refuse_inside_event_loop(const char* what);

void bind_future(pybind11::module_& m);

} // namespace ruda::python
