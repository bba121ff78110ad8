// An asynchronous device modelled on a GPU copy engine: its own worker thread queues reads,
// completes each after the configured latency and bandwidth, and resumes the reader on the
// reader's own executor. Options inject faults; counters show what happened.
#pragma once

#include <ruda/backend/detail/submit_read.hpp>
#include <ruda/backend/host_tensor.hpp>
#include <ruda/error.hpp>
#include <ruda/tensor/storage_pool.hpp>
#include <ruda/tensor/tensor_data.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace ruda {

template <class Tag>
class async_device_tensor;

/// A handle to an asynchronous device. Copies share one device; it shuts down when the last
/// handle goes, completing every pending read with `operation_aborted` (`errc::cancelled`).
/// Tensors refer to their device weakly, so they never keep it alive.
///
///     ruda::async_device gpu{{.latency = std::chrono::milliseconds(2),
///                             .bytes_per_second = 12e9, .concurrent_transfers = 8}};
class async_device {
public:
    struct options {
        /// Time from the start of a transfer to its first byte.
        std::chrono::nanoseconds latency{0};
        /// Transfer rate of one transfer; 0 means unlimited.
        double bytes_per_second = 0;
        /// Transfers in progress at once (at least 1); further reads queue.
        std::size_t concurrent_transfers = 4;
        /// False models a device that can only make progress inside the caller's event loop
        /// (WebGPU on the web): `blocking_reads()` reports false, so sync reads refuse.
        bool blocking_reads = true;
        /// Reads never complete on their own, only when cancelled or at shutdown: a device
        /// that hangs.
        bool hang_reads = false;
        /// Fail the k-th read issued (1-based) with `errc::read_failed`; 0 fails none.
        std::uint64_t fail_read = 0;
        /// Fail each read with this probability, decided from `fault_seed` and the read's
        /// sequence number, so a run is reproducible.
        double fail_probability = 0;
        std::uint64_t fault_seed = 1;
        /// Reads land in this pool's buffers, kept from one snapshot to the next as a GPU
        /// backend keeps its pinned record buffers; in freshly allocated memory when null.
        std::shared_ptr<storage_pool> record_pool{};
    };

    /// What the device has done so far.
    struct counters {
        std::uint64_t reads_issued = 0;
        std::uint64_t reads_completed = 0; ///< succeeded
        std::uint64_t reads_failed = 0;    ///< injected faults
        std::uint64_t reads_cancelled = 0; ///< cancelled or cut off by shutdown
        std::uint64_t bytes_read = 0;
        std::size_t in_flight = 0; ///< issued and not yet completed
        std::size_t peak_in_flight = 0;
    };

    explicit async_device(options opts);
    async_device() : async_device(options{}) {}

    [[nodiscard]] const options& get_options() const;
    [[nodiscard]] counters stats() const;
    /// Starts a new peak measurement from the current number in flight.
    void reset_peak() const;
    [[nodiscard]] bool blocking_reads() const;
    /// The executor of the device's worker, for short device callbacks. Never block on it (a
    /// sync read called there refuses, because the read would need this very thread) and
    /// never let the last handle of the device go there. Requires a live device.
    [[nodiscard]] boost::asio::io_context::executor_type executor() const;
    /// Whether the calling thread is the device's worker.
    [[nodiscard]] bool running_in_worker_thread() const;

    friend bool operator==(const async_device& a, const async_device& b) noexcept
    {
        return a.state_ == b.state_;
    }

    /// Reads `tensor`, which lives on this device, into host memory for any completion token,
    /// with signature `void(ruda::result<tensor_data>)`. Honours per-operation cancellation
    /// (every type): a cancelled read completes promptly with `errc::cancelled`, as does a
    /// read on a device that has shut down; `errc::read_failed` for an injected fault;
    /// `errc::unsupported_device` for a tensor of another device. The completion runs on the
    /// token's associated executor, posted, never inline. The read does not keep the device
    /// alive.
    ///
    ///     auto data = co_await gpu.async_read(tensor, boost::asio::use_awaitable);
    template <class Tag, class CompletionToken>
    auto async_read(const async_device_tensor<Tag>& tensor, CompletionToken&& token) const;

private:
    template <class Tag>
    friend class async_device_tensor;

    explicit async_device(std::shared_ptr<detail::device_state> state)
        : state_(std::move(state))
    {
    }
    std::shared_ptr<detail::device_state> state_;
};

/// A tensor in an `async_device`'s memory: an immutable shared storage plus the device it
/// lives on, referred to weakly (a tensor never keeps its device alive).
template <class Tag>
class async_device_tensor {
public:
    async_device_tensor(host_tensor<Tag> storage, const async_device& on)
        : storage_(std::move(storage)), device_(on.state_)
    {
    }
    [[nodiscard]] const host_tensor<Tag>& storage() const noexcept { return storage_; }
    /// The device it lives on: a handle whose reads complete at once with `errc::cancelled`
    /// once that device has shut down.
    [[nodiscard]] async_device device() const { return async_device{device_.lock()}; }

private:
    friend class async_device;
    host_tensor<Tag> storage_;
    std::weak_ptr<detail::device_state> device_;
};

template <class Tag, class CompletionToken>
auto async_device::async_read(const async_device_tensor<Tag>& tensor,
                              CompletionToken&& token) const
{
    return boost::asio::async_initiate<CompletionToken, void(result<tensor_data>)>(
        [](auto handler, const std::weak_ptr<detail::device_state>& device,
           const async_device_tensor<Tag>& source) {
            boost::asio::any_io_executor handler_executor =
                boost::asio::get_associated_executor(handler);
            detail::submit_read(device, source.device_, source.storage().storage(),
                                std::move(handler_executor),
                                detail::read_handler{std::move(handler)});
        },
        token, std::weak_ptr<detail::device_state>{state_}, tensor);
}

} // namespace ruda
