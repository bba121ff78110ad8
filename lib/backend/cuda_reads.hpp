// Reads on the worker, from queue to completion: the copy stream made to wait for the
// producer, device-to-host copies in pieces into a pinned record or through the ring, runs of
// small tensors read by one copy, cancellation, landings and a failed context (each read is
// completed by cuda_in_flight's finish). Every call but create() runs on the worker thread, which
// owns all of this state. Internal to the CUDA device.
#pragma once

#include "cuda_context.hpp"
#include "cuda_runs.hpp"
#include "cuda_shared_parts.hpp"

#include <ruda/tensor/storage_pool.hpp>

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace ruda::detail {

class cuda_reads {
public:
    // `worker_may_end`: called once the device is going and no batch is out.
    cuda_reads(std::shared_ptr<const cuda_context> context, cuda_shared_parts with,
               std::function<void()> worker_may_end)
        : context_(std::move(context)), api_(context_->api()), with_(with),
          worker_may_end_(std::move(worker_may_end))
    {
    }
    ~cuda_reads();
    cuda_reads(const cuda_reads&) = delete;
    cuda_reads& operator=(const cuda_reads&) = delete;

    // The copy stream and its event. With a record pool, reads land in its pinned buffers;
    // without, in plain memory through the ring.
    result<void> create(std::shared_ptr<storage_pool> record_pool);

    [[nodiscard]] CUstream copy_stream() const noexcept { return copy_stream_; }

    // The worker's thread, before it runs: it has no context, so every read fails.
    void worker_lacks_context() { worker_has_context_ = false; }

    // Queues a read.
    void start(const std::shared_ptr<cuda_read_op>& op);

    // Stops a read: a queued one completes now, one with copies out once they have landed.
    void cancel(const std::shared_ptr<cuda_read_op>& op);

    // A batch's copies have landed; its pieces go to their reads (or back to the ring), and
    // the reads whose last piece it was complete.
    void landed(std::unique_ptr<cuda_batch> batch);

    // The context failed (a GPU fault), so no copy out will land and no host function will
    // run. Every read out, or waiting, fails with the driver's error; later uploads and reads
    // fail at once. The memory those copies target is kept, never reused, in case a copy
    // still moves after all.
    void context_failed(CUresult status);

    // The device is going: waiting reads are cancelled, and the worker ends once no batch is
    // out.
    void shut_down();

private:
    // Queues pieces while the copy stream has room, then one host function for all of them.
    void pump();

    // A read whose tensor is part of a run (see `cuda_run`): the first read of the run issues
    // its one copy; each read completes with its slice once that copy has landed. Returns the
    // bytes queued.
    std::size_t join_run(const std::shared_ptr<cuda_read_op>& op, std::vector<CUstream>& waited,
                         cuda_batch& batch);

    // The run's one copy into a pinned buffer from the record pool; the bytes queued.
    std::size_t issue_run(cuda_run& run, std::vector<CUstream>& waited);

    // The destination buffer, and the copy stream made to wait for the producer's work so far
    // (once per producer and batch).
    result<void> begin_read(cuda_read_op& op, std::vector<CUstream>& waited);

    // The copy stream made to wait for the work queued on `stream` so far.
    result<void> wait_for_producer(cuda_stream stream, std::vector<CUstream>& waited);

    // Fails `op` with the context's failure, keeping its destination (a copy may still land).
    void fail_after_fault(const std::shared_ptr<cuda_read_op>& op, const error& failure);

    // The worker may end once the device is going and no batch is out.
    void end_if_done();

    std::shared_ptr<const cuda_context> context_;
    const driver& api_;
    cuda_shared_parts with_;
    std::function<void()> worker_may_end_;
    std::shared_ptr<storage_pool> record_pool_;
    CUstream copy_stream_ = nullptr;
    CUevent read_event_ = nullptr;
    bool worker_has_context_ = true;
    std::deque<std::shared_ptr<cuda_read_op>> waiting_;
    std::size_t queued_bytes_ = 0; // on the copy stream, not landed
    bool shutting_down_ = false;
    bool pump_posted_ = false;
    std::vector<storage> kept_after_fault_; // what copies out when the context failed target
};

} // namespace ruda::detail
