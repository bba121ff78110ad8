// The entry to an `async_device`'s transfer queue, behind `async_device::async_read`.
#pragma once

#include <ruda/error.hpp>
#include <ruda/tensor/tensor_data.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>

#include <memory>

namespace ruda::detail {

class device_state;

using read_handler = boost::asio::any_completion_handler<void(result<tensor_data>)>;

// Queues a read of `source` on `device` (or completes it with operation_aborted when the
// device is gone, with unsupported_device when the tensor lives on another device).
// Completion is posted to `handler_executor`, never run inline.
void submit_read(const std::weak_ptr<device_state>& device,
                 const std::weak_ptr<device_state>& tensor_device,
                 std::shared_ptr<const tensor_data> source,
                 boost::asio::any_io_executor handler_executor, read_handler handler);

} // namespace ruda::detail
