// What a trainer prints while it trains: a row every few steps with the loss, its checkpoints
// so far and how long checkpoints kept the loop from training; then, once it has checked its
// checkpoints, the lines that say whether they restore and resume exactly.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace examples {

class progress_table {
public:
    using clock = std::chrono::steady_clock;

    /// Prints the header; `taken` and `durable` name the two checkpoint columns. The wall clock
    /// starts here.
    progress_table(const char* taken, const char* durable) : start_(clock::now())
    {
        std::printf("| step | loss | %s | %s | loop blocked ms | blocked %% of wall |\n", taken,
                    durable);
        std::printf("|---:|---:|---:|---:|---:|---:|\n");
    }

    /// The loop was kept from training from `since` until now.
    void blocked_since(clock::time_point since) { blocked_ += clock::now() - since; }

    void row(std::uint64_t step, double loss, std::uint64_t taken, std::uint64_t durable) const
    {
        std::printf("| %llu | %.5f | %llu | %llu | %.3f | %.3f |\n",
                    static_cast<unsigned long long>(step), loss,
                    static_cast<unsigned long long>(taken),
                    static_cast<unsigned long long>(durable), blocked_seconds() * 1e3,
                    100.0 * blocked_seconds() / wall_seconds());
    }

    /// Stops the wall clock: training is over.
    void stop() { stop_ = clock::now(); }

    [[nodiscard]] double wall_seconds() const
    {
        const auto end = stop_ == clock::time_point{} ? clock::now() : stop_;
        return std::chrono::duration<double>(end - start_).count();
    }
    [[nodiscard]] double blocked_seconds() const
    {
        return std::chrono::duration<double>(blocked_).count();
    }

private:
    clock::time_point start_;
    clock::time_point stop_{};
    clock::duration blocked_{};
};

/// "N snapshots staged, M checkpoints made durable, K kept in DIR; training …, loop blocked …"
inline void print_summary(std::uint64_t staged, std::uint64_t durable, std::size_t kept,
                          const std::string& dir, double wall_seconds, double blocked_seconds)
{
    std::printf("\n%llu snapshots staged, %llu checkpoints made durable, %zu kept in %s; "
                "training %.3f s, loop blocked %.3f ms (%.4f%%)\n",
                static_cast<unsigned long long>(staged), static_cast<unsigned long long>(durable),
                kept, dir.c_str(), wall_seconds, blocked_seconds * 1e3,
                100.0 * blocked_seconds / wall_seconds);
}

/// How many of the checkpoints on disk restored exactly the state at their snapshot.
inline void print_restored(std::size_t identical, std::size_t checked)
{
    std::printf("checkpoints restored bit-identical to the state at their snapshot: %zu of %zu\n",
                identical, checked);
}

/// Whether training resumed from checkpoint (`step`, `micro_batch`) ended exactly where the
/// uninterrupted run did.
inline void print_resumed(std::uint64_t step, std::uint64_t micro_batch, std::uint64_t accumulate,
                          bool exact)
{
    std::printf("resumed from the latest checkpoint (step %llu, micro-batch %llu of %llu): final "
                "weights %s\n",
                static_cast<unsigned long long>(step), static_cast<unsigned long long>(micro_batch),
                static_cast<unsigned long long>(accumulate),
                exact ? "bit-identical to the uninterrupted run" : "DIFFER");
}

} // namespace examples
