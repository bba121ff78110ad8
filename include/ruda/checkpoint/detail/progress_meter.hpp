// Counts the payload bytes a save or a load has done, from any of its I/O threads, and tells
// the caller's `on_progress` after each piece, one call at a time.
#pragma once

#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/error.hpp>

#include <cstdint>
#include <functional>
#include <mutex>

namespace ruda::detail {

class progress_meter {
public:
    progress_meter(const std::function<void(const checkpoint_progress&)>& report,
                   std::uint64_t bytes_total)
        : report_(report), now_{.bytes_done = 0, .bytes_total = bytes_total}
    {
    }

    /// Adds `bytes` and tells the caller (not for 0 bytes: nothing changed). An exception from
    /// the caller's function stops the save or load as a failed write would, with
    /// `errc::cancelled` ("Stopped by on_progress: …").
    [[nodiscard]] result<void> add(std::uint64_t bytes);

private:
    const std::function<void(const checkpoint_progress&)>& report_;
    std::mutex mutex_;
    checkpoint_progress now_;
};

} // namespace ruda::detail
