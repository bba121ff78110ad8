// The backend of `async_device`: tensors live on a device (weakly referred to) and every read
// goes through the device's transfer queue, completing later on the reader's executor.
#pragma once

#include <ruda/backend/async_device.hpp>
#include <ruda/backend/backend.hpp>
#include <ruda/backend/host_tensor.hpp>

#include <cstddef>
#include <string_view>

namespace ruda {

struct async_backend {
    using device = async_device;

    /// A tensor in device memory: an immutable shared storage plus the device it lives on.
    template <class Tag>
    using tensor = async_device_tensor<Tag>;
    using float_tensor = tensor<struct async_float_tag>;
    using quantized_tensor = tensor<struct async_quantized_tag>;

    /// Queued on the tensor's device; `errc::cancelled` when cancelled, when the device shuts
    /// down first or is already gone; `errc::read_failed` for an injected fault.
    static boost::asio::awaitable<result<tensor_data>> float_into_data(float_tensor tensor);
    static boost::asio::awaitable<result<tensor_data>> q_into_data(quantized_tensor tensor);

    static result<float_tensor> float_from_data(tensor_data data, const device& device);
    static result<quantized_tensor> q_from_data(tensor_data data, const device& device);
    static result<float_tensor> float_cast(const float_tensor& tensor, dtype target);

    static dtype dtype_of(const float_tensor& t) { return t.storage().get_dtype(); }
    static dtype dtype_of(const quantized_tensor& t) { return t.storage().get_dtype(); }
    static std::size_t byte_size(const float_tensor& t) { return t.storage().byte_size(); }
    static std::size_t byte_size(const quantized_tensor& t) { return t.storage().byte_size(); }
    static device float_device(const float_tensor& t) { return t.device(); }
    static device q_device(const quantized_tensor& t) { return t.device(); }
    static bool blocking_reads(const device& d) { return d.blocking_reads(); }
    static constexpr std::string_view name() { return "async"; }
};

static_assert(backend<async_backend>);

} // namespace ruda
