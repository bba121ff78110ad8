// The host backend: tensors are shared, immutable host storages and reads complete at once.
// It holds all five float dtypes (f64, f32, flex32, f16, bf16) and quantized tensors.
#pragma once

#include <ruda/backend/backend.hpp>
#include <ruda/backend/host_tensor.hpp>

#include <cstddef>
#include <string_view>

namespace ruda {

struct cpu_backend {
    /// The host; every instance is the same device.
    struct device {
        friend bool operator==(const device&, const device&) = default;
    };
    using float_tensor = host_tensor<struct cpu_float_tag>;
    using quantized_tensor = host_tensor<struct cpu_quantized_tag>;

    /// The tensor's data, sharing its immutable bytes (no copy: a snapshot costs the same for
    /// 4 bytes and 4 GiB); `errc::cancelled` if the awaiting coroutine was cancelled.
    static boost::asio::awaitable<result<tensor_data>> float_into_data(float_tensor tensor);
    static boost::asio::awaitable<result<tensor_data>> q_into_data(quantized_tensor tensor);
    /// The same reads as plain calls (`immediate_reads`): they never wait and never fail.
    static result<tensor_data> read_now(const float_tensor& tensor) { return tensor.data(); }
    static result<tensor_data> read_now(const quantized_tensor& tensor) { return tensor.data(); }

    /// Uploads float data (any of the five float dtypes); `errc::invalid_dtype` otherwise.
    static result<float_tensor> float_from_data(tensor_data data, const device& device);
    /// Uploads quantized data; `errc::invalid_dtype` unless its dtype is quantized.
    static result<quantized_tensor> q_from_data(tensor_data data, const device& device);
    /// The tensor converted to another float dtype (a new storage).
    static result<float_tensor> float_cast(const float_tensor& tensor, dtype target);

    static dtype dtype_of(const float_tensor& tensor) { return tensor.get_dtype(); }
    static dtype dtype_of(const quantized_tensor& tensor) { return tensor.get_dtype(); }
    static std::size_t byte_size(const float_tensor& tensor) { return tensor.byte_size(); }
    static std::size_t byte_size(const quantized_tensor& tensor) { return tensor.byte_size(); }
    static device float_device(const float_tensor&) { return {}; }
    static device q_device(const quantized_tensor&) { return {}; }
    static bool blocking_reads(const device&) { return true; }
    static constexpr std::string_view name() { return "cpu"; }
};

static_assert(immediate_reads<cpu_backend>);

} // namespace ruda
