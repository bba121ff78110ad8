// How a gradient snapshot reads: how many reads and bytes may be in flight, whom to tell of
// its progress, and for the blocking form, when to refuse and how long to wait.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>

namespace ruda {

/// Where a snapshot stands, after each completed read.
struct snapshot_progress {
    std::size_t tensors_done = 0;
    std::size_t tensors_total = 0;
    std::uint64_t bytes_done = 0;
    std::uint64_t bytes_total = 0;
};

struct snapshot_options {
    /// Reads in flight at once (0 acts as 1).
    std::size_t max_in_flight = 8;
    /// Bytes of the reads in flight at once, by the backend's `byte_size`. A tensor larger
    /// than this is read alone.
    std::size_t max_in_flight_bytes = std::size_t{256} << 20U;
    /// Called after each completed read, in completion order, on the executor running the
    /// snapshot (the calling thread for `try_to_record`). Keep it short; it must not block.
    std::function<void(const snapshot_progress&)> on_progress{};
    /// `try_to_record` only: refuse (`errc::sync_read_unavailable`) when this returns true.
    std::function<bool()> refuse_if{};
    /// `try_to_record` only: give up after this long with `errc::timed_out`.
    std::optional<std::chrono::steady_clock::duration> deadline{};
};

} // namespace ruda
