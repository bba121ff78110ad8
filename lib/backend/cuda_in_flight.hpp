// What is in flight on a CUDA device: a read between submission and completion (and how it
// completes), the pieces its copies are cut into, the batch of pieces one host function reports
// landed, and the device's counters, which each part counts where it happens. Internal to the
// CUDA device.
#pragma once

#include "cuda_runs.hpp"

#include <ruda/backend/cuda_device.hpp>
#include <ruda/backend/detail/cuda_device_state.hpp>

#include <boost/asio/any_io_executor.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace ruda::detail {

class cuda_landings;

inline error cancelled_read() { return error{errc::cancelled, "cuda backend: read cancelled"}; }

// What cuda_device::stats() reports.
struct cuda_tally {
    std::atomic<std::uint64_t> reads_completed{0};
    std::atomic<std::uint64_t> reads_failed{0};
    std::atomic<std::uint64_t> reads_cancelled{0};
    std::atomic<std::uint64_t> bytes_read{0};
    std::atomic<std::uint64_t> pieces{0};
    std::atomic<std::uint64_t> completions{0};
    std::atomic<std::uint64_t> staged{0};
    std::atomic<std::uint64_t> unstaged{0};
    std::atomic<std::uint64_t> uploads{0};
    std::atomic<std::uint64_t> bytes_uploaded{0};

    [[nodiscard]] cuda_device::counters snapshot() const
    {
        return {reads_completed.load(), reads_failed.load(), reads_cancelled.load(),
                bytes_read.load(),      pieces.load(),       completions.load(),
                staged.load(),          unstaged.load(),     uploads.load(),
                bytes_uploaded.load()};
    }
};

// One read between submission and completion; touched on the worker only.
struct cuda_read_op {
    cuda_read_op(std::shared_ptr<const cuda_tensor_desc> t, boost::asio::any_io_executor w,
                 cuda_read_handler h)
        : tensor(std::move(t)), work(std::move(w)), handler(std::move(h))
    {
    }
    std::shared_ptr<const cuda_tensor_desc> tensor;
    boost::asio::any_io_executor work;
    cuda_read_handler handler;
    storage destination;
    bool started = false;   // the destination exists and the producer was waited for
    std::size_t issued = 0; // bytes of pieces queued
    std::size_t landed = 0; // bytes of pieces landed
    bool stopped = false;   // no further pieces: cancelled or failed
    std::optional<error> failure;
    bool done = false;

    // Completes the read exactly once, with its bytes or with `failure`: posted to the reader.
    void finish(std::optional<error> failure, cuda_tally& tally);

    // Completes it with its slice of `run`'s buffer, or with the run's failure.
    void finish_from(const cuda_run& run, cuda_tally& tally);
};

// Every read waiting for `run`'s copy completes from it.
void finish_waiters(cuda_run& run, cuda_tally& tally);

// One copy: a piece of a read, an upload's piece through the staging ring, or a run's copy.
struct cuda_piece {
    std::shared_ptr<cuda_read_op> read; // null for an upload's staging piece or a run
    std::size_t bytes;
    std::optional<std::size_t> staging_offset; // in the pinned ring
    std::size_t destination_offset;
    std::shared_ptr<cuda_run> run{}; // the run this copy serves
};

// Pieces queued since the last host function; the next host function reports them landed.
struct cuda_batch {
    cuda_landings* owner = nullptr;
    std::vector<cuda_piece> pieces;
};

} // namespace ruda::detail
