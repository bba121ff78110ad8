// The inside of a `cuda_device`, for the backend's reads, uploads and staging. Internal.
#pragma once

#include <ruda/backend/cuda_backend.hpp>
#include <ruda/tensor/storage.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>

#include <memory>
#include <span>
#include <vector>

namespace ruda::detail {

using cuda_read_handler = boost::asio::any_completion_handler<void(result<storage>)>;

/// Queues a read of `tensor` on its device; completion is posted to `work` (from
/// `track_work`), never run inline. A device that is gone completes it with `errc::cancelled`.
void submit_cuda_read(std::shared_ptr<const cuda_tensor_desc> tensor,
                      boost::asio::any_io_executor work, cuda_read_handler handler);

/// Device memory ruda owns, holding `bytes`, queued on `device`'s upload stream.
result<std::shared_ptr<const cuda_tensor_desc>>
upload_to_cuda(const cuda_device& device, std::span<const std::uint8_t> bytes, shape dims,
               dtype type);

/// What a snapshot does when it is taken, device by device: every borrowed tensor on a device
/// with a staging buffer is replaced by its staged copy, then runs of adjacent small tensors
/// are marked to be read by one copy each.
result<void>
prepare_cuda_snapshot(std::span<std::shared_ptr<const cuda_tensor_desc>* const> tensors);

} // namespace ruda::detail
