// The `ruda::backend` concept: what a device backend provides so that ruda can read its
// gradient tensors into host `tensor_data` and upload them again on restore.
#pragma once

#include <ruda/error.hpp>
#include <ruda/tensor/dtype.hpp>
#include <ruda/tensor/tensor_data.hpp>

#include <boost/asio/awaitable.hpp>

#include <concepts>
#include <cstddef>
#include <span>
#include <string_view>
#include <variant>

namespace ruda {

/// A backend `B` names its device and tensor types and provides static operations:
/// - `float_into_data(float_tensor)`, `q_into_data(quantized_tensor)`: the device read, an
///   `awaitable<result<tensor_data>>` that honours Asio per-operation cancellation (a
///   cancelled read completes promptly with `errc::cancelled`);
/// - `float_from_data(tensor_data, const device&)`, `q_from_data(…)`: the upload;
/// - `float_cast(float_tensor, dtype)`: a float tensor in another float dtype;
/// - `dtype_of(tensor)`, `float_device(tensor)`, `q_device(tensor)`;
/// - `byte_size(tensor)`: how many bytes a read of the tensor produces, known without reading
///   (snapshots use it to bound the bytes in flight and to report progress);
/// - `blocking_reads(device)`: whether a blocking read can ever succeed on that device;
/// - `name()`: for messages.
template <class B>
concept backend =
    requires {
        typename B::device;
        typename B::float_tensor;
        typename B::quantized_tensor;
    } && std::copyable<typename B::float_tensor> &&
    std::copyable<typename B::quantized_tensor> &&
    requires(const typename B::float_tensor& f, const typename B::quantized_tensor& q,
             const tensor_data& data, const typename B::device& device, const dtype& type) {
        {
            B::float_into_data(f)
        } -> std::same_as<boost::asio::awaitable<result<tensor_data>>>;
        {
            B::q_into_data(q)
        } -> std::same_as<boost::asio::awaitable<result<tensor_data>>>;
        { B::float_from_data(data, device) } -> std::same_as<result<typename B::float_tensor>>;
        { B::q_from_data(data, device) } -> std::same_as<result<typename B::quantized_tensor>>;
        { B::float_cast(f, type) } -> std::same_as<result<typename B::float_tensor>>;
        { B::dtype_of(f) } -> std::same_as<dtype>;
        { B::dtype_of(q) } -> std::same_as<dtype>;
        { B::byte_size(f) } -> std::same_as<std::size_t>;
        { B::byte_size(q) } -> std::same_as<std::size_t>;
        { B::float_device(f) } -> std::same_as<typename B::device>;
        { B::q_device(q) } -> std::same_as<typename B::device>;
        { B::blocking_reads(device) } -> std::same_as<bool>;
        { B::name() } -> std::convertible_to<std::string_view>;
    };

/// A backend whose reads complete at once, without waiting for anything (`cpu_backend`), may
/// also offer them as plain calls: `read_now(tensor)` for either kind of tensor. A snapshot
/// then reads every tensor in one pass, with no coroutine per tensor.
template <class B>
concept immediate_reads =
    backend<B> &&
    requires(const typename B::float_tensor& f, const typename B::quantized_tensor& q) {
        { B::read_now(f) } -> std::same_as<result<tensor_data>>;
        { B::read_now(q) } -> std::same_as<result<tensor_data>>;
    };

/// A gradient on backend `B`: a float tensor or a quantized one.
template <backend B>
using tensor_primitive = std::variant<typename B::float_tensor, typename B::quantized_tensor>;

/// A backend that acts when a snapshot is taken, with every tensor it will read, before any
/// read starts: `begin_snapshot(span of tensor_primitive<B>*)` may replace the tensors (with
/// copies fixed at that instant, as `cuda_backend`'s device staging does). A failure fails the
/// snapshot before any read.
template <class B>
concept snapshot_hook =
    backend<B> && requires(std::span<tensor_primitive<B>* const> tensors) {
        { B::begin_snapshot(tensors) } -> std::same_as<result<void>>;
    };

/// The dtype of either alternative.
template <backend B>
[[nodiscard]] dtype dtype_of(const tensor_primitive<B>& tensor)
{
    return std::visit([](const auto& t) { return B::dtype_of(t); }, tensor);
}

/// The bytes a read of either alternative produces.
template <backend B>
[[nodiscard]] std::size_t byte_size(const tensor_primitive<B>& tensor)
{
    return std::visit([](const auto& t) { return B::byte_size(t); }, tensor);
}

/// The device read of either alternative.
template <backend B>
[[nodiscard]] boost::asio::awaitable<result<tensor_data>>
into_data(const tensor_primitive<B>& tensor)
{
    if (const auto* float_tensor = std::get_if<typename B::float_tensor>(&tensor)) {
        return B::float_into_data(*float_tensor);
    }
    return B::q_into_data(std::get<typename B::quantized_tensor>(tensor));
}

/// The device either alternative lives on.
template <backend B>
[[nodiscard]] typename B::device device_of(const tensor_primitive<B>& tensor)
{
    if (const auto* float_tensor = std::get_if<typename B::float_tensor>(&tensor)) {
        return B::float_device(*float_tensor);
    }
    return B::q_device(std::get<typename B::quantized_tensor>(tensor));
}

} // namespace ruda
