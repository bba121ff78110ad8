// An NVIDIA GPU, driven through the CUDA driver API that ruda opens at run time (nothing links
// CUDA). The device owns ruda's copy streams, a worker thread that issues every read's copies
// and hears of their completion, pinned record buffers kept from one snapshot to the next, a
// pinned staging ring and, optionally, a reserved device buffer for device-side staging.
#pragma once

#include <ruda/error.hpp>
#include <ruda/tensor/storage_pool.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace ruda {

/// A CUDA stream (`CUstream`, `cudaStream_t`, `at::cuda::CUDAStream::stream()`), opaque. Null
/// is the legacy default stream.
using cuda_stream = void*;
/// A device address (`CUdeviceptr`; a `cudaMalloc` or `Tensor::data_ptr()` pointer as an
/// integer) in the device's primary context, which the CUDA runtime and PyTorch share.
using cuda_device_ptr = std::uint64_t;

namespace detail {
class cuda_device_state;
} // namespace detail

/// A handle to one GPU; copies share it. The last handle to go waits for the copies still
/// queued and completes every read not yet issued with `errc::cancelled`. Tensors refer to
/// their device weakly for reads (a read of a tensor whose device is gone completes with
/// `errc::cancelled`), but device memory ruda allocated stays valid while a tensor holds it.
///
///     auto gpu = ruda::cuda_device::open({.ordinal = 0}).value();
///     grads.insert<ruda::cuda_backend>(id, ruda::cuda_backend::float_tensor::borrow(
///         gpu, ptr, {1024}, ruda::dtype::f32(), stream, keep_alive).value());
///     auto record = co_await grads.to_record_async<ruda::cuda_backend>();
class cuda_device {
public:
    struct options {
        /// The device, as `cuDeviceGet` numbers them.
        int ordinal = 0;
        /// The driver library, opened with `dlopen`: a name the loader searches for or a path.
        std::string driver_library = "libcuda.so.1";
        /// Copies are issued in pieces of at most this many bytes: a cancelled read issues no
        /// further piece, and pieces through the staging ring are this large at most.
        std::size_t piece_bytes = std::size_t{8} << 20U;
        /// Bytes queued on the copy stream at once, and the size of the pinned staging ring
        /// that uploads (and reads into unpinned records) go through. Allocated once.
        std::size_t staging_bytes = std::size_t{64} << 20U;
        /// Reads land in pinned (registered) host buffers taken from a pool kept by the device,
        /// so a copy runs at the link's speed and the second snapshot pins nothing. False: reads
        /// land in plain host memory through the staging ring (a host copy more per byte).
        bool pinned_records = true;
        /// Free pinned record buffers beyond this many bytes are unpinned and freed.
        std::size_t max_cached_record_bytes = std::size_t{16} << 30U;
        /// A device buffer of this many bytes for device-side staging (0: none). A snapshot
        /// then copies every borrowed tensor into it on the GPU when it is taken, and orders the
        /// tensor's producer stream after that copy: the trainer may overwrite its gradients as
        /// soon as `to_record_async` returns, and the host never waits. Tensors that do not fit
        /// are read in place.
        std::size_t device_staging_bytes = 0;
    };

    /// What the device has done so far.
    struct counters {
        std::uint64_t reads_completed = 0;
        std::uint64_t reads_failed = 0;
        std::uint64_t reads_cancelled = 0;
        std::uint64_t bytes_read = 0;
        std::uint64_t pieces = 0;            ///< device-to-host copies issued
        std::uint64_t completions = 0;       ///< host functions run: one per batch of pieces
        std::uint64_t staged_tensors = 0;    ///< copied into the device staging buffer
        std::uint64_t unstaged_tensors = 0;  ///< did not fit the device staging buffer
        std::uint64_t uploads = 0;
        std::uint64_t bytes_uploaded = 0;
    };

    /// Opens the driver, retains the device's primary context and creates the streams, the
    /// staging ring and the device staging buffer. `errc::device_unavailable` with the
    /// loader's or driver's reason when there is no driver or no such device;
    /// `errc::allocation_too_large` when the staging memory cannot be had.
    [[nodiscard]] static result<cuda_device> open(options opts);
    [[nodiscard]] static result<cuda_device> open() { return open(options{}); }

    [[nodiscard]] const options& get_options() const;
    [[nodiscard]] int ordinal() const;
    /// The device's name as the driver gives it ("NVIDIA H200").
    [[nodiscard]] const std::string& name() const;
    /// `cuDriverGetVersion`: 12040 is CUDA 12.4.
    [[nodiscard]] int driver_version() const;
    [[nodiscard]] counters stats() const;
    /// The pinned record buffers: how many were pinned, reused, held.
    [[nodiscard]] storage_pool::statistics record_pool_stats() const;
    /// Makes `stream` wait (on the GPU) for every upload issued so far, so kernels launched
    /// there after this call see the restored values. The host does not wait.
    [[nodiscard]] result<void> order_after_uploads(cuda_stream stream) const;
    /// Copies `bytes` into device memory the caller owns (a `torch::Tensor`'s, say) at
    /// `destination`, in place: a restore into the trainer's own tensors. The copies go through
    /// the pinned staging ring on the upload stream, after the work queued on `consumer` so far
    /// (which may still use the old values), and `consumer` waits for them (on the GPU): kernels
    /// launched there after this call see the new values. Returns once the copies are queued,
    /// waiting only for room in the ring (so, for more bytes than it holds, for `consumer`'s
    /// earlier work); `bytes` may be reused at once. `errc::invalid_tensor` when `destination`
    /// is not device memory, `errc::byte_count_mismatch` when the bytes run past its allocation
    /// (both before anything is copied), `errc::device_unavailable` on the device's worker,
    /// which an upload waits for, and `errc::read_failed` naming the driver's error when a copy
    /// cannot be queued (the destination may then hold part of the bytes; `consumer` still
    /// waits for the copies that were queued).
    [[nodiscard]] result<void> upload_into(cuda_device_ptr destination,
                                           std::span<const std::uint8_t> bytes,
                                           cuda_stream consumer) const;
    /// Whether the calling thread is the device's worker (where a sync read must refuse).
    [[nodiscard]] bool running_in_worker_thread() const;

    friend bool operator==(const cuda_device& a, const cuda_device& b) noexcept
    {
        return a.state_ == b.state_;
    }

    [[nodiscard]] std::weak_ptr<detail::cuda_device_state> weak_state() const noexcept
    {
        return state_;
    }
    /// A handle for a state tensors refer to, or one whose reads are cancelled when it is gone.
    [[nodiscard]] static cuda_device from_state(const std::weak_ptr<detail::cuda_device_state>& s)
    {
        return cuda_device{s.lock()};
    }
    /// The state itself; null for a device that is gone.
    [[nodiscard]] const std::shared_ptr<detail::cuda_device_state>& state() const noexcept
    {
        return state_;
    }

private:
    explicit cuda_device(std::shared_ptr<detail::cuda_device_state> state)
        : state_(std::move(state))
    {
    }
    std::shared_ptr<detail::cuda_device_state> state_;
};

} // namespace ruda
