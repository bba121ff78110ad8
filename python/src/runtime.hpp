// The module's I/O threads and its guard at interpreter exit: copies, loads and restores run
// on these threads with the GIL released, and a completion calls into Python only while the
// interpreter lives.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>

namespace ruda::python {

/// A count of things in flight that one may wait to reach zero (operations, a manager's saves).
class in_flight_count {
public:
    void add();
    void remove();
    /// Blocks until the count is zero. Call it without the GIL when what is counted needs it.
    void wait_for_none();

private:
    std::mutex mutex_;
    std::condition_variable none_;
    std::size_t count_ = 0;
};

/// Runs `job` on one of the module's I/O threads, started on first use (and again in a forked
/// child, which inherits no threads). Counts as an operation in flight until it returns.
void post(std::function<void()> job);

/// Runs `call` with the GIL held: at once on a thread that holds it, else after taking it,
/// unless the interpreter is exiting, when it does not run. Returns whether it ran. How every
/// C++ thread calls into Python.
bool with_gil(const std::function<void()>& call);

/// An operation the exit hook waits for before Python finalizes: a save's durable wait, which
/// completes on the manager's writer thread, not on the module's threads.
class operation_in_flight {
public:
    operation_in_flight();
    operation_in_flight(const operation_in_flight&) = delete;
    operation_in_flight& operator=(const operation_in_flight&) = delete;
    ~operation_in_flight();
};

/// Registers the exit hook (Python's `atexit`: waits for every operation in flight with the GIL
/// released, then lets no thread into Python again) and the fork handler. Once, at import.
void install_runtime_hooks();

} // namespace ruda::python
