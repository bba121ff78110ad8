#include "future.hpp"

#include "errors.hpp"
#include "runtime.hpp"

#include <pybind11/stl.h>

#include <chrono>
#include <utility>

namespace py = pybind11;

namespace ruda::python {

future_state::~future_state()
{
    if (callbacks_.empty()) {
        return;
    }
    if (PyGILState_Check() != 0) {
        callbacks_.clear();
    } else {
        for (py::object& callback : callbacks_) {
            callback.release(); // no GIL to drop them with: leaked, never touched unsafely
        }
    }
}

bool future_state::claim()
{
    const std::lock_guard lock{mutex_};
    if (!std::holds_alternative<std::monostate>(outcome_)) {
        return false;
    }
    claimed_ = true;
    return true;
}

void future_state::succeed(value_maker value) { complete(std::move(value), true); }

void future_state::fail(error why) { complete(std::move(why), true); }

void future_state::fail(std::string code, std::string message)
{
    complete(python_failure{std::move(code), std::move(message)}, true);
}

bool future_state::cancel_requested() const
{
    const std::lock_guard lock{mutex_};
    return cancel_requested_;
}

bool future_state::done() const
{
    const std::lock_guard lock{mutex_};
    return !std::holds_alternative<std::monostate>(outcome_);
}

bool future_state::cancelled() const
{
    const std::lock_guard lock{mutex_};
    return std::holds_alternative<cancelled_tag>(outcome_);
}

bool future_state::cancel()
{
    {
        const std::lock_guard lock{mutex_};
        if (!std::holds_alternative<std::monostate>(outcome_) || claimed_ || !cancellable_) {
            return false;
        }
        cancel_requested_ = true;
    }
    complete(cancelled_tag{}, false);
    return true;
}

void future_state::complete(outcome what, bool by_operation)
{
    {
        const std::lock_guard lock{mutex_};
        if (!std::holds_alternative<std::monostate>(outcome_)) {
            return; // cancelled first: the operation's outcome is dropped
        }
        if (by_operation && !claimed_ && cancel_requested_) {
            return;
        }
        outcome_ = std::move(what);
    }
    ready_.notify_all();
    run_callbacks();
}

void future_state::run_callbacks()
{
    const bool ran = with_gil([this] {
        std::vector<py::object> callbacks = std::move(callbacks_);
        callbacks_.clear();
        for (py::object& callback : callbacks) {
            try {
                callback();
            } catch (py::error_already_set& e) {
                e.discard_as_unraisable("ruda.Future done-callback");
            }
        }
    });
    if (!ran) {
        for (py::object& callback : callbacks_) {
            callback.release();
        }
        callbacks_.clear();
    }
}

bool future_state::wait(std::optional<double> timeout)
{
    using clock = std::chrono::steady_clock;
    const auto slice = std::chrono::milliseconds(50);
    const auto deadline =
        timeout ? clock::now() + std::chrono::duration_cast<clock::duration>(
                                     std::chrono::duration<double>(std::max(0.0, *timeout)))
                : clock::time_point::max();
    for (;;) {
        {
            const py::gil_scoped_release release;
            std::unique_lock lock{mutex_};
            const auto until = std::min(deadline, clock::now() + slice);
            if (ready_.wait_until(lock, until, [this] {
                    return !std::holds_alternative<std::monostate>(outcome_);
                })) {
                return true;
            }
        }
        if (PyErr_CheckSignals() != 0) {
            throw py::error_already_set();
        }
        if (clock::now() >= deadline) {
            return done();
        }
    }
}

void future_state::wait_ready(std::optional<double> timeout)
{
    if (done()) {
        return;
    }
    refuse_inside_event_loop("Future.result");
    if (!wait(timeout)) {
        throw_error(error{errc::timed_out, "The operation did not finish within " +
                                               std::to_string(timeout.value_or(0)) + " s"});
    }
}

py::object future_state::result(std::optional<double> timeout)
{
    wait_ready(timeout);
    outcome what;
    {
        const std::lock_guard lock{mutex_};
        what = outcome_;
    }
    if (auto* value = std::get_if<value_maker>(&what)) {
        return (*value)();
    }
    if (auto* failure = std::get_if<error>(&what)) {
        throw_error(*failure);
    }
    if (auto* failure = std::get_if<python_failure>(&what)) {
        throw_error(failure->code, failure->message);
    }
    PyErr_SetNone(py::module_::import("asyncio").attr("CancelledError").ptr());
    throw py::error_already_set();
}

py::object future_state::exception(std::optional<double> timeout)
{
    wait_ready(timeout);
    const std::lock_guard lock{mutex_};
    if (const auto* failure = std::get_if<error>(&outcome_)) {
        return error_object(*failure);
    }
    if (const auto* failure = std::get_if<python_failure>(&outcome_)) {
        return error_object(failure->code, failure->message);
    }
    if (std::holds_alternative<cancelled_tag>(outcome_)) {
        PyErr_SetNone(py::module_::import("asyncio").attr("CancelledError").ptr());
        throw py::error_already_set();
    }
    return py::none();
}

void future_state::add_done_callback(py::object callback)
{
    if (!done()) {
        callbacks_.push_back(std::move(callback));
        // Completed between the check and the push: its callbacks may have run already.
        if (!done()) {
            return;
        }
        run_callbacks();
        return;
    }
    try {
        callback();
    } catch (py::error_already_set& e) {
        e.discard_as_unraisable("ruda.Future done-callback");
    }
}

void refuse_inside_event_loop(const char* what)
{
    const py::object loop = py::module_::import("asyncio").attr("_get_running_loop")();
    if (!loop.is_none()) {
        throw_error(error{errc::sync_read_unavailable,
                          std::string{"Synchronous wait is unavailable: "} + what +
                              " was called on the thread of a running asyncio event loop, "
                              "which the operation may need; use await"});
    }
}

void bind_future(py::module_& m)
{
    py::class_<future_state, std::shared_ptr<future_state>>(
        m, "Future",
        "The outcome of a ruda operation running on ruda's threads: await it in asyncio, wait "
        "with result(), or add a done-callback.")
        .def("done", &future_state::done, "Whether the operation has finished (or was cancelled).")
        .def("cancelled", &future_state::cancelled, "Whether it was cancelled.")
        .def("cancel", &future_state::cancel,
             "Cancels the operation unless it is past the point where it can stop (a save "
             "that is staged writes on); returns whether it was cancelled.")
        .def("_wait", &future_state::wait, py::arg("timeout") = py::none())
        .def("result", &future_state::result, py::arg("timeout") = py::none(),
             "The value, waiting up to timeout seconds (for ever when None) with the GIL "
             "released; raises the operation's ruda.Error, asyncio.CancelledError when "
             "cancelled, ruda.TimedOut when the time runs out. Refused on the thread of a "
             "running event loop: await instead.")
        .def("exception", &future_state::exception, py::arg("timeout") = py::none(),
             "The operation's error, None when it succeeded; waits like result().")
        .def("_add_done_callback", &future_state::add_done_callback, py::arg("callback"));
}

} // namespace ruda::python
