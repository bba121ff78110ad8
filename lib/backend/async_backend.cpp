// The async backend's reads go through the device queue; uploads and casts are immediate.
#include <ruda/backend/async_backend.hpp>
#include <ruda/backend/detail/backend_checks.hpp>
#include <ruda/runtime/error_mapping.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <string>
#include <utility>

namespace ruda {
namespace {

boost::asio::awaitable<result<tensor_data>>
read_on_device(std::weak_ptr<detail::device_state> device,
               std::shared_ptr<const tensor_data> source)
{
    const std::size_t bytes = source->bytes().size();
    auto [ec, data] = co_await async_device_read(std::move(device), std::move(source),
                                                 boost::asio::as_tuple(boost::asio::use_awaitable));
    if (std::error_code{ec} == errc::read_failed) {
        co_return error{errc::read_failed, "async device: read of " + std::to_string(bytes) +
                                               " bytes failed (injected fault)"};
    }
    if (ec) {
        co_return error_from_code(ec, "async device: read of " + std::to_string(bytes) + " bytes");
    }
    co_return std::move(data);
}

} // namespace

boost::asio::awaitable<result<tensor_data>> async_backend::float_into_data(float_tensor tensor)
{
    return read_on_device(tensor.device_state(), tensor.storage().storage());
}

boost::asio::awaitable<result<tensor_data>> async_backend::q_into_data(quantized_tensor tensor)
{
    return read_on_device(tensor.device_state(), tensor.storage().storage());
}

result<async_backend::float_tensor> async_backend::float_from_data(tensor_data data,
                                                                   const device& device)
{
    BOOST_OUTCOME_TRY(detail::check_float_upload(data, name()));
    return float_tensor{host_tensor<async_float_tag>{std::move(data)}, device};
}

result<async_backend::quantized_tensor> async_backend::q_from_data(tensor_data data,
                                                                   const device& device)
{
    BOOST_OUTCOME_TRY(detail::check_quantized_upload(data, name()));
    return quantized_tensor{host_tensor<async_quantized_tag>{std::move(data)}, device};
}

result<async_backend::float_tensor> async_backend::float_cast(const float_tensor& tensor,
                                                              dtype target)
{
    BOOST_OUTCOME_TRY(detail::check_float_cast(target, name()));
    if (dtype_of(tensor) == target) {
        return tensor;
    }
    BOOST_OUTCOME_TRY(auto converted, detail::cast_data(tensor.storage().data(), target));
    return float_tensor{host_tensor<async_float_tag>{std::move(converted)},
                        float_device(tensor)};
}

} // namespace ruda
