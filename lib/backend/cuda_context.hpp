// The device's primary context and the memory that needs it: pinned host memory and device
// memory ruda allocated, each released through the context it came from. Internal to the CUDA
// device.
#pragma once

#include <ruda/backend/detail/cuda_driver.hpp>
#include <ruda/error.hpp>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdlib>
#include <memory>
#include <string>

namespace ruda::detail {

using namespace cuda;

inline constexpr unsigned host_register_portable = 0x1; // CU_MEMHOSTREGISTER_PORTABLE

inline std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

inline std::size_t page_size()
{
    static const auto size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    return size;
}

// The device's primary context (shared with the CUDA runtime and PyTorch), released when
// nothing that needs it is left: the device, its allocations, its pinned buffers.
class cuda_context {
public:
    cuda_context(const driver& api, CUdevice device, CUcontext context, int ordinal)
        : api_(api), device_(device), context_(context), ordinal_(ordinal)
    {
    }
    ~cuda_context() { api_.cuDevicePrimaryCtxRelease(device_); }
    cuda_context(const cuda_context&) = delete;
    cuda_context& operator=(const cuda_context&) = delete;

    [[nodiscard]] const driver& api() const noexcept { return api_; }
    [[nodiscard]] int ordinal() const noexcept { return ordinal_; }

    // Driver calls act on the calling thread's current context.
    result<void> make_current() const
    {
        return check(api_.cuCtxSetCurrent(context_), errc::device_unavailable, "cuCtxSetCurrent");
    }

    // "cuda device 0: <what>: CUDA_ERROR_… (…)" for a failed call.
    [[nodiscard]] error failure(CUresult status, errc code, const std::string& what) const
    {
        return driver_error(api_, code, "cuda device " + std::to_string(ordinal_) + ": " + what,
                            status);
    }
    [[nodiscard]] result<void> check(CUresult status, errc code, const std::string& what) const
    {
        if (status == cuda_success) {
            return success();
        }
        return failure(status, code, what);
    }

private:
    const driver& api_;
    CUdevice device_;
    CUcontext context_;
    int ordinal_;
};

// A device address as messages write it: 0x7f3a00000000.
inline std::string hex(CUdeviceptr address)
{
    std::array<char, 2 + 16> digits{'0', 'x'};
    const auto end = std::to_chars(digits.data() + 2, digits.data() + digits.size(), address, 16);
    return {digits.data(), end.ptr};
}

// Page-aligned host memory registered with the driver (pinned), so copies to and from it run
// at the link's speed. Registering is ten times cheaper than cuMemAllocHost.
struct pinned_memory {
    static void* allocate(const cuda_context& context, std::size_t size)
    {
        const std::size_t bytes = round_up(std::max<std::size_t>(size, 1), page_size());
        void* memory = std::aligned_alloc(page_size(), bytes);
        if (memory == nullptr) {
            return nullptr;
        }
        if (!context.make_current() ||
            context.api().cuMemHostRegister(memory, bytes, host_register_portable) !=
                cuda_success) {
            std::free(memory);
            return nullptr;
        }
        return memory;
    }
    static void free(const cuda_context& context, void* memory)
    {
        if (context.make_current()) {
            context.api().cuMemHostUnregister(memory);
        }
        std::free(memory);
    }
};

// Device memory ruda allocated for an uploaded tensor.
struct device_allocation {
    device_allocation(std::shared_ptr<const cuda_context> owner, CUdeviceptr at)
        : context(std::move(owner)), address(at)
    {
    }
    ~device_allocation()
    {
        if (context->make_current()) {
            context->api().cuMemFree(address);
        }
    }
    device_allocation(const device_allocation&) = delete;
    device_allocation& operator=(const device_allocation&) = delete;

    std::shared_ptr<const cuda_context> context;
    CUdeviceptr address;
};

} // namespace ruda::detail
