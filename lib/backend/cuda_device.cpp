// The CUDA device: opened on the primary context, its parts (streams, the staging ring, the
// record pool) made before its worker thread starts, the worker's life, and the public calls.
// One worker thread issues every read's copies and learns of their landing through host
// functions that only post back to it, so all read state is touched on that thread; uploads and
// device staging run on the caller's thread under their own locks. Each part has a file of its
// own: cuda_device_internals.hpp says which.
#include "cuda_device_internals.hpp"

#include <ruda/backend/cuda_device.hpp>
#include <ruda/runtime/blocking_scope.hpp>
#include <ruda/runtime/detail/post_completion.hpp>

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/post.hpp>

#include <algorithm>
#include <array>
#include <iterator>
#include <thread>
#include <utility>
#include <vector>

namespace ruda {
namespace detail {

cuda_device_state::cuda_device_state(std::shared_ptr<const cuda_context> context,
                                     cuda_device::options opts, std::string name)
    : context_(std::move(context)), options_(std::move(opts)), name_(std::move(name)),
      ring_(context_, options_.staging_bytes),
      landings_(
          context_, io_,
          {.landed = [this](std::unique_ptr<cuda_batch> batch) { reads_.landed(std::move(batch)); },
           .context_failed = [this](CUresult status) { reads_.context_failed(status); }}),
      uploads_(context_, shared_parts()), reads_(context_, shared_parts(),
                                                 [this] {
                                                     work_.reset();
                                                     landings_.stop_watching();
                                                 }),
      work_(io_.get_executor())
{
}

result<void> cuda_device_state::create()
{
    BOOST_OUTCOME_TRY(context_->make_current());
    if (options_.pinned_records) {
        auto context = context_;
        record_pool_ = storage_pool::create(
            {.max_cached_bytes = options_.max_cached_record_bytes,
             .source = {.allocate =
                            [context](std::size_t size) {
                                return pinned_memory::allocate(*context, size);
                            },
                        .free = [context](void* memory,
                                          std::size_t) { pinned_memory::free(*context, memory); },
                        .name = "pinned host memory of cuda device " + std::to_string(ordinal())}});
    }
    BOOST_OUTCOME_TRY(reads_.create(record_pool_));
    BOOST_OUTCOME_TRY(uploads_.create());
    BOOST_OUTCOME_TRY(landings_.create(reads_.copy_stream()));
    BOOST_OUTCOME_TRY(ring_.create());
    if (options_.device_staging_bytes > 0) {
        BOOST_OUTCOME_TRY(device_staging_,
                          device_staging::create(context_, options_.device_staging_bytes));
    }
    worker_ = std::thread([this] {
        const no_blocking_scope device_thread;
        if (!context_->make_current()) {
            landings_.worker_lacks_context();
            reads_.worker_lacks_context();
        }
        io_.run();
    });
    return success();
}

cuda_device_state::~cuda_device_state()
{
    if (worker_.joinable()) {
        boost::asio::post(io_, [this] { reads_.shut_down(); });
        worker_.join();
    }
    landings_.wait_for_host_functions();
    // The parts release their streams, events and memory as they go.
}

void cuda_device_state::submit(std::shared_ptr<const cuda_tensor_desc> tensor,
                               boost::asio::any_io_executor work, cuda_read_handler handler)
{
    auto slot = boost::asio::get_associated_cancellation_slot(handler);
    auto op =
        std::make_shared<cuda_read_op>(std::move(tensor), std::move(work), std::move(handler));
    if (slot.is_connected()) {
        // On the reader's thread; the worker does the cancelling. A cancel that comes after
        // the device is gone finds nothing to do.
        slot.assign([device = weak_from_this(),
                     weak_op = std::weak_ptr<cuda_read_op>(op)](boost::asio::cancellation_type) {
            const auto target = weak_op.lock();
            if (const auto self = device.lock(); self && target) {
                boost::asio::post(self->io_,
                                  [raw = self.get(), target] { raw->reads_.cancel(target); });
            }
        });
    }
    boost::asio::post(io_, [this, op] { reads_.start(op); });
}

void submit_cuda_read(std::shared_ptr<const cuda_tensor_desc> tensor,
                      boost::asio::any_io_executor work, cuda_read_handler handler)
{
    if (auto device = tensor->device.lock()) {
        device->submit(std::move(tensor), std::move(work), std::move(handler));
        return;
    }
    post_completion(std::move(work), std::move(handler),
                    result<storage>{error{errc::cancelled, "cuda backend: the device is gone"}});
}

result<std::shared_ptr<const cuda_tensor_desc>> upload_to_cuda(const cuda_device& device,
                                                               std::span<const std::uint8_t> bytes,
                                                               shape dims, dtype type)
{
    if (!device.state()) {
        return error{errc::device_unavailable, "cuda backend: the device is gone"};
    }
    BOOST_OUTCOME_TRY(auto desc, device.state()->uploads().upload(bytes, std::move(dims), type));
    desc.device = device.weak_state();
    return std::make_shared<const cuda_tensor_desc>(std::move(desc));
}

result<void>
prepare_cuda_snapshot(std::span<std::shared_ptr<const cuda_tensor_desc>* const> tensors)
{
    // Grouped by device, in the order the devices first appear.
    std::vector<std::pair<std::shared_ptr<cuda_device_state>,
                          std::vector<std::shared_ptr<const cuda_tensor_desc>*>>>
        by_device;
    for (auto* tensor : tensors) {
        auto device = (*tensor)->device.lock();
        if (!device) {
            continue; // its read will say the device is gone
        }
        auto group = std::find_if(by_device.begin(), by_device.end(),
                                  [&](const auto& g) { return g.first == device; });
        if (group == by_device.end()) {
            by_device.push_back({device, {}});
            group = std::prev(by_device.end());
        }
        group->second.push_back(tensor);
    }
    for (auto& [device, members] : by_device) {
        BOOST_OUTCOME_TRY(device->stage(members));
        BOOST_OUTCOME_TRY(device->group_runs(members));
    }
    return success();
}

} // namespace detail

result<cuda_device> cuda_device::open(options opts)
{
    using namespace detail::cuda;
    BOOST_OUTCOME_TRY(const driver* api, open_driver(opts.driver_library));
    const auto where = "cuda device " + std::to_string(opts.ordinal);
    int count = 0;
    if (const CUresult status = api->cuDeviceGetCount(&count); status != cuda_success) {
        return driver_error(*api, errc::device_unavailable, where + ": cuDeviceGetCount", status);
    }
    if (opts.ordinal < 0 || opts.ordinal >= count) {
        return error{errc::device_unavailable,
                     where + ": the driver sees " + std::to_string(count) + " device(s)"};
    }
    CUdevice device = 0;
    if (const CUresult status = api->cuDeviceGet(&device, opts.ordinal); status != cuda_success) {
        return driver_error(*api, errc::device_unavailable, where + ": cuDeviceGet", status);
    }
    std::array<char, 256> name{};
    if (api->cuDeviceGetName(name.data(), static_cast<int>(name.size()), device) != cuda_success) {
        name[0] = '\0';
    }
    CUcontext context = nullptr;
    if (const CUresult status = api->cuDevicePrimaryCtxRetain(&context, device);
        status != cuda_success) {
        return driver_error(*api, errc::device_unavailable, where + ": cuDevicePrimaryCtxRetain",
                            status);
    }
    auto shared_context =
        std::make_shared<const detail::cuda_context>(*api, device, context, opts.ordinal);
    opts.staging_bytes = std::max(opts.staging_bytes, detail::page_size());
    auto state = std::make_shared<detail::cuda_device_state>(
        std::move(shared_context), std::move(opts), std::string{name.data()});
    BOOST_OUTCOME_TRY(state->create());
    return cuda_device{std::move(state)};
}

const cuda_device::options& cuda_device::get_options() const { return state_->get_options(); }
int cuda_device::ordinal() const { return state_->ordinal(); }
const std::string& cuda_device::name() const { return state_->name(); }
int cuda_device::driver_version() const { return state_->driver_version(); }
cuda_device::counters cuda_device::stats() const { return state_ ? state_->stats() : counters{}; }

storage_pool::statistics cuda_device::record_pool_stats() const
{
    return state_ ? state_->record_pool_stats() : storage_pool::statistics{};
}

result<void> cuda_device::order_after_uploads(cuda_stream stream) const
{
    if (!state_) {
        return error{errc::device_unavailable, "cuda backend: the device is gone"};
    }
    return state_->uploads().order_after_uploads(stream);
}

result<void> cuda_device::upload_into(cuda_device_ptr destination,
                                      std::span<const std::uint8_t> bytes,
                                      cuda_stream consumer) const
{
    if (!state_) {
        return error{errc::device_unavailable, "cuda backend: the device is gone"};
    }
    return state_->uploads().upload_into(destination, bytes, consumer);
}

bool cuda_device::running_in_worker_thread() const { return state_ && state_->in_worker(); }

} // namespace ruda
