// Device staging: the buffer, its stream and events, and the copies a snapshot's call makes.
#include "cuda_device_staging.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace ruda::detail {

namespace {

constexpr std::size_t device_alignment = 256;

} // namespace

// A staged copy's hold on its part of the buffer.
struct device_staging::lease {
    lease(std::shared_ptr<device_staging> owner, std::size_t at)
        : staging(std::move(owner)), offset(at)
    {
    }
    ~lease()
    {
        const std::lock_guard lock{staging->mutex_};
        staging->ring_.release(offset);
    }
    lease(const lease&) = delete;
    lease& operator=(const lease&) = delete;

    std::shared_ptr<device_staging> staging;
    std::size_t offset;
};

device_staging::device_staging(std::shared_ptr<const cuda_context> context, std::size_t bytes)
    : context_(std::move(context)), ring_(bytes)
{
}

result<std::shared_ptr<device_staging>>
device_staging::create(std::shared_ptr<const cuda_context> context, std::size_t bytes)
{
    const driver& api = context->api();
    std::shared_ptr<device_staging> made{new device_staging(context, bytes)};
    BOOST_OUTCOME_TRY(context->check(api.cuStreamCreate(&made->stream_, stream_non_blocking),
                                     errc::device_unavailable, "cuStreamCreate"));
    for (CUevent* event : {&made->begin_event_, &made->end_event_}) {
        BOOST_OUTCOME_TRY(context->check(api.cuEventCreate(event, event_disable_timing),
                                         errc::device_unavailable, "cuEventCreate"));
    }
    BOOST_OUTCOME_TRY(context->check(api.cuMemAlloc(&made->base_, bytes),
                                     errc::allocation_too_large,
                                     "cuMemAlloc of " + std::to_string(bytes) +
                                         " bytes of device staging"));
    return made;
}

device_staging::~device_staging()
{
    if (!context_->make_current()) {
        return;
    }
    const driver& api = context_->api();
    if (base_ != 0) {
        api.cuMemFree(base_);
    }
    for (CUevent event : {begin_event_, end_event_}) {
        if (event != nullptr) {
            api.cuEventDestroy(event);
        }
    }
    if (stream_ != nullptr) {
        api.cuStreamDestroy(stream_);
    }
}

result<void>
device_staging::stage(std::span<std::shared_ptr<const cuda_tensor_desc>* const> tensors,
                      std::atomic<std::uint64_t>& staged, std::atomic<std::uint64_t>& unstaged)
{
    const driver& api = context_->api();
    BOOST_OUTCOME_TRY(context_->make_current());
    const std::lock_guard lock{mutex_};
    std::vector<CUstream> producers;
    for (const auto* tensor : tensors) {
        if (!(*tensor)->borrowed) {
            continue;
        }
        const auto producer = static_cast<CUstream>((*tensor)->producer);
        if (std::find(producers.begin(), producers.end(), producer) == producers.end()) {
            producers.push_back(producer);
            BOOST_OUTCOME_TRY(context_->check(api.cuEventRecord(begin_event_, producer),
                                              errc::read_failed, "cuEventRecord"));
            BOOST_OUTCOME_TRY(context_->check(api.cuStreamWaitEvent(stream_, begin_event_, 0),
                                              errc::read_failed, "cuStreamWaitEvent"));
        }
    }
    for (auto* tensor : tensors) {
        if (!(*tensor)->borrowed) {
            continue;
        }
        const cuda_tensor_desc& source = **tensor;
        const auto at =
            ring_.allocate(round_up(std::max<std::size_t>(source.bytes, 1), device_alignment));
        if (!at) {
            unstaged.fetch_add(1);
            continue;
        }
        const CUdeviceptr copy = base_ + *at;
        const CUresult status = api.cuMemcpyDtoDAsync(copy, source.address, source.bytes, stream_);
        if (status != cuda_success) {
            ring_.release(*at);
            return context_->failure(status, errc::read_failed,
                                     "cuMemcpyDtoDAsync of " + std::to_string(source.bytes) +
                                         " bytes into device staging");
        }
        // Released when the staged copy's last handle goes, after its read has landed.
        auto hold = std::make_shared<const lease>(shared_from_this(), *at);
        auto copied = std::make_shared<cuda_tensor_desc>(source);
        copied->address = copy;
        copied->producer = stream_;
        copied->borrowed = false;
        copied->keep_alive = std::move(hold);
        *tensor = std::move(copied);
        staged.fetch_add(1);
    }
    BOOST_OUTCOME_TRY(context_->check(api.cuEventRecord(end_event_, stream_), errc::read_failed,
                                      "cuEventRecord"));
    for (CUstream producer : producers) {
        BOOST_OUTCOME_TRY(context_->check(api.cuStreamWaitEvent(producer, end_event_, 0),
                                          errc::read_failed, "cuStreamWaitEvent"));
    }
    return success();
}

} // namespace ruda::detail
