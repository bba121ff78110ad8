// The inside of a `cuda_device`: the context's streams and events, the pinned staging ring,
// device staging, the record pool, and the worker thread that owns every read. Declared here,
// defined by mechanism: cuda_device.cpp (opening, the worker's life, the public calls),
// cuda_reads.cpp (a read from queue to completion, runs of small tensors),
// cuda_landings.cpp (how copies report landing, and the watch for a failed context) and
// cuda_uploads.cpp (uploads through the ring). Internal to the CUDA device.
#pragma once

#include "cuda_context.hpp"
#include "cuda_device_staging.hpp"
#include "cuda_runs.hpp"
#include "staging_ring.hpp"

#include <ruda/backend/cuda_device.hpp>
#include <ruda/backend/detail/cuda_device_state.hpp>
#include <ruda/backend/detail/cuda_driver.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

namespace ruda::detail {

inline error cancelled_read() { return error{errc::cancelled, "cuda backend: read cancelled"}; }

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
    bool started = false;       // the destination exists and the producer was waited for
    std::size_t issued = 0;     // bytes of pieces queued
    std::size_t landed = 0;     // bytes of pieces landed
    bool stopped = false;       // no further pieces: cancelled or failed
    std::optional<error> failure;
    bool done = false;
};

// Pieces queued since the last host function; the next host function reports them landed.
struct cuda_piece {
    std::shared_ptr<cuda_read_op> read; // null for an upload's staging piece or a run
    std::size_t bytes;
    std::optional<std::size_t> staging_offset; // in the pinned ring
    std::size_t destination_offset;
    std::shared_ptr<cuda_run> run{}; // the run this copy serves
};

class cuda_device_state : public std::enable_shared_from_this<cuda_device_state> {
public:
    cuda_device_state(const driver& api, std::shared_ptr<const cuda_context> context,
                      cuda_device::options opts, std::string name)
        : api_(api), context_(std::move(context)), options_(std::move(opts)),
          name_(std::move(name)), ring_(options_.staging_bytes), work_(io_.get_executor())
    {
    }

    // cuda_device.cpp

    // Everything that can fail, before the worker starts.
    result<void> create();

    ~cuda_device_state();
    cuda_device_state(const cuda_device_state&) = delete;
    cuda_device_state& operator=(const cuda_device_state&) = delete;

    [[nodiscard]] const cuda_device::options& get_options() const noexcept { return options_; }
    [[nodiscard]] int ordinal() const noexcept { return context_->ordinal(); }
    [[nodiscard]] const std::string& name() const noexcept { return name_; }
    [[nodiscard]] int driver_version() const noexcept { return api_.version; }
    [[nodiscard]] bool in_worker() const { return io_.get_executor().running_in_this_thread(); }

    [[nodiscard]] cuda_device::counters stats() const
    {
        return {reads_completed_.load(), reads_failed_.load(), reads_cancelled_.load(),
                bytes_read_.load(),      pieces_.load(),       completions_.load(),
                staged_.load(),          unstaged_.load(),     uploads_.load(),
                bytes_uploaded_.load()};
    }

    [[nodiscard]] storage_pool::statistics record_pool_stats() const
    {
        return record_pool_ ? record_pool_->stats() : storage_pool::statistics{};
    }

    // Any thread: queues a read of `tensor` on the worker.
    void submit(std::shared_ptr<const cuda_tensor_desc> tensor, boost::asio::any_io_executor work,
                cuda_read_handler handler);

    // cuda_uploads.cpp

    // An error on the worker, which an upload would wait for (for room in the ring).
    result<void> refuse_upload_in_worker() const;

    // `bytes` to `address` on the upload stream, in pieces through the staging ring: returns
    // once they are queued (the caller's bytes are in the ring by then).
    result<void> copy_through_ring(CUdeviceptr address, std::span<const std::uint8_t> bytes);

    // Any thread but the worker: device memory filled from `bytes` through the staging ring.
    result<cuda_tensor_desc> upload(std::span<const std::uint8_t> bytes, shape dims, dtype type);

    // Any thread but the worker: `bytes` into memory the caller owns, after the consumer's
    // work so far, and the consumer after the copies.
    result<void> upload_into(CUdeviceptr destination, std::span<const std::uint8_t> bytes,
                             cuda_stream consumer);

    result<void> order_after_uploads(cuda_stream stream);

    // Any thread: the borrowed tensors among `tensors` copied into the device staging buffer.
    result<void> stage(std::span<std::shared_ptr<const cuda_tensor_desc>* const> tensors)
    {
        return device_staging_ ? device_staging_->stage(tensors, staged_, unstaged_) : success();
    }

    // Any thread: runs of adjacent small tensors, each read by one copy into a pinned buffer.
    result<void> group_runs(std::span<std::shared_ptr<const cuda_tensor_desc>* const> tensors)
    {
        if (!options_.pinned_records) {
            return success();
        }
        return group_cuda_runs(*context_, tensors, piece_bytes());
    }

private:
    struct batch {
        cuda_device_state* owner = nullptr;
        std::vector<cuda_piece> pieces;
    };

    std::size_t piece_bytes() const
    {
        return std::clamp<std::size_t>(options_.piece_bytes, 1, ring_.capacity());
    }

    // cuda_uploads.cpp

    // Staging pieces whose copies were never queued.
    void release_now(std::unique_ptr<batch> landing);

    // cuda_landings.cpp

    // Driver thread: the only thing it does is post the batch back to the worker. The worker
    // may handle it, run out of work and end before post() has returned here, so the device
    // counts the callbacks still inside and its destructor waits for none to be left.
    static void on_landed(void* user_data);

    // Any thread: a host function reports `landing` once the stream's copies so far are done.
    void launch_landing(CUstream stream, std::unique_ptr<batch> landing);

    // The copy stream must not wait for host functions (each would stall it for a round trip
    // to the host), so they run on a stream of their own, after an event on the copy stream.
    void launch_read_landing(std::unique_ptr<batch> landing);

    // Any thread, once a batch is out: the worker checks the context until none is left.
    void watch_context();

    // Worker thread: asks again in a while whether the context has failed.
    void check_context_later();

    // Worker thread: the context failed (a GPU fault), so no copy out will land and no host
    // function will run. Every read out, or waiting, fails with the driver's error; later
    // uploads and reads fail at once. The memory those copies target is kept, never reused,
    // in case a copy still moves after all.
    void context_failed(CUresult status);

    // Any thread: batches launched and not landed (nor given up when the context failed).
    std::size_t batches_out();

    // The context's failure, once it has failed.
    std::optional<error> fault();

    // Fails `op` with the context's failure, keeping its destination (a copy may still land).
    void fail_after_fault(const std::shared_ptr<cuda_read_op>& op, const error& failure);

    // Worker thread: a batch's copies have landed; its pieces go to their reads (or back to
    // the ring), and the reads whose last piece it was complete.
    void landed(std::unique_ptr<batch> landing);

    // cuda_reads.cpp, on the worker thread

    // Queues a read.
    void start(const std::shared_ptr<cuda_read_op>& op);

    // Stops a read: a queued one completes now, one with copies out once they have landed.
    void cancel(const std::shared_ptr<cuda_read_op>& op);

    // Queues pieces while the copy stream has room, then one host function for all of them.
    void pump();

    // A read whose tensor is part of a run (see `cuda_run`): the first read of the run issues
    // its one copy; each read completes with its slice once that copy has landed. Returns the
    // bytes queued.
    std::size_t join_run(const std::shared_ptr<cuda_read_op>& op, std::vector<CUstream>& waited,
                         batch& landing);

    // The run's one copy into a pinned buffer from the record pool; the bytes queued.
    std::size_t issue_run(cuda_run& run, std::vector<CUstream>& waited);

    // Completes `op` with its slice of the run's buffer, or with the run's failure.
    void complete_from_run(const std::shared_ptr<cuda_read_op>& op, const cuda_run& run);

    // The destination buffer, and the copy stream made to wait for the producer's work so far
    // (once per producer and batch).
    result<void> begin_read(cuda_read_op& op, std::vector<CUstream>& waited);

    // The copy stream made to wait for the work queued on `stream` so far.
    result<void> wait_for_producer(cuda_stream stream, std::vector<CUstream>& waited);

    // Completes `op` exactly once: with its bytes, or with `failure`.
    void finish(const std::shared_ptr<cuda_read_op>& op, std::optional<error> failure);

    // The device is going: waiting reads are cancelled, and the worker ends once no batch is out.
    void shut_down();

    const driver& api_;
    std::shared_ptr<const cuda_context> context_;
    cuda_device::options options_;
    std::string name_;

    CUstream copy_stream_ = nullptr;    // reads
    CUstream notify_stream_ = nullptr;  // the host functions of reads
    CUstream upload_stream_ = nullptr;  // uploads
    CUevent read_event_ = nullptr;      // worker only, as is the next
    CUevent landing_event_ = nullptr;
    CUevent upload_event_ = nullptr;    // under upload_event_mutex_, as is the next
    CUevent consumer_event_ = nullptr;  // the consumer's work before an upload into its memory
    std::mutex upload_event_mutex_;

    std::uint8_t* staging_memory_ = nullptr;
    std::mutex ring_mutex_;
    std::condition_variable ring_space_;
    staging_ring ring_;
    std::optional<error> fault_; // under ring_mutex_: the context failed
    std::shared_ptr<device_staging> device_staging_;
    std::shared_ptr<storage_pool> record_pool_;

    std::deque<std::shared_ptr<cuda_read_op>> waiting_; // worker only, as are the two below
    std::size_t queued_bytes_ = 0;
    bool shutting_down_ = false;
    bool pump_posted_ = false;
    bool worker_has_context_ = true;
    std::atomic<int> callbacks_inside_{0}; // host functions inside on_landed
    std::mutex batches_mutex_;
    std::unordered_set<batch*> batches_out_; // launched, not landed; under batches_mutex_
    std::atomic<bool> watching_context_{false};
    std::vector<std::unique_ptr<batch>> abandoned_; // worker only, as is the next: out when
    std::vector<storage> kept_after_fault_;         // the context failed, and what they target

    std::atomic<std::uint64_t> reads_completed_{0};
    std::atomic<std::uint64_t> reads_failed_{0};
    std::atomic<std::uint64_t> reads_cancelled_{0};
    std::atomic<std::uint64_t> bytes_read_{0};
    std::atomic<std::uint64_t> pieces_{0};
    std::atomic<std::uint64_t> completions_{0};
    std::atomic<std::uint64_t> staged_{0};
    std::atomic<std::uint64_t> unstaged_{0};
    std::atomic<std::uint64_t> uploads_{0};
    std::atomic<std::uint64_t> bytes_uploaded_{0};

    mutable boost::asio::io_context io_{1};
    boost::asio::steady_timer context_check_{io_}; // worker only
    boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
    std::thread worker_; // started last, by create()
};

} // namespace ruda::detail
