// The dtype checks of uploads and casts, and the cancellation check of reads.
#include <ruda/backend/detail/backend_checks.hpp>

#include <boost/asio/this_coro.hpp>

#include <string>

namespace ruda::detail {

result<void> check_float_upload(const tensor_data& data, std::string_view backend)
{
    if (!data.dtype().is_float()) {
        return error{errc::invalid_dtype, std::string{backend} +
                                              " backend: a float tensor cannot hold dtype " +
                                              to_string(data.dtype())};
    }
    return success();
}

result<void> check_quantized_upload(const tensor_data& data, std::string_view backend)
{
    if (!data.dtype().is_quantized()) {
        return error{errc::invalid_dtype, std::string{backend} +
                                              " backend: a quantized tensor cannot hold dtype " +
                                              to_string(data.dtype())};
    }
    return success();
}

result<void> check_float_cast(dtype target, std::string_view backend)
{
    if (!target.is_float()) {
        return error{errc::invalid_dtype, std::string{backend} +
                                              " backend: cannot cast a float tensor to " +
                                              to_string(target)};
    }
    return success();
}

result<tensor_data> cast_data(const tensor_data& data, dtype target)
{
    BOOST_OUTCOME_TRY(auto converted, data.convert(target));
    if (target == dtype::flex32()) {
        auto dims = converted.shape();
        return tensor_data{std::move(converted).into_storage(), std::move(dims), target};
    }
    return converted;
}

boost::asio::awaitable<bool> cancel_requested()
{
    const auto state = co_await boost::asio::this_coro::cancellation_state;
    co_return state.cancelled() != boost::asio::cancellation_type::none;
}

} // namespace ruda::detail
