// The asynchronous device: one worker thread owns the transfer queue and the timers, so all
// queue state is touched on that thread only; counters are atomics readable from anywhere.
#include <ruda/backend/async_device.hpp>
#include <ruda/runtime/blocking_scope.hpp>
#include <ruda/runtime/error_mapping.hpp>
#include <ruda/runtime/detail/post_completion.hpp>

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace ruda {
namespace detail {
namespace {

// One read between submission and completion.
struct read_op {
    enum class phase { queued, transferring, done };

    read_op(std::shared_ptr<const tensor_data> src, boost::asio::any_io_executor ex,
            read_handler h, bool fault)
        : source(std::move(src)), work(track_work(std::move(ex))), handler(std::move(h)),
          inject_fault(fault)
    {
    }

    std::shared_ptr<const tensor_data> source;
    // Keeps the reader's context running until the completion is posted to it.
    boost::asio::any_io_executor work;
    read_handler handler;
    bool inject_fault;
    phase state = phase::queued;
    std::optional<boost::asio::steady_timer> timer;
};

async_device::options with_one_transfer_at_least(async_device::options opts)
{
    opts.concurrent_transfers = std::max<std::size_t>(opts.concurrent_transfers, 1);
    return opts;
}

// The completion of a read of `bytes` bytes that ended with `ec`.
result<tensor_data> read_outcome(boost::system::error_code ec, std::size_t bytes,
                                 std::optional<tensor_data> data)
{
    const std::string what = "async device: read of " + std::to_string(bytes) + " bytes";
    if (!ec) {
        return std::move(*data);
    }
    if (std::error_code{ec} == errc::read_failed) {
        return error{errc::read_failed, what + " failed (injected fault)"};
    }
    return error_from_code(ec, what);
}

std::uint64_t splitmix64(std::uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30U)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27U)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31U);
}

} // namespace

class device_state {
public:
    explicit device_state(async_device::options opts)
        : options_(with_one_transfer_at_least(opts)), work_(io_.get_executor()),
          worker_([this] {
              const no_blocking_scope device_thread;
              io_.run();
          })
    {
    }

    ~device_state()
    {
        boost::asio::post(io_, [this] { shutdown(); });
        work_.reset();
        worker_.join();
    }

    device_state(const device_state&) = delete;
    device_state& operator=(const device_state&) = delete;

    // Any thread: counts the read and hands it to the worker.
    void submit(const std::shared_ptr<device_state>& self,
                std::shared_ptr<const tensor_data> source, boost::asio::any_io_executor ex,
                read_handler handler)
    {
        const std::uint64_t sequence = issued_.fetch_add(1) + 1;
        note_in_flight(in_flight_.fetch_add(1) + 1);
        auto slot = boost::asio::get_associated_cancellation_slot(handler);
        auto op = std::make_shared<read_op>(std::move(source), std::move(ex), std::move(handler),
                                            should_fail(sequence));
        if (slot.is_connected()) {
            // Runs on the reader's thread; the worker does the cancelling.
            slot.assign([device = std::weak_ptr<device_state>(self),
                         weak_op = std::weak_ptr<read_op>(op)](boost::asio::cancellation_type) {
                if (auto dev = device.lock()) {
                    if (auto target = weak_op.lock()) {
                        boost::asio::post(dev->io_,
                                          [d = dev.get(), target] {
                                              d->finish(target,
                                                        boost::asio::error::operation_aborted);
                                          });
                    }
                }
            });
        }
        boost::asio::post(io_, [this, op] { start_or_queue(op); });
    }

    [[nodiscard]] const async_device::options& get_options() const { return options_; }

    [[nodiscard]] async_device::counters stats() const
    {
        return {issued_.load(), completed_.load(), failed_.load(), cancelled_.load(),
                bytes_.load(),  in_flight_.load(), peak_.load()};
    }

    void reset_peak() { peak_.store(in_flight_.load()); }

    boost::asio::io_context::executor_type executor() { return io_.get_executor(); }

private:
    void note_in_flight(std::size_t now)
    {
        std::size_t peak = peak_.load();
        while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
        }
    }

    [[nodiscard]] bool should_fail(std::uint64_t sequence) const
    {
        if (options_.fail_read != 0 && sequence == options_.fail_read) {
            return true;
        }
        if (options_.fail_probability <= 0) {
            return false;
        }
        const double draw = static_cast<double>(splitmix64(options_.fault_seed ^ sequence) >>
                                                11U) *
                            0x1.0p-53;
        return draw < options_.fail_probability;
    }

    [[nodiscard]] std::chrono::nanoseconds transfer_time(std::size_t bytes) const
    {
        auto time = options_.latency;
        if (options_.bytes_per_second > 0) {
            time += std::chrono::nanoseconds(static_cast<std::int64_t>(
                static_cast<double>(bytes) / options_.bytes_per_second * 1e9));
        }
        return time;
    }

    // Worker thread from here on.
    void start_or_queue(const std::shared_ptr<read_op>& op)
    {
        if (op->state == read_op::phase::done) {
            return;
        }
        if (shut_down_) {
            finish(op, boost::asio::error::operation_aborted);
        } else if (transferring_.size() < options_.concurrent_transfers) {
            start(op);
        } else {
            queue_.push_back(op);
        }
    }

    void start(const std::shared_ptr<read_op>& op)
    {
        op->state = read_op::phase::transferring;
        transferring_.push_back(op);
        if (options_.hang_reads) {
            return;
        }
        op->timer.emplace(io_, transfer_time(op->source->bytes().size()));
        op->timer->async_wait([this, op](boost::system::error_code) {
            if (op->state != read_op::phase::transferring) {
                return;
            }
            if (op->inject_fault) {
                finish(op, make_error_code(errc::read_failed));
            } else {
                const tensor_data& source = *op->source;
                auto bytes = copy_out(source.bytes());
                if (!bytes) {
                    finish(op, bytes.error().code());
                    return;
                }
                finish(op, {}, tensor_data{std::move(bytes).value(), source.shape(),
                                           source.dtype()});
            }
        });
    }

    // The bytes a transfer delivers, in a pool buffer when the device has a pool.
    result<storage> copy_out(const storage& source) const
    {
        if (!options_.record_pool) {
            return storage::copy_of(source);
        }
        BOOST_OUTCOME_TRY(auto bytes, options_.record_pool->acquire(source.size()));
        if (!source.empty()) {
            std::memcpy(bytes.writable_data(), source.data(), source.size());
        }
        return bytes;
    }

    // Completes `op` exactly once, then starts the next queued read.
    void finish(const std::shared_ptr<read_op>& op, boost::system::error_code ec,
                std::optional<tensor_data> data = std::nullopt)
    {
        if (op->state == read_op::phase::done) {
            return;
        }
        const bool was_transferring = op->state == read_op::phase::transferring;
        op->state = read_op::phase::done;
        if (was_transferring) {
            std::erase(transferring_, op);
        } else {
            std::erase(queue_, op);
        }
        if (op->timer) {
            op->timer->cancel();
        }
        if (!ec) {
            completed_.fetch_add(1);
            bytes_.fetch_add(data->bytes().size());
        } else if (ec == boost::asio::error::operation_aborted) {
            cancelled_.fetch_add(1);
        } else {
            failed_.fetch_add(1);
        }
        in_flight_.fetch_sub(1);
        post_completion(std::move(op->work), std::move(op->handler),
                        read_outcome(ec, op->source->bytes().size(), std::move(data)));
        op->source.reset();
        if (was_transferring && !shut_down_ && !queue_.empty()) {
            auto next = queue_.front();
            queue_.pop_front();
            start(next);
        }
    }

    void shutdown()
    {
        shut_down_ = true;
        // Copies: finish() erases the op from the container it came from.
        while (!transferring_.empty()) {
            const auto op = transferring_.front();
            finish(op, boost::asio::error::operation_aborted);
        }
        while (!queue_.empty()) {
            const auto op = queue_.front();
            finish(op, boost::asio::error::operation_aborted);
        }
    }

    async_device::options options_;
    boost::asio::io_context io_{1};
    boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
    std::deque<std::shared_ptr<read_op>> queue_;
    std::vector<std::shared_ptr<read_op>> transferring_;
    bool shut_down_ = false;
    std::atomic<std::uint64_t> issued_{0};
    std::atomic<std::uint64_t> completed_{0};
    std::atomic<std::uint64_t> failed_{0};
    std::atomic<std::uint64_t> cancelled_{0};
    std::atomic<std::uint64_t> bytes_{0};
    std::atomic<std::size_t> in_flight_{0};
    std::atomic<std::size_t> peak_{0};
    std::thread worker_; // last: starts after everything it uses exists
};

void submit_read(const std::weak_ptr<device_state>& device,
                 const std::weak_ptr<device_state>& tensor_device,
                 std::shared_ptr<const tensor_data> source,
                 boost::asio::any_io_executor handler_executor, read_handler handler)
{
    auto dev = device.lock();
    if (dev && (dev.owner_before(tensor_device) || tensor_device.owner_before(dev))) {
        post_completion(track_work(std::move(handler_executor)), std::move(handler),
                        result<tensor_data>{error{errc::unsupported_device,
                                                  "async device: the tensor lives on another "
                                                  "device"}});
        return;
    }
    if (dev) {
        dev->submit(dev, std::move(source), std::move(handler_executor), std::move(handler));
        return;
    }
    post_completion(track_work(std::move(handler_executor)), std::move(handler),
                    read_outcome(boost::asio::error::operation_aborted, source->bytes().size(),
                                 std::nullopt));
}

} // namespace detail

async_device::async_device(options opts)
    : state_(std::make_shared<detail::device_state>(opts))
{
}

const async_device::options& async_device::get_options() const
{
    static const options gone{};
    return state_ ? state_->get_options() : gone;
}

async_device::counters async_device::stats() const { return state_ ? state_->stats() : counters{}; }

void async_device::reset_peak() const
{
    if (state_) {
        state_->reset_peak();
    }
}

bool async_device::blocking_reads() const
{
    return !state_ || state_->get_options().blocking_reads;
}

boost::asio::io_context::executor_type async_device::executor() const
{
    return state_->executor();
}

bool async_device::running_in_worker_thread() const
{
    return state_ && state_->executor().running_in_this_thread();
}

} // namespace ruda
