// The CUDA device: one worker thread issues every read's copies and learns of their landing
// through host functions that only post back to it, so all read state is touched on that
// thread; uploads and device staging run on the caller's thread under their own locks. The
// context and its memory, the rings, device staging and runs of small tensors have files of
// their own (cuda_context.hpp, staging_ring.hpp, cuda_device_staging.*, cuda_runs.*).
#include "cuda_context.hpp"
#include "cuda_device_staging.hpp"
#include "cuda_runs.hpp"
#include "staging_ring.hpp"

#include <ruda/backend/cuda_device.hpp>
#include <ruda/backend/detail/cuda_device_state.hpp>
#include <ruda/backend/detail/cuda_driver.hpp>
#include <ruda/runtime/blocking_scope.hpp>
#include <ruda/runtime/detail/post_completion.hpp>

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>

namespace ruda {
namespace detail {

using namespace cuda;

namespace {

// How often the worker asks whether the context has failed while copies are out: a failed
// context never runs their host functions, so that is the only way their reads can end.
constexpr std::chrono::milliseconds context_check_interval{100};

error cancelled_read() { return error{errc::cancelled, "cuda backend: read cancelled"}; }

} // namespace

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

    // Everything that can fail, before the worker starts.
    result<void> create()
    {
        BOOST_OUTCOME_TRY(context_->make_current());
        for (CUstream* stream : {&copy_stream_, &upload_stream_, &notify_stream_}) {
            BOOST_OUTCOME_TRY(context_->check(api_.cuStreamCreate(stream, stream_non_blocking),
                                              errc::device_unavailable, "cuStreamCreate"));
        }
        for (CUevent* event :
             {&read_event_, &upload_event_, &landing_event_, &consumer_event_}) {
            BOOST_OUTCOME_TRY(context_->check(api_.cuEventCreate(event, event_disable_timing),
                                              errc::device_unavailable, "cuEventCreate"));
        }
        staging_memory_ = static_cast<std::uint8_t*>(
            pinned_memory::allocate(*context_, options_.staging_bytes));
        if (staging_memory_ == nullptr) {
            return error{errc::allocation_too_large,
                         "cuda device " + std::to_string(ordinal()) + ": cannot pin " +
                             std::to_string(options_.staging_bytes) + " bytes of staging memory"};
        }
        if (options_.device_staging_bytes > 0) {
            BOOST_OUTCOME_TRY(device_staging_,
                              device_staging::create(context_, options_.device_staging_bytes));
        }
        if (options_.pinned_records) {
            auto context = context_;
            record_pool_ = storage_pool::create(
                {.max_cached_bytes = options_.max_cached_record_bytes,
                 .source = {
                     .allocate =
                         [context](std::size_t size) {
                             return pinned_memory::allocate(*context, size);
                         },
                     .free = [context](void* memory,
                                       std::size_t) { pinned_memory::free(*context, memory); },
                     .name = "pinned host memory of cuda device " + std::to_string(ordinal())}});
        }
        worker_ = std::thread([this] {
            const no_blocking_scope device_thread;
            if (!context_->make_current()) {
                worker_has_context_ = false;
            }
            io_.run();
        });
        return success();
    }

    ~cuda_device_state()
    {
        if (worker_.joinable()) {
            boost::asio::post(io_, [this] { shut_down(); });
            worker_.join();
        }
        while (callbacks_inside_.load() != 0) {
            std::this_thread::yield(); // a host function returning from its post
        }
        if (!context_->make_current()) {
            return;
        }
        if (staging_memory_ != nullptr) {
            pinned_memory::free(*context_, staging_memory_);
        }
        for (CUevent event : {read_event_, upload_event_, landing_event_, consumer_event_}) {
            if (event != nullptr) {
                api_.cuEventDestroy(event);
            }
        }
        for (CUstream stream : {copy_stream_, notify_stream_, upload_stream_}) {
            if (stream != nullptr) {
                api_.cuStreamDestroy(stream);
            }
        }
    }
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

    // Any thread.
    void submit(std::shared_ptr<const cuda_tensor_desc> tensor, boost::asio::any_io_executor work,
                cuda_read_handler handler)
    {
        auto slot = boost::asio::get_associated_cancellation_slot(handler);
        auto op = std::make_shared<cuda_read_op>(std::move(tensor), std::move(work),
                                                 std::move(handler));
        if (slot.is_connected()) {
            // On the reader's thread; the worker does the cancelling. A cancel that comes after
            // the device is gone finds nothing to do.
            slot.assign([device = weak_from_this(), weak_op = std::weak_ptr<cuda_read_op>(op)](
                            boost::asio::cancellation_type) {
                const auto target = weak_op.lock();
                if (const auto self = device.lock(); self && target) {
                    boost::asio::post(self->io_,
                                      [raw = self.get(), target] { raw->cancel(target); });
                }
            });
        }
        boost::asio::post(io_, [this, op] { start(op); });
    }

    // An error on the worker, which an upload would wait for (for room in the ring).
    result<void> refuse_upload_in_worker() const
    {
        if (in_worker()) {
            return error{errc::device_unavailable,
                         "cuda device " + std::to_string(ordinal()) +
                             ": uploads cannot run on the device's worker, which they wait for"};
        }
        return success();
    }

    // `bytes` to `address` on the upload stream, in pieces through the staging ring: returns
    // once they are queued (the caller's bytes are in the ring by then).
    result<void> copy_through_ring(CUdeviceptr address, std::span<const std::uint8_t> bytes)
    {
        const std::size_t piece = piece_bytes();
        for (std::size_t done = 0; done < bytes.size(); done += piece) {
            const std::size_t size = std::min(piece, bytes.size() - done);
            std::size_t offset = 0;
            {
                std::unique_lock lock{ring_mutex_};
                ring_space_.wait(lock, [&] {
                    if (fault_) {
                        return true;
                    }
                    const auto at = ring_.allocate(size);
                    offset = at.value_or(0);
                    return at.has_value();
                });
                if (fault_) {
                    return *fault_; // the ring's pieces will never land
                }
            }
            std::memcpy(staging_memory_ + offset, bytes.data() + done, size);
            auto copied = context_->check(api_.cuMemcpyHtoDAsync(address + done,
                                                                 staging_memory_ + offset, size,
                                                                 upload_stream_),
                                          errc::read_failed,
                                          "cuMemcpyHtoDAsync of " + std::to_string(size) +
                                              " bytes");
            auto landing = std::make_unique<batch>();
            landing->owner = this;
            landing->pieces.push_back({nullptr, size, offset, 0});
            if (!copied) {
                release_now(std::move(landing));
                return std::move(copied).error();
            }
            launch_landing(upload_stream_, std::move(landing));
        }
        uploads_.fetch_add(1);
        bytes_uploaded_.fetch_add(bytes.size());
        return success();
    }

    // Any thread but the worker: device memory filled from `bytes` through the staging ring.
    result<cuda_tensor_desc> upload(std::span<const std::uint8_t> bytes, shape dims, dtype type)
    {
        BOOST_OUTCOME_TRY(refuse_upload_in_worker());
        BOOST_OUTCOME_TRY(context_->make_current());
        CUdeviceptr address = 0;
        BOOST_OUTCOME_TRY(context_->check(api_.cuMemAlloc(&address, std::max<std::size_t>(
                                                                        bytes.size(), 1)),
                                          errc::allocation_too_large,
                                          "cuMemAlloc of " + std::to_string(bytes.size()) +
                                              " bytes"));
        auto memory = std::make_shared<const device_allocation>(context_, address);
        BOOST_OUTCOME_TRY(copy_through_ring(address, bytes));
        cuda_tensor_desc desc;
        desc.address = address;
        desc.bytes = bytes.size();
        desc.dims = std::move(dims);
        desc.type = type;
        desc.producer = upload_stream_;
        desc.keep_alive = std::move(memory);
        return desc;
    }

    // Any thread but the worker: `bytes` into memory the caller owns, after the consumer's
    // work so far, and the consumer after the copies.
    result<void> upload_into(CUdeviceptr destination, std::span<const std::uint8_t> bytes,
                             cuda_stream consumer)
    {
        BOOST_OUTCOME_TRY(refuse_upload_in_worker());
        BOOST_OUTCOME_TRY(context_->make_current());
        const auto where = [&] {
            return "cuda device " + std::to_string(ordinal()) + ": " +
                   std::to_string(bytes.size()) + " bytes at " + hex(destination);
        };
        CUdeviceptr base = 0;
        std::size_t size = 0;
        if (api_.cuMemGetAddressRange(&base, &size, destination) != cuda_success) {
            return error{errc::invalid_tensor,
                         where() + " cannot be uploaded: the address is not device memory"};
        }
        if (bytes.size() > size - (destination - base)) {
            return error{errc::byte_count_mismatch,
                         where() + " do not fit the allocation of " + std::to_string(size) +
                             " bytes at " + hex(base)};
        }
        {
            const std::lock_guard lock{upload_event_mutex_};
            BOOST_OUTCOME_TRY(context_->check(
                api_.cuEventRecord(consumer_event_, static_cast<CUstream>(consumer)),
                errc::read_failed, "cuEventRecord"));
            BOOST_OUTCOME_TRY(
                context_->check(api_.cuStreamWaitEvent(upload_stream_, consumer_event_, 0),
                                errc::read_failed, "cuStreamWaitEvent"));
        }
        // The consumer waits even for a part: no piece may land under its later work.
        auto copied = copy_through_ring(destination, bytes);
        auto ordered = order_after_uploads(consumer);
        if (!copied) {
            return std::move(copied).error();
        }
        return ordered;
    }

    result<void> order_after_uploads(cuda_stream stream)
    {
        BOOST_OUTCOME_TRY(context_->make_current());
        const std::lock_guard lock{upload_event_mutex_};
        BOOST_OUTCOME_TRY(context_->check(api_.cuEventRecord(upload_event_, upload_stream_),
                                          errc::read_failed, "cuEventRecord"));
        return context_->check(
            api_.cuStreamWaitEvent(static_cast<CUstream>(stream), upload_event_, 0),
            errc::read_failed, "cuStreamWaitEvent");
    }

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

    // Driver thread: the only thing it does is post the batch back to the worker. The worker
    // may handle it, run out of work and end before post() has returned here, so the device
    // counts the callbacks still inside and its destructor waits for none to be left.
    static void on_landed(void* user_data)
    {
        auto* landing = static_cast<batch*>(user_data);
        cuda_device_state* owner = landing->owner;
        owner->callbacks_inside_.fetch_add(1);
        boost::asio::post(owner->io_, [landing] {
            landing->owner->landed(std::unique_ptr<batch>(landing));
        });
        owner->callbacks_inside_.fetch_sub(1); // the last touch of the device
    }

    // Any thread: a host function reports `landing` once the stream's copies so far are done.
    void launch_landing(CUstream stream, std::unique_ptr<batch> landing)
    {
        {
            const std::lock_guard lock{batches_mutex_};
            batches_out_.insert(landing.get());
        }
        watch_context();
        if (api_.cuLaunchHostFunc(stream, &on_landed, landing.get()) == cuda_success) {
            landing.release(); // on_landed owns it now
            return;
        }
        // No host function: the only way left to know the copies are done is to wait.
        batch* raw = landing.release();
        if (const CUresult status = api_.cuStreamSynchronize(stream); status != cuda_success) {
            // The copies may not have run: the batch's reads fail, its memory is kept.
            boost::asio::post(io_, [this, status] { context_failed(status); });
            return;
        }
        boost::asio::post(io_, [raw] { raw->owner->landed(std::unique_ptr<batch>(raw)); });
    }

    // Any thread, once a batch is out: the worker checks the context until none is left.
    void watch_context()
    {
        if (!watching_context_.exchange(true)) {
            boost::asio::post(io_, [this] { check_context_later(); });
        }
    }

    // Worker thread.
    void check_context_later()
    {
        context_check_.expires_after(context_check_interval);
        context_check_.async_wait([this](const boost::system::error_code& cancelled) {
            if (cancelled || !worker_has_context_) { // without a context it cannot ask
                watching_context_.store(false);
                return;
            }
            if (batches_out() == 0) {
                watching_context_.store(false);
                // A batch launched since the check saw the flag still set: watch for it here.
                if (batches_out() == 0 || watching_context_.exchange(true)) {
                    return;
                }
            }
            if (const CUresult status = api_.cuStreamQuery(copy_stream_);
                status != cuda_success && status != cuda_not_ready) {
                watching_context_.store(false);
                context_failed(status);
                return;
            }
            check_context_later();
        });
    }

    // Worker thread: the context failed (a GPU fault), so no copy out will land and no host
    // function will run. Every read out, or waiting, fails with the driver's error; later
    // uploads and reads fail at once. The memory those copies target is kept, never reused,
    // in case a copy still moves after all.
    void context_failed(CUresult status)
    {
        error failure = context_->failure(status, errc::read_failed,
                                          "the context failed with copies in flight");
        {
            const std::lock_guard lock{ring_mutex_};
            if (fault_) {
                failure = *fault_; // the first failure is the one every later call reports
            } else {
                fault_ = failure;
            }
        }
        ring_space_.notify_all();
        std::vector<std::unique_ptr<batch>> lost;
        {
            const std::lock_guard lock{batches_mutex_};
            for (batch* out : batches_out_) {
                lost.emplace_back(out);
            }
            batches_out_.clear();
        }
        for (const auto& landing : lost) {
            for (cuda_piece& piece : landing->pieces) {
                if (piece.run) {
                    piece.run->failure = failure;
                    kept_after_fault_.push_back(std::move(piece.run->buffer));
                    for (const auto& waiter : piece.run->waiting) {
                        complete_from_run(waiter, *piece.run);
                    }
                    piece.run->waiting.clear();
                } else if (piece.read) {
                    fail_after_fault(piece.read, failure);
                }
            }
        }
        while (!waiting_.empty()) {
            const auto op = waiting_.front();
            waiting_.pop_front();
            fail_after_fault(op, failure);
        }
        queued_bytes_ = 0;
        abandoned_.insert(abandoned_.end(), std::make_move_iterator(lost.begin()),
                          std::make_move_iterator(lost.end()));
        if (shutting_down_ && batches_out() == 0) {
            work_.reset();
        }
    }

    // Any thread: batches launched and not landed (nor given up when the context failed).
    std::size_t batches_out()
    {
        const std::lock_guard lock{batches_mutex_};
        return batches_out_.size();
    }

    // The context's failure, once it has failed.
    std::optional<error> fault()
    {
        const std::lock_guard lock{ring_mutex_};
        return fault_;
    }

    void fail_after_fault(const std::shared_ptr<cuda_read_op>& op, const error& failure)
    {
        op->stopped = true;
        kept_after_fault_.push_back(std::move(op->destination));
        finish(op, failure);
    }

    // Staging pieces whose copies were never queued.
    void release_now(std::unique_ptr<batch> landing)
    {
        const std::lock_guard lock{ring_mutex_};
        for (const cuda_piece& piece : landing->pieces) {
            if (piece.staging_offset) {
                ring_.release(*piece.staging_offset);
            }
        }
        ring_space_.notify_all();
    }

    // Worker thread from here on.
    void start(const std::shared_ptr<cuda_read_op>& op)
    {
        if (shutting_down_ || op->stopped) {
            finish(op, cancelled_read());
            return;
        }
        if (auto failed = fault()) {
            finish(op, std::move(*failed));
            return;
        }
        waiting_.push_back(op);
        // Reads submitted together are issued together: one producer wait, one host function.
        if (!pump_posted_) {
            pump_posted_ = true;
            boost::asio::post(io_, [this] {
                pump_posted_ = false;
                pump();
            });
        }
    }

    void cancel(const std::shared_ptr<cuda_read_op>& op)
    {
        if (op->done || op->stopped) {
            return;
        }
        op->stopped = true;
        std::erase(waiting_, op);
        if (op->landed == op->issued) {
            finish(op, cancelled_read());
        }
    }

    // Queues pieces while the copy stream has room, then one host function for all of them.
    void pump()
    {
        auto landing = std::make_unique<batch>();
        landing->owner = this;
        std::size_t landing_bytes = 0;
        std::vector<CUstream> waited;
        while (!waiting_.empty() && !shutting_down_) {
            const auto op = waiting_.front();
            const cuda_tensor_desc& tensor = *op->tensor;
            if (tensor.run) {
                if (!tensor.run->issued && queued_bytes_ > 0 &&
                    queued_bytes_ + tensor.run->bytes > ring_.capacity()) {
                    break;
                }
                waiting_.pop_front();
                landing_bytes += join_run(op, waited, *landing);
                continue;
            }
            if (!op->started) {
                if (auto begun = begin_read(*op, waited); !begun) {
                    waiting_.pop_front();
                    op->stopped = true;
                    finish(op, std::move(begun).error());
                    continue;
                }
                if (tensor.bytes == 0) {
                    waiting_.pop_front();
                    finish(op, std::nullopt);
                    continue;
                }
            }
            const std::size_t size = std::min(piece_bytes(), tensor.bytes - op->issued);
            if (queued_bytes_ > 0 && queued_bytes_ + size > ring_.capacity()) {
                break; // the stream has enough queued; more once a batch lands
            }
            // Straight into a pinned record, or through the pinned ring into a plain one.
            std::optional<std::size_t> staging;
            std::uint8_t* target = nullptr;
            if (options_.pinned_records) {
                target = op->destination.writable_data() + op->issued;
            } else {
                const std::lock_guard lock{ring_mutex_};
                staging = ring_.allocate(size);
                if (!staging) {
                    break;
                }
                target = staging_memory_ + *staging;
            }
            const CUresult status = api_.cuMemcpyDtoHAsync(target, tensor.address + op->issued,
                                                           size, copy_stream_);
            if (status != cuda_success) {
                if (staging) {
                    const std::lock_guard lock{ring_mutex_};
                    ring_.release(*staging);
                }
                waiting_.pop_front();
                op->stopped = true;
                op->failure = context_->failure(status, errc::read_failed,
                                                "cuMemcpyDtoHAsync of " + std::to_string(size) +
                                                    " bytes at offset " +
                                                    std::to_string(op->issued));
                if (op->landed == op->issued) {
                    finish(op, *op->failure);
                }
                continue;
            }
            pieces_.fetch_add(1);
            landing->pieces.push_back({op, size, staging, op->issued});
            landing_bytes += size;
            op->issued += size;
            queued_bytes_ += size;
            if (op->issued == tensor.bytes) {
                waiting_.pop_front();
            }
            // Large pieces report their landing each, so the stream is refilled while busy;
            // small ones share a host function.
            if (landing_bytes >= piece_bytes() / 2) {
                launch_read_landing(std::move(landing));
                landing = std::make_unique<batch>();
                landing->owner = this;
                landing_bytes = 0;
            }
        }
        if (!landing->pieces.empty()) {
            launch_read_landing(std::move(landing));
        }
    }

    // The copy stream must not wait for host functions (each would stall it for a round trip
    // to the host), so they run on a stream of their own, after an event on the copy stream.
    void launch_read_landing(std::unique_ptr<batch> landing)
    {
        if (api_.cuEventRecord(landing_event_, copy_stream_) == cuda_success &&
            api_.cuStreamWaitEvent(notify_stream_, landing_event_, 0) == cuda_success) {
            launch_landing(notify_stream_, std::move(landing));
        } else {
            launch_landing(copy_stream_, std::move(landing));
        }
    }

    // A read whose tensor is part of a run (see `cuda_run`): the first read of the run issues
    // its one copy; each read completes with its slice once that copy has landed. Returns the
    // bytes queued.
    std::size_t join_run(const std::shared_ptr<cuda_read_op>& op, std::vector<CUstream>& waited,
                         batch& landing)
    {
        op->started = true;
        const auto run = op->tensor->run;
        std::size_t queued = 0;
        if (!run->issued) {
            run->issued = true;
            queued = issue_run(*run, waited);
            if (queued > 0) {
                landing.pieces.push_back({nullptr, run->bytes, std::nullopt, 0, run});
            }
        }
        if (run->landed || run->failure) {
            complete_from_run(op, *run);
        } else {
            run->waiting.push_back(op);
        }
        return queued;
    }

    std::size_t issue_run(cuda_run& run, std::vector<CUstream>& waited)
    {
        auto buffer = record_pool_->acquire(run.bytes);
        if (!buffer) {
            run.failure = buffer.error();
            return 0;
        }
        if (auto waits = wait_for_producer(run.producer, waited); !waits) {
            run.failure = waits.error();
            return 0;
        }
        const CUresult status = api_.cuMemcpyDtoHAsync(buffer.value().writable_data(),
                                                       run.address, run.bytes, copy_stream_);
        if (status != cuda_success) {
            run.failure = context_->failure(status, errc::read_failed,
                                            "cuMemcpyDtoHAsync of " + std::to_string(run.bytes) +
                                                " bytes of " + std::to_string(run.tensors) +
                                                " small tensors");
            return 0;
        }
        pieces_.fetch_add(1);
        run.buffer = std::move(buffer).value();
        queued_bytes_ += run.bytes;
        return run.bytes;
    }

    void complete_from_run(const std::shared_ptr<cuda_read_op>& op, const cuda_run& run)
    {
        if (run.failure) {
            finish(op, *run.failure);
            return;
        }
        op->destination = run.buffer.slice(op->tensor->run_offset, op->tensor->bytes);
        finish(op, op->stopped ? std::optional<error>{cancelled_read()} : std::nullopt);
    }

    // The destination buffer, and the copy stream made to wait for the producer's work so far
    // (once per producer and batch).
    result<void> begin_read(cuda_read_op& op, std::vector<CUstream>& waited)
    {
        op.started = true;
        if (!worker_has_context_) {
            return error{errc::device_unavailable, "cuda device " + std::to_string(ordinal()) +
                                                       ": the worker has no context"};
        }
        const std::size_t size = op.tensor->bytes;
        if (record_pool_) {
            BOOST_OUTCOME_TRY(op.destination, record_pool_->acquire(size));
        } else {
            BOOST_OUTCOME_TRY(op.destination, storage::try_allocate(size));
        }
        return wait_for_producer(op.tensor->producer, waited);
    }

    // The copy stream made to wait for the work queued on `stream` so far.
    result<void> wait_for_producer(cuda_stream stream, std::vector<CUstream>& waited)
    {
        const auto producer = static_cast<CUstream>(stream);
        if (std::find(waited.begin(), waited.end(), producer) == waited.end()) {
            waited.push_back(producer);
            BOOST_OUTCOME_TRY(context_->check(api_.cuEventRecord(read_event_, producer),
                                              errc::read_failed, "cuEventRecord"));
            BOOST_OUTCOME_TRY(context_->check(api_.cuStreamWaitEvent(copy_stream_, read_event_, 0),
                                              errc::read_failed, "cuStreamWaitEvent"));
        }
        return success();
    }

    void landed(std::unique_ptr<batch> landing)
    {
        {
            const std::lock_guard lock{batches_mutex_};
            if (batches_out_.erase(landing.get()) == 0) {
                landing.release(); // abandoned when the context failed, which keeps it
                return;
            }
        }
        completions_.fetch_add(1);
        bool released = false;
        for (cuda_piece& piece : landing->pieces) {
            if (piece.staging_offset) {
                if (piece.read && !piece.read->stopped) {
                    std::memcpy(piece.read->destination.writable_data() + piece.destination_offset,
                                staging_memory_ + *piece.staging_offset, piece.bytes);
                }
                const std::lock_guard lock{ring_mutex_};
                ring_.release(*piece.staging_offset);
                released = true;
            }
            if (piece.run) {
                piece.run->landed = true;
                queued_bytes_ -= piece.bytes;
                for (const auto& waiter : piece.run->waiting) {
                    complete_from_run(waiter, *piece.run);
                }
                piece.run->waiting.clear();
                continue;
            }
            if (!piece.read) {
                continue;
            }
            cuda_read_op& op = *piece.read;
            op.landed += piece.bytes;
            queued_bytes_ -= piece.bytes;
            if (op.landed == op.issued && (op.stopped || op.issued == op.tensor->bytes)) {
                if (op.failure) {
                    finish(piece.read, *op.failure);
                } else if (op.stopped) {
                    finish(piece.read, cancelled_read());
                } else {
                    finish(piece.read, std::nullopt);
                }
            }
        }
        if (released) {
            ring_space_.notify_all();
        }
        landing.reset();
        if (shutting_down_ && batches_out() == 0) {
            work_.reset();
            context_check_.cancel();
        }
        pump();
    }

    // Completes `op` exactly once: with its bytes, or with `failure`.
    void finish(const std::shared_ptr<cuda_read_op>& op, std::optional<error> failure)
    {
        if (op->done) {
            return;
        }
        op->done = true;
        result<storage> outcome = std::move(op->destination);
        if (failure) {
            if (*failure == errc::cancelled) {
                reads_cancelled_.fetch_add(1);
            } else {
                reads_failed_.fetch_add(1);
            }
            outcome = std::move(*failure);
        } else {
            reads_completed_.fetch_add(1);
            bytes_read_.fetch_add(op->tensor->bytes);
        }
        op->tensor.reset();
        post_completion(std::move(op->work), std::move(op->handler), std::move(outcome));
    }

    void shut_down()
    {
        shutting_down_ = true;
        while (!waiting_.empty()) {
            const auto op = waiting_.front();
            waiting_.pop_front();
            op->stopped = true;
            if (op->landed == op->issued) {
                finish(op, cancelled_read());
            }
        }
        if (batches_out() == 0) {
            work_.reset();
            context_check_.cancel();
        }
    }

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

void submit_cuda_read(std::shared_ptr<const cuda_tensor_desc> tensor,
                      boost::asio::any_io_executor work, cuda_read_handler handler)
{
    if (auto device = tensor->device.lock()) {
        device->submit(std::move(tensor), std::move(work), std::move(handler));
        return;
    }
    post_completion(std::move(work), std::move(handler),
                    result<storage>{error{errc::cancelled, "cuda backend: the device is gone"}});
}

result<std::shared_ptr<const cuda_tensor_desc>>
upload_to_cuda(const cuda_device& device, std::span<const std::uint8_t> bytes, shape dims,
               dtype type)
{
    if (!device.state()) {
        return error{errc::device_unavailable, "cuda backend: the device is gone"};
    }
    BOOST_OUTCOME_TRY(auto desc, device.state()->upload(bytes, std::move(dims), type));
    desc.device = device.weak_state();
    return std::make_shared<const cuda_tensor_desc>(std::move(desc));
}

result<void>
prepare_cuda_snapshot(std::span<std::shared_ptr<const cuda_tensor_desc>* const> tensors)
{
    // Grouped by device, in the order the devices first appear.
    std::vector<std::pair<std::shared_ptr<cuda_device_state>,
                          std::vector<std::shared_ptr<const cuda_tensor_desc>*>>>
        by_device;
    for (auto* tensor : tensors) {
        auto device = (*tensor)->device.lock();
        if (!device) {
            continue; // its read will say the device is gone
        }
        auto group = std::find_if(by_device.begin(), by_device.end(),
                                  [&](const auto& g) { return g.first == device; });
        if (group == by_device.end()) {
            by_device.push_back({device, {}});
            group = std::prev(by_device.end());
        }
        group->second.push_back(tensor);
    }
    for (auto& [device, members] : by_device) {
        BOOST_OUTCOME_TRY(device->stage(members));
        BOOST_OUTCOME_TRY(device->group_runs(members));
    }
    return success();
}

} // namespace detail

result<cuda_device> cuda_device::open(options opts)
{
    using namespace detail::cuda;
    BOOST_OUTCOME_TRY(const driver* api, open_driver(opts.driver_library));
    const auto where = "cuda device " + std::to_string(opts.ordinal);
    int count = 0;
    if (const CUresult status = api->cuDeviceGetCount(&count); status != cuda_success) {
        return driver_error(*api, errc::device_unavailable, where + ": cuDeviceGetCount", status);
    }
    if (opts.ordinal < 0 || opts.ordinal >= count) {
        return error{errc::device_unavailable,
                     where + ": the driver sees " + std::to_string(count) + " device(s)"};
    }
    CUdevice device = 0;
    if (const CUresult status = api->cuDeviceGet(&device, opts.ordinal); status != cuda_success) {
        return driver_error(*api, errc::device_unavailable, where + ": cuDeviceGet", status);
    }
    std::array<char, 256> name{};
    if (api->cuDeviceGetName(name.data(), static_cast<int>(name.size()), device) != cuda_success) {
        name[0] = '\0';
    }
    CUcontext context = nullptr;
    if (const CUresult status = api->cuDevicePrimaryCtxRetain(&context, device);
        status != cuda_success) {
        return driver_error(*api, errc::device_unavailable, where + ": cuDevicePrimaryCtxRetain",
                            status);
    }
    auto shared_context =
        std::make_shared<const detail::cuda_context>(*api, device, context, opts.ordinal);
    opts.staging_bytes = std::max(opts.staging_bytes, detail::page_size());
    auto state = std::make_shared<detail::cuda_device_state>(*api, std::move(shared_context),
                                                             std::move(opts),
                                                             std::string{name.data()});
    BOOST_OUTCOME_TRY(state->create());
    return cuda_device{std::move(state)};
}

const cuda_device::options& cuda_device::get_options() const { return state_->get_options(); }
int cuda_device::ordinal() const { return state_->ordinal(); }
const std::string& cuda_device::name() const { return state_->name(); }
int cuda_device::driver_version() const { return state_->driver_version(); }
cuda_device::counters cuda_device::stats() const { return state_ ? state_->stats() : counters{}; }

storage_pool::statistics cuda_device::record_pool_stats() const
{
    return state_ ? state_->record_pool_stats() : storage_pool::statistics{};
}

result<void> cuda_device::order_after_uploads(cuda_stream stream) const
{
    if (!state_) {
        return error{errc::device_unavailable, "cuda backend: the device is gone"};
    }
    return state_->order_after_uploads(stream);
}

result<void> cuda_device::upload_into(cuda_device_ptr destination,
                                      std::span<const std::uint8_t> bytes,
                                      cuda_stream consumer) const
{
    if (!state_) {
        return error{errc::device_unavailable, "cuda backend: the device is gone"};
    }
    return state_->upload_into(destination, bytes, consumer);
}

bool cuda_device::running_in_worker_thread() const { return state_ && state_->in_worker(); }

} // namespace ruda
