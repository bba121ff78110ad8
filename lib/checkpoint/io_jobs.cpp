// run_jobs: one shared counter hands out the jobs; the first failure, by job number, wins.
#include <ruda/checkpoint/detail/io_jobs.hpp>

#include <algorithm>
#include <atomic>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <vector>

namespace ruda::detail {

unsigned io_threads(unsigned asked, std::uint64_t bytes) noexcept
{
    if (bytes < parallel_min_bytes) {
        return 1;
    }
    if (asked != 0) {
        return asked;
    }
    // Four writers reach the disk's parallel limit where it has one (the 16-core machine's
    // NVMe); on fewer cores the extra threads only take turns.
    return std::clamp(std::thread::hardware_concurrency(), 1U, 4U);
}

result<void> run_jobs(std::size_t count, unsigned threads,
                      const std::function<result<void>(std::size_t, unsigned)>& job)
{
    std::atomic<std::size_t> next{0};
    std::atomic<bool> stop{false};
    std::mutex mutex;
    std::size_t failed_job = std::numeric_limits<std::size_t>::max();
    std::optional<error> failure;
    std::exception_ptr exception;

    const auto work = [&](unsigned worker) {
        while (!stop.load(std::memory_order_relaxed)) {
            const std::size_t k = next.fetch_add(1, std::memory_order_relaxed);
            if (k >= count) {
                return;
            }
            try {
                if (auto done = job(k, worker); !done) {
                    const std::lock_guard lock{mutex};
                    if (k < failed_job) {
                        failed_job = k;
                        failure = done.error();
                    }
                    stop = true;
                }
            } catch (...) {
                const std::lock_guard lock{mutex};
                if (!exception) {
                    exception = std::current_exception();
                }
                stop = true;
            }
        }
    };

    const auto helpers = static_cast<unsigned>(
        std::min<std::size_t>(std::max(threads, 1U), std::max<std::size_t>(count, 1)) - 1);
    std::vector<std::thread> started;
    started.reserve(helpers);
    for (unsigned w = 1; w <= helpers; ++w) {
        try {
            started.emplace_back(work, w);
        } catch (const std::system_error&) {
            break; // no more threads: the ones we have do the work
        }
    }
    work(0);
    for (std::thread& t : started) {
        t.join();
    }
    if (exception) {
        std::rethrow_exception(exception);
    }
    if (failure) {
        return std::move(*failure);
    }
    return success();
}

} // namespace ruda::detail
