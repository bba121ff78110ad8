// Marks threads that must never block on a ruda read: device workers, event-loop threads and
// threads already inside a sync wait. `try_read_sync` refuses on such a thread.
#pragma once

namespace ruda {

/// While one of these is alive on a thread, `try_read_sync` called on that thread refuses with
/// `errc::sync_read_unavailable` instead of blocking. Scopes nest. ruda marks its own device
/// workers and every sync wait; mark your event-loop threads too:
///
///     void on_event_loop_thread() { ruda::no_blocking_scope scope; io.run(); }
class no_blocking_scope {
public:
    no_blocking_scope() noexcept;
    ~no_blocking_scope();
    no_blocking_scope(const no_blocking_scope&) = delete;
    no_blocking_scope& operator=(const no_blocking_scope&) = delete;
};

/// Whether the calling thread is inside a `no_blocking_scope`.
[[nodiscard]] bool blocking_forbidden_on_this_thread() noexcept;

} // namespace ruda
