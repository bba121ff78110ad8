// A list of I/O jobs worked through in order by several threads, so that a save or a load
// keeps more than one request at the disk and spreads its hashing over the cores.
#pragma once

#include <ruda/error.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>

namespace ruda::detail {

/// Saves and loads of fewer payload bytes use one thread: more would cost more than they save.
inline constexpr std::uint64_t parallel_min_bytes = std::uint64_t{16} << 20U;
/// The threads that `asked` (0: automatic) means for an operation on `bytes` of payloads: one
/// under `parallel_min_bytes`; for 0, one per core, at most 4 (docs/BENCHMARKS.md).
[[nodiscard]] unsigned io_threads(unsigned asked, std::uint64_t bytes) noexcept;

/// Runs `job(k, worker)` for every k in [0, count), handing the jobs out in order to up to
/// `threads` threads, the calling one among them; `worker` (below `threads`) tells a thread's
/// own scratch apart. Once a job fails no new job starts; those already started finish. The
/// error of the lowest failed job is returned, so the outcome never depends on the timing.
/// An exception from a job is rethrown here. Fewer threads work if the system refuses more.
[[nodiscard]] result<void> run_jobs(std::size_t count, unsigned threads,
                                    const std::function<result<void>(std::size_t, unsigned)>& job);

} // namespace ruda::detail
