// The async backend's reads go through the device queue; uploads and casts are immediate.
#include <ruda/backend/async_backend.hpp>
#include <ruda/backend/detail/backend_checks.hpp>

#include <boost/asio/use_awaitable.hpp>

#include <utility>

namespace ruda {
boost::asio::awaitable<result<tensor_data>> async_backend::float_into_data(float_tensor tensor)
{
    return tensor.device().async_read(tensor, boost::asio::use_awaitable);
}

boost::asio::awaitable<result<tensor_data>> async_backend::q_into_data(quantized_tensor tensor)
{
    return tensor.device().async_read(tensor, boost::asio::use_awaitable);
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
