// The pinned staging ring: host memory registered with the driver that uploads' bytes, and
// reads into plain (unpinned) records, pass through on their way to or from the device. The
// uploading threads wait in it for room; the worker never waits. Once the context has failed
// no piece in it will land, so the failure wakes every waiter and is what each later call
// reports. Internal to the CUDA device.
#pragma once

#include "cuda_context.hpp"
#include "staging_ring.hpp"

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace ruda::detail {

class pinned_ring {
public:
    pinned_ring(std::shared_ptr<const cuda_context> context, std::size_t capacity)
        : context_(std::move(context)), ring_(capacity)
    {
    }
    ~pinned_ring()
    {
        if (memory_ != nullptr) {
            pinned_memory::free(*context_, memory_);
        }
    }
    pinned_ring(const pinned_ring&) = delete;
    pinned_ring& operator=(const pinned_ring&) = delete;

    // Pins the ring's memory.
    result<void> create()
    {
        memory_ = static_cast<std::uint8_t*>(pinned_memory::allocate(*context_, capacity()));
        if (memory_ == nullptr) {
            return error{errc::allocation_too_large,
                         "cuda device " + std::to_string(context_->ordinal()) + ": cannot pin " +
                             std::to_string(capacity()) + " bytes of staging memory"};
        }
        return success();
    }

    [[nodiscard]] std::size_t capacity() const noexcept { return ring_.capacity(); }
    [[nodiscard]] std::uint8_t* at(std::size_t offset) const noexcept { return memory_ + offset; }

    // Any thread but the worker: the offset of `bytes` of room once there is some, or the
    // context's failure.
    result<std::size_t> acquire(std::size_t bytes)
    {
        std::unique_lock lock{mutex_};
        std::optional<std::size_t> offset;
        space_.wait(lock, [&] {
            offset = fault_ ? std::nullopt : ring_.allocate(bytes);
            return fault_ || offset;
        });
        if (fault_) {
            return *fault_;
        }
        return *offset;
    }

    // The worker: room for `bytes` now, or none.
    std::optional<std::size_t> try_acquire(std::size_t bytes)
    {
        const std::lock_guard lock{mutex_};
        return ring_.allocate(bytes);
    }

    void release(std::size_t offset)
    {
        {
            const std::lock_guard lock{mutex_};
            ring_.release(offset);
        }
        space_.notify_all();
    }

    // The context failed: the first failure is kept, returned, and reported by every waiter
    // and every later acquire.
    error fail(error failure)
    {
        {
            const std::lock_guard lock{mutex_};
            if (!fault_) {
                fault_ = std::move(failure);
            }
            failure = *fault_;
        }
        space_.notify_all();
        return failure;
    }

    [[nodiscard]] std::optional<error> fault() const
    {
        const std::lock_guard lock{mutex_};
        return fault_;
    }

private:
    std::shared_ptr<const cuda_context> context_;
    std::uint8_t* memory_ = nullptr;
    mutable std::mutex mutex_;
    std::condition_variable space_;
    staging_ring ring_;
    std::optional<error> fault_;
};

} // namespace ruda::detail
