// Checks that every backend shares: an upload's dtype suits the tensor kind, a cast targets a
// float dtype, and a read has not been cancelled before it starts.
#pragma once

#include <ruda/error.hpp>
#include <ruda/tensor/dtype.hpp>
#include <ruda/tensor/tensor_data.hpp>

#include <boost/asio/awaitable.hpp>

#include <string_view>

namespace ruda::detail {

/// `errc::invalid_dtype` unless `data` holds a float dtype; `backend` names the caller.
[[nodiscard]] result<void> check_float_upload(const tensor_data& data, std::string_view backend);
/// `errc::invalid_dtype` unless `data` holds a quantized dtype.
[[nodiscard]] result<void> check_quantized_upload(const tensor_data& data,
                                                  std::string_view backend);
/// `errc::invalid_dtype` unless `target` is a float dtype.
[[nodiscard]] result<void> check_float_cast(dtype target, std::string_view backend);
/// `data` as a tensor of float dtype `target`: converted, and labelled Flex32 when that is the
/// target (a conversion alone labels Flex32 data as f32).
[[nodiscard]] result<tensor_data> cast_data(const tensor_data& data, dtype target);
/// Whether the awaiting coroutine has been asked to cancel.
boost::asio::awaitable<bool> cancel_requested();

} // namespace ruda::detail
