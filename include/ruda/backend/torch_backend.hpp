// The LibTorch backend: gradients that live in `torch::Tensor`s. Reads copy a tensor's values
// into host `tensor_data` on ruda's torch read workers (a small thread pool), so the awaiting
// coroutine's thread stays free, and complete on the reader's own executor. Built only when
// libtorch is found (CMake `RUDA_WITH_TORCH`, Meson `torch`); link `ruda::torch`.
//
// The read workers are shared by the whole process, so, as with any Asio operation, the
// reader's io_context must outlive the reads it starts: cancel them and let them complete
// (promptly, with `errc::cancelled`) before it goes.
//
// Torch tensors are mutable: a read copies the values the tensor holds when the read runs.
// Do not change a gradient (`backward()`, an in-place `zero_()`) until the snapshot reading it
// has completed; `zero_grad(/*set_to_none=*/true)` replaces the tensors and is always safe.
#pragma once

#include <ruda/backend/backend.hpp>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstddef>
#include <string_view>

namespace ruda {

struct torch_backend {
    /// Where a tensor lives. This backend reads and uploads CPU tensors: a tensor on another
    /// device, and an upload to one, is refused with `errc::unsupported_device` naming the
    /// device. A model on a GPU goes through `cuda_backend` (`cuda_module_gradients.hpp`).
    struct device {
        c10::Device where{c10::kCPU};
        friend bool operator==(const device&, const device&) = default;
    };

    /// A float tensor ruda can read: defined, strided, on the CPU, of dtype f64, f32, f16 or
    /// bf16. Copies share the tensor, as `torch::Tensor` copies do.
    class float_tensor {
    public:
        /// `errc::invalid_dtype` naming what is wrong ("torch backend: int64 tensors are not
        /// float gradients") for another dtype; `errc::unsupported_device` for a tensor that is
        /// not on the CPU; `errc::invalid_tensor` for an undefined or sparse one.
        [[nodiscard]] static result<float_tensor> wrap(at::Tensor tensor);
        [[nodiscard]] const at::Tensor& get() const noexcept { return tensor_; }
        [[nodiscard]] ruda::dtype dtype() const noexcept { return dtype_; }

    private:
        float_tensor(at::Tensor tensor, ruda::dtype type)
            : tensor_(std::move(tensor)), dtype_(type)
        {
        }
        at::Tensor tensor_;
        ruda::dtype dtype_;
    };

    /// A quantized tensor with a ruda equivalent: per-tensor affine `qint8` with zero point 0
    /// (symmetric), which is ruda's `q8s` with native storage, one f32 scale per tensor.
    class quantized_tensor {
    public:
        /// `errc::invalid_quantization` for any other quantized tensor, naming its scheme,
        /// type and zero point; `errc::invalid_dtype` for a tensor that is not quantized.
        [[nodiscard]] static result<quantized_tensor> wrap(at::Tensor tensor);
        [[nodiscard]] const at::Tensor& get() const noexcept { return tensor_; }

    private:
        explicit quantized_tensor(at::Tensor tensor) : tensor_(std::move(tensor)) {}
        at::Tensor tensor_;
    };

    /// The dtype of every quantized torch tensor ruda reads.
    [[nodiscard]] static ruda::dtype q8s_dtype();

    /// Copies the values (contiguous, in torch's element layout, which is ruda's) on a read
    /// worker, in 4 MiB pieces appended to a buffer that is never zero-filled first; quantized
    /// tensors give their int8 values followed by the f32 scale. A cancelled read completes
    /// promptly with `errc::cancelled`: at once while queued, after the current piece while
    /// copying.
    static boost::asio::awaitable<result<tensor_data>> float_into_data(float_tensor tensor);
    static boost::asio::awaitable<result<tensor_data>> q_into_data(quantized_tensor tensor);

    /// A new CPU tensor holding `data` (f64, f32, f16 or bf16; `errc::invalid_dtype` for
    /// flex32, which torch lacks, and every non-float dtype).
    static result<float_tensor> float_from_data(tensor_data data, const device& device);
    /// A new per-tensor qint8 tensor from `q8s` data with native storage and an f32 scale.
    static result<quantized_tensor> q_from_data(tensor_data data, const device& device);
    /// `tensor.to(target)`; `errc::invalid_dtype` for a target torch lacks.
    static result<float_tensor> float_cast(const float_tensor& tensor, ruda::dtype target);

    static ruda::dtype dtype_of(const float_tensor& tensor) { return tensor.dtype(); }
    static ruda::dtype dtype_of(const quantized_tensor&) { return q8s_dtype(); }
    static std::size_t byte_size(const float_tensor& tensor);
    static std::size_t byte_size(const quantized_tensor& tensor);
    static device float_device(const float_tensor& tensor) { return {tensor.get().device()}; }
    static device q_device(const quantized_tensor& tensor) { return {tensor.get().device()}; }
    /// Reads run on the read workers, so a blocking wait works from any thread but a worker.
    static bool blocking_reads(const device&) { return true; }
    static constexpr std::string_view name() { return "torch"; }

    /// How many read workers copy at once (up to 4, at most the hardware's threads).
    [[nodiscard]] static std::size_t read_workers();
};

static_assert(backend<torch_backend>);

} // namespace ruda
