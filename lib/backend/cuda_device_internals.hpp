// The inside of a `cuda_device`: the context, the worker thread that owns every read, and the
// parts it is made of, each in a file of its own: the pinned staging ring
// (cuda_pinned_ring.hpp), landings and the watch for a failed context (cuda_landings.*), reads
// (cuda_reads.*), uploads (cuda_uploads.*), device staging (cuda_device_staging.*) and runs of
// small tensors (cuda_runs.*); what reads and uploads share is cuda_shared_parts.hpp, what is in
// flight cuda_in_flight.hpp. Opened, run and closed in cuda_device.cpp. Internal to the CUDA
// device.
#pragma once

#include "cuda_context.hpp"
#include "cuda_device_staging.hpp"
#include "cuda_in_flight.hpp"
#include "cuda_landings.hpp"
#include "cuda_pinned_ring.hpp"
#include "cuda_reads.hpp"
#include "cuda_runs.hpp"
#include "cuda_shared_parts.hpp"
#include "cuda_uploads.hpp"

#include <ruda/backend/cuda_device.hpp>
#include <ruda/backend/detail/cuda_device_state.hpp>
#include <ruda/backend/detail/cuda_driver.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <thread>

namespace ruda::detail {

class cuda_device_state : public std::enable_shared_from_this<cuda_device_state> {
public:
    cuda_device_state(std::shared_ptr<const cuda_context> context, cuda_device::options opts,
                      std::string name);

    // Everything that can fail, before the worker starts.
    result<void> create();

    ~cuda_device_state();
    cuda_device_state(const cuda_device_state&) = delete;
    cuda_device_state& operator=(const cuda_device_state&) = delete;

    [[nodiscard]] const cuda_device::options& get_options() const noexcept { return options_; }
    [[nodiscard]] int ordinal() const noexcept { return context_->ordinal(); }
    [[nodiscard]] const std::string& name() const noexcept { return name_; }
    [[nodiscard]] int driver_version() const noexcept { return context_->api().version; }
    [[nodiscard]] bool in_worker() const { return io_.get_executor().running_in_this_thread(); }
    [[nodiscard]] cuda_device::counters stats() const { return tally_.snapshot(); }

    [[nodiscard]] storage_pool::statistics record_pool_stats() const
    {
        return record_pool_ ? record_pool_->stats() : storage_pool::statistics{};
    }

    // Any thread: queues a read of `tensor` on the worker.
    void submit(std::shared_ptr<const cuda_tensor_desc> tensor, boost::asio::any_io_executor work,
                cuda_read_handler handler);

    // Any thread but the worker.
    cuda_uploads& uploads() noexcept { return uploads_; }

    // Any thread: the borrowed tensors among `tensors` copied into the device staging buffer.
    result<void> stage(std::span<std::shared_ptr<const cuda_tensor_desc>* const> tensors)
    {
        return device_staging_ ? device_staging_->stage(tensors, tally_.staged, tally_.unstaged)
                               : success();
    }

    // Any thread: runs of adjacent small tensors, each read by one copy into a pinned buffer.
    result<void> group_runs(std::span<std::shared_ptr<const cuda_tensor_desc>* const> tensors)
    {
        if (!options_.pinned_records) {
            return success();
        }
        return group_cuda_runs(*context_, tensors, piece_bytes());
    }

private:
    [[nodiscard]] std::size_t piece_bytes() const
    {
        return std::clamp<std::size_t>(options_.piece_bytes, 1, options_.staging_bytes);
    }

    cuda_shared_parts shared_parts()
    {
        return {.ring = ring_,
                .landings = landings_,
                .tally = tally_,
                .worker = io_,
                .piece_bytes = piece_bytes()};
    }

    std::shared_ptr<const cuda_context> context_;
    cuda_device::options options_;
    std::string name_;
    cuda_tally tally_;

    mutable boost::asio::io_context io_{1}; // the worker's
    pinned_ring ring_;
    cuda_landings landings_;
    cuda_uploads uploads_;
    cuda_reads reads_;
    std::shared_ptr<device_staging> device_staging_;
    std::shared_ptr<storage_pool> record_pool_;
    boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
    std::thread worker_; // started last, by create()
};

} // namespace ruda::detail
