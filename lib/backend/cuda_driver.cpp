// Opening the CUDA driver at run time: dlopen, one dlsym per entry point, cuInit.
#include <ruda/backend/detail/cuda_driver.hpp>

#include <dlfcn.h>

#include <map>
#include <memory>
#include <mutex>

namespace ruda::detail::cuda {
namespace {

error unavailable(const std::string& library, const std::string& why)
{
    return error{errc::device_unavailable, "CUDA driver " + library + ": " + why};
}

result<std::unique_ptr<driver>> load(const std::string& library)
{
    // RTLD_LOCAL: the driver's symbols stay out of the global namespace, where a second copy
    // (a test double beside the real one) would otherwise collide.
    void* handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
        const char* why = ::dlerror();
        return unavailable(library, why != nullptr ? why : "cannot be opened");
    }
    auto api = std::make_unique<driver>();
    api->library = library;
#define RUDA_CUDA_RESOLVE(member, symbol, type)                                                    \
    api->member = reinterpret_cast<entry<type>>(::dlsym(handle, symbol));                          \
    if (api->member == nullptr) {                                                                  \
        return unavailable(library, "has no entry point " symbol " (driver too old?)");            \
    }
    RUDA_CUDA_ENTRY_POINTS(RUDA_CUDA_RESOLVE)
#undef RUDA_CUDA_RESOLVE
    // The handle is never closed: device memory and streams may outlive every ruda object.
    if (const CUresult status = api->cuInit(0); status != cuda_success) {
        return unavailable(library, "cuInit failed: " + api->describe(status));
    }
    if (const CUresult status = api->cuDriverGetVersion(&api->version); status != cuda_success) {
        return unavailable(library, "cuDriverGetVersion failed: " + api->describe(status));
    }
    // cuLaunchHostFunc and the _v2 entry points need CUDA 10.0.
    if (api->version < 10000) {
        return unavailable(library, "driver version " + std::to_string(api->version) +
                                        " is older than CUDA 10.0");
    }
    return api;
}

} // namespace

std::string driver::describe(CUresult code) const
{
    const char* name = nullptr;
    const char* text = nullptr;
    if (cuGetErrorName == nullptr || cuGetErrorName(code, &name) != cuda_success ||
        name == nullptr) {
        return "CUDA error " + std::to_string(code);
    }
    if (cuGetErrorString != nullptr && cuGetErrorString(code, &text) == cuda_success &&
        text != nullptr) {
        return std::string{name} + " (" + text + ")";
    }
    return name;
}

result<const driver*> open_driver(const std::string& library)
{
    // A failure is remembered too: cuInit is not retried, and a missing driver stays missing.
    static std::mutex mutex;
    static std::map<std::string, result<std::unique_ptr<driver>>> opened;
    const std::lock_guard lock{mutex};
    auto found = opened.find(library);
    if (found == opened.end()) {
        found = opened.emplace(library, load(library)).first;
    }
    if (!found->second) {
        return found->second.error();
    }
    return found->second.value().get();
}

error driver_error(const driver& api, errc code, const std::string& what, CUresult result)
{
    return error{code, what + ": " + api.describe(result)};
}

} // namespace ruda::detail::cuda
