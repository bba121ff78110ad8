// The CUDA backend: gradients in NVIDIA device memory, read asynchronously into host records.
//
// A read waits (on the GPU) for the tensor's producer stream, copies on the device's copy
// stream in pieces, and completes through a host function that only posts to the device's
// worker, which completes the read on the reader's executor. No thread waits in a stream
// synchronize, and the driver's callback thread runs nothing but that post.
//
// What the trainer may do while a snapshot runs: without device staging, leave the gradients
// alone until the snapshot completes (as for `torch_backend`, and as DCP asks); with
// `cuda_device::options::device_staging_bytes`, a snapshot copies the borrowed gradients on
// the GPU when it is taken (`to_record_async`, `async_save`) and orders their producer
// streams after that copy, so the trainer may go on at once.
#pragma once

#include <ruda/backend/backend.hpp>
#include <ruda/backend/cuda_device.hpp>
#include <ruda/backend/detail/cuda_tensor_desc.hpp>

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>
#include <variant>

namespace ruda {

struct cuda_backend {
    using device = cuda_device;

    /// Device memory holding one tensor. `Tag` keeps float and quantized tensors apart.
    template <class Tag>
    class tensor {
    public:
        explicit tensor(std::shared_ptr<const detail::cuda_tensor_desc> desc)
            : desc_(std::move(desc))
        {
        }
        [[nodiscard]] cuda_device_ptr address() const noexcept { return desc_->address; }
        [[nodiscard]] std::size_t byte_size() const noexcept { return desc_->bytes; }
        [[nodiscard]] const ruda::shape& shape() const noexcept { return desc_->dims; }
        [[nodiscard]] ruda::dtype dtype() const noexcept { return desc_->type; }
        /// The stream whose work a read waits for: the trainer's for a borrowed tensor, ruda's
        /// upload stream for an uploaded one, ruda's staging stream for a staged copy.
        [[nodiscard]] cuda_stream producer() const noexcept { return desc_->producer; }
        [[nodiscard]] const std::shared_ptr<const detail::cuda_tensor_desc>& desc() const noexcept
        {
            return desc_;
        }

    private:
        std::shared_ptr<const detail::cuda_tensor_desc> desc_;
    };
    using float_tensor = tensor<struct cuda_float_tag>;
    using quantized_tensor = tensor<struct cuda_quantized_tag>;

    /// The trainer's own float gradient, snapshotted in place: `shape` values of float `type`
    /// at `address`, produced on `producer`; `keep_alive` holds the memory (a `torch::Tensor`
    /// in a `shared_ptr`, say) while ruda may read it. `errc::invalid_dtype` for a dtype that is
    /// not float, `errc::shape_overflow` when the byte count overflows, `errc::device_unavailable`
    /// for a device that is gone.
    [[nodiscard]] static result<float_tensor> borrow(const cuda_device& device,
                                                     cuda_device_ptr address, ruda::shape dims,
                                                     ruda::dtype type, cuda_stream producer,
                                                     std::shared_ptr<const void> keep_alive);
    /// A quantized gradient in ruda's layout for `type`: `bytes` bytes at `address`.
    /// `errc::invalid_dtype` unless `type` is quantized.
    [[nodiscard]] static result<quantized_tensor>
    borrow_quantized(const cuda_device& device, cuda_device_ptr address, std::size_t bytes,
                     ruda::shape dims, ruda::dtype type, cuda_stream producer,
                     std::shared_ptr<const void> keep_alive);

    /// Copies the tensor's bytes into a host record buffer (pinned, from the device's pool,
    /// unless `pinned_records` is off). `errc::cancelled` when cancelled: at once while not yet
    /// issued, otherwise after the pieces already queued have landed, so no buffer is reused
    /// under a copy; `errc::read_failed` naming the driver's error when a copy fails;
    /// `errc::cancelled` when the device is gone.
    static boost::asio::awaitable<result<tensor_data>> float_into_data(float_tensor tensor);
    static boost::asio::awaitable<result<tensor_data>> q_into_data(quantized_tensor tensor);

    /// Device memory ruda owns, filled from `data` through the pinned staging ring on the
    /// upload stream: the call returns once the copies are queued (it waits only for room in
    /// the ring). Reads of the tensor are ordered after the upload; for the trainer's own
    /// streams, `cuda_device::order_after_uploads`. Any float dtype (the bytes are kept as they
    /// are); `errc::invalid_dtype` for another, `errc::byte_count_mismatch` when the bytes do
    /// not fit the shape, `errc::allocation_too_large` when the device is out of memory.
    static result<float_tensor> float_from_data(tensor_data data, const device& device);
    /// The same for quantized data (any quantized dtype, its bytes as they are).
    static result<quantized_tensor> q_from_data(tensor_data data, const device& device);
    /// The tensor itself when it has `target`'s dtype. Casting on the device needs kernels
    /// ruda does not ship: `errc::invalid_dtype` otherwise. (Uploads keep every float dtype,
    /// so a restore never asks for one.)
    static result<float_tensor> float_cast(const float_tensor& tensor, ruda::dtype target);

    /// Called by a snapshot when it is taken, with every tensor it will read: on devices with
    /// a device staging buffer, copies the borrowed tensors into it on the GPU and replaces
    /// them with those copies (see `cuda_device::options::device_staging_bytes`); then marks
    /// runs of small tensors adjacent in one allocation (in id order, up to a piece, each at
    /// most 64 KiB), which one copy into one pinned buffer reads.
    /// (The span's element is `tensor_primitive<cuda_backend>*`, spelled out: the backend is
    /// not complete here.)
    static result<void>
    begin_snapshot(std::span<std::variant<float_tensor, quantized_tensor>* const> tensors);

    static ruda::dtype dtype_of(const float_tensor& t) { return t.dtype(); }
    static ruda::dtype dtype_of(const quantized_tensor& t) { return t.dtype(); }
    static std::size_t byte_size(const float_tensor& t) { return t.byte_size(); }
    static std::size_t byte_size(const quantized_tensor& t) { return t.byte_size(); }
    static device float_device(const float_tensor& t)
    {
        return cuda_device::from_state(t.desc()->device);
    }
    static device q_device(const quantized_tensor& t)
    {
        return cuda_device::from_state(t.desc()->device);
    }
    /// Reads complete on the device's worker, so a blocking wait works from any other thread.
    static bool blocking_reads(const device&) { return true; }
    static constexpr std::string_view name() { return "cuda"; }
};

static_assert(snapshot_hook<cuda_backend>);

} // namespace ruda
