// The host backend's reads, uploads and casts.
#include <ruda/backend/cpu_backend.hpp>
#include <ruda/backend/detail/backend_checks.hpp>

#include <utility>

namespace ruda {
namespace {

boost::asio::awaitable<result<tensor_data>> read_host(std::shared_ptr<const tensor_data> storage)
{
    // Not inside the `if`: GCC 12 miscompiles a co_await in a condition.
    const bool cancelled = co_await detail::cancel_requested();
    if (cancelled) {
        co_return error{errc::cancelled, "cpu backend: read cancelled"};
    }
    // The tensor can never change, so sharing its bytes is a point-in-time snapshot: no copy.
    co_return *storage;
}

} // namespace

boost::asio::awaitable<result<tensor_data>> cpu_backend::float_into_data(float_tensor tensor)
{
    return read_host(tensor.storage());
}

boost::asio::awaitable<result<tensor_data>> cpu_backend::q_into_data(quantized_tensor tensor)
{
    return read_host(tensor.storage());
}

result<cpu_backend::float_tensor> cpu_backend::float_from_data(tensor_data data, const device&)
{
    BOOST_OUTCOME_TRY(detail::check_float_upload(data, name()));
    return float_tensor{std::move(data)};
}

result<cpu_backend::quantized_tensor> cpu_backend::q_from_data(tensor_data data, const device&)
{
    BOOST_OUTCOME_TRY(detail::check_quantized_upload(data, name()));
    return quantized_tensor{std::move(data)};
}

result<cpu_backend::float_tensor> cpu_backend::float_cast(const float_tensor& tensor,
                                                          dtype target)
{
    BOOST_OUTCOME_TRY(detail::check_float_cast(target, name()));
    if (tensor.get_dtype() == target) {
        return tensor;
    }
    BOOST_OUTCOME_TRY(auto converted, detail::cast_data(tensor.data(), target));
    return float_tensor{std::move(converted)};
}

} // namespace ruda
