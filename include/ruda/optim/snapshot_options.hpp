// How a gradient snapshot reads: how many reads may be in flight, and for the blocking form,
// when to refuse and how long to wait.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>

namespace ruda {

struct snapshot_options {
    /// Reads in flight at once (at least 1).
    std::size_t max_in_flight = 8;
    /// `try_to_record` only: refuse (`errc::sync_read_unavailable`) when this returns true.
    std::function<bool()> refuse_if{};
    /// `try_to_record` only: give up after this long with `errc::timed_out`.
    std::optional<std::chrono::steady_clock::duration> deadline{};
};

} // namespace ruda
