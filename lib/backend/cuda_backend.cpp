// The CUDA backend: borrowed and uploaded tensors, reads through the device's worker.
#include <ruda/backend/cuda_backend.hpp>

#include <ruda/backend/detail/backend_checks.hpp>
#include <ruda/backend/detail/cuda_device_state.hpp>
#include <ruda/runtime/detail/post_completion.hpp>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <string>
#include <utility>
#include <vector>

namespace ruda {
namespace {

result<std::shared_ptr<const detail::cuda_tensor_desc>>
borrowed(const cuda_device& device, cuda_device_ptr address, std::size_t bytes, shape dims,
         dtype type, cuda_stream producer, std::shared_ptr<const void> keep_alive)
{
    if (!device.state()) {
        return error{errc::device_unavailable, "cuda backend: the device is gone"};
    }
    auto desc = std::make_shared<detail::cuda_tensor_desc>();
    desc->device = device.weak_state();
    desc->address = address;
    desc->bytes = bytes;
    desc->dims = std::move(dims);
    desc->type = type;
    desc->producer = producer;
    desc->borrowed = true;
    desc->keep_alive = std::move(keep_alive);
    return std::shared_ptr<const detail::cuda_tensor_desc>{std::move(desc)};
}

boost::asio::awaitable<result<tensor_data>>
read(std::shared_ptr<const detail::cuda_tensor_desc> tensor)
{
    auto bytes = co_await boost::asio::async_initiate<const boost::asio::use_awaitable_t<>&,
                                                      void(result<storage>)>(
        [](auto handler, std::shared_ptr<const detail::cuda_tensor_desc> t) {
            boost::asio::any_io_executor ex = boost::asio::get_associated_executor(handler);
            detail::submit_cuda_read(std::move(t), detail::track_work(std::move(ex)),
                                     detail::cuda_read_handler{std::move(handler)});
        },
        boost::asio::use_awaitable, tensor);
    if (!bytes) {
        co_return std::move(bytes).error();
    }
    co_return tensor_data{std::move(bytes).value(), tensor->dims, tensor->type};
}

// The tensor's byte count, checked against its shape.
result<std::size_t> float_bytes(const shape& dims, dtype type)
{
    BOOST_OUTCOME_TRY(const std::size_t count, checked_num_elements(dims));
    if (type.size() != 0 && count > SIZE_MAX / type.size()) {
        return error{errc::shape_overflow, "cuda backend: " + std::to_string(count) + " " +
                                               to_string(type) + " values overflow a byte count"};
    }
    return count * type.size();
}

} // namespace

result<cuda_backend::float_tensor>
cuda_backend::borrow(const cuda_device& device, cuda_device_ptr address, ruda::shape dims,
                     ruda::dtype type, cuda_stream producer, std::shared_ptr<const void> keep_alive)
{
    if (!type.is_float()) {
        return error{errc::invalid_dtype,
                     "cuda backend: a float tensor cannot hold dtype " + to_string(type)};
    }
    BOOST_OUTCOME_TRY(const std::size_t bytes, float_bytes(dims, type));
    BOOST_OUTCOME_TRY(auto desc, borrowed(device, address, bytes, std::move(dims), type, producer,
                                          std::move(keep_alive)));
    return float_tensor{std::move(desc)};
}

result<cuda_backend::quantized_tensor>
cuda_backend::borrow_quantized(const cuda_device& device, cuda_device_ptr address,
                               std::size_t bytes, ruda::shape dims, ruda::dtype type,
                               cuda_stream producer, std::shared_ptr<const void> keep_alive)
{
    if (!type.is_quantized()) {
        return error{errc::invalid_dtype,
                     "cuda backend: a quantized tensor cannot hold dtype " + to_string(type)};
    }
    BOOST_OUTCOME_TRY(auto desc, borrowed(device, address, bytes, std::move(dims), type, producer,
                                          std::move(keep_alive)));
    return quantized_tensor{std::move(desc)};
}

boost::asio::awaitable<result<tensor_data>> cuda_backend::float_into_data(float_tensor tensor)
{
    return read(tensor.desc());
}

boost::asio::awaitable<result<tensor_data>> cuda_backend::q_into_data(quantized_tensor tensor)
{
    return read(tensor.desc());
}

result<cuda_backend::float_tensor> cuda_backend::float_from_data(tensor_data data,
                                                                 const device& device)
{
    BOOST_OUTCOME_TRY(detail::check_float_upload(data, name()));
    BOOST_OUTCOME_TRY(const std::size_t bytes, float_bytes(data.shape(), data.dtype()));
    if (bytes != data.bytes().size()) {
        return error{errc::byte_count_mismatch,
                     "cuda backend: " + std::to_string(data.bytes().size()) + " bytes for " +
                         std::to_string(bytes) + " bytes of " + to_string(data.dtype()) +
                         " values"};
    }
    BOOST_OUTCOME_TRY(auto desc,
                      detail::upload_to_cuda(device, data.bytes(), data.shape(), data.dtype()));
    return float_tensor{std::move(desc)};
}

result<cuda_backend::quantized_tensor> cuda_backend::q_from_data(tensor_data data,
                                                                 const device& device)
{
    BOOST_OUTCOME_TRY(detail::check_quantized_upload(data, name()));
    BOOST_OUTCOME_TRY(auto desc,
                      detail::upload_to_cuda(device, data.bytes(), data.shape(), data.dtype()));
    return quantized_tensor{std::move(desc)};
}

result<cuda_backend::float_tensor> cuda_backend::float_cast(const float_tensor& tensor,
                                                            ruda::dtype target)
{
    BOOST_OUTCOME_TRY(detail::check_float_cast(target, name()));
    if (tensor.dtype() == target) {
        return tensor;
    }
    return error{errc::invalid_dtype, "cuda backend: cannot cast " + to_string(tensor.dtype()) +
                                          " to " + to_string(target) +
                                          " on the device; upload the data in " +
                                          to_string(target) + " instead"};
}

result<void>
cuda_backend::begin_snapshot(std::span<std::variant<float_tensor, quantized_tensor>* const> tensors)
{
    // The descriptions, swapped for their staged copies, then put back into the tensors.
    std::vector<std::shared_ptr<const detail::cuda_tensor_desc>> descs;
    descs.reserve(tensors.size());
    for (const auto* tensor : tensors) {
        descs.push_back(std::visit([](const auto& t) { return t.desc(); }, *tensor));
    }
    std::vector<std::shared_ptr<const detail::cuda_tensor_desc>*> pointers;
    pointers.reserve(descs.size());
    for (auto& desc : descs) {
        pointers.push_back(&desc);
    }
    BOOST_OUTCOME_TRY(detail::prepare_cuda_snapshot(pointers));
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        std::visit([&](auto& t) { t = std::decay_t<decltype(t)>{std::move(descs[i])}; },
                   *tensors[i]);
    }
    return success();
}

} // namespace ruda
