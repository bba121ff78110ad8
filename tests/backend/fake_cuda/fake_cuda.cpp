// A test double of the CUDA driver API: the entry points ruda opens, backed by host memory.
// Each stream is a thread running its queued operations in order; events complete when their
// stream reaches them, and a stream waiting for an event blocks until then, as on a GPU.
// "Device memory" is host memory, so tests read and write it directly.
//
// Controls for tests (extern "C", found with dlsym; fake_cuda_controls.cpp): inject an error
// into the n-th call of an entry point, hold every copy at a gate, hold one stream, count
// calls, pageable copies, and driver calls made from a host function (which the real driver
// forbids), and fail the context as a GPU fault does: every call that queues or waits for work
// returns the error from then on, and no queued copy or host function runs (the real driver
// never calls a host function once its context has failed).
#include "fake_cuda_state.hpp"

using namespace fake_cuda;

extern "C" {

// Entry points.

CUresult cuInit(unsigned)
{
    if (const char* fail = std::getenv("FAKE_CUDA_INIT_FAILS")) {
        return std::atoi(fail);
    }
    return enter("cuInit", false);
}

CUresult cuDriverGetVersion(int* version)
{
    *version = 12040;
    return enter("cuDriverGetVersion", false);
}

CUresult cuGetErrorName(CUresult code, const char** name)
{
    switch (code) {
    case ok: *name = "CUDA_SUCCESS"; return ok;
    case invalid_value: *name = "CUDA_ERROR_INVALID_VALUE"; return ok;
    case out_of_memory: *name = "CUDA_ERROR_OUT_OF_MEMORY"; return ok;
    case 100: *name = "CUDA_ERROR_NO_DEVICE"; return ok;
    case invalid_device: *name = "CUDA_ERROR_INVALID_DEVICE"; return ok;
    case invalid_context: *name = "CUDA_ERROR_INVALID_CONTEXT"; return ok;
    case invalid_handle: *name = "CUDA_ERROR_INVALID_HANDLE"; return ok;
    case not_ready: *name = "CUDA_ERROR_NOT_READY"; return ok;
    case 700: *name = "CUDA_ERROR_ILLEGAL_ADDRESS"; return ok;
    case not_permitted: *name = "CUDA_ERROR_NOT_PERMITTED"; return ok;
    default: *name = nullptr; return invalid_value;
    }
}

CUresult cuGetErrorString(CUresult code, const char** text)
{
    const char* name = nullptr;
    if (cuGetErrorName(code, &name) != ok) {
        return invalid_value;
    }
    *text = "fake driver";
    return ok;
}

CUresult cuDeviceGetCount(int* count)
{
    const std::lock_guard lock{state_mutex};
    *count = device_count;
    return ok;
}

CUresult cuDeviceGet(int* device, int ordinal)
{
    if (const CUresult r = enter("cuDeviceGet", false); r != ok) {
        return r;
    }
    if (ordinal < 0 || ordinal >= device_count) {
        return invalid_device;
    }
    *device = ordinal;
    return ok;
}

CUresult cuDeviceGetName(char* name, int length, int device)
{
    std::snprintf(name, static_cast<std::size_t>(length), "Fake CUDA device %d", device);
    return ok;
}

CUresult cuDevicePrimaryCtxRetain(void** context, int device)
{
    if (const CUresult r = enter("cuDevicePrimaryCtxRetain", false); r != ok) {
        return r;
    }
    const std::lock_guard lock{state_mutex};
    ++retained_contexts;
    *context = &contexts[device];
    return ok;
}

CUresult cuDevicePrimaryCtxRelease_v2(int)
{
    const std::lock_guard lock{state_mutex};
    --retained_contexts;
    return ok;
}

CUresult cuCtxSetCurrent(void* context)
{
    if (const CUresult r = enter("cuCtxSetCurrent", false); r != ok) {
        return r;
    }
    current_context = context;
    return ok;
}

CUresult cuStreamCreate(void** s, unsigned)
{
    if (const CUresult r = enter("cuStreamCreate", true); r != ok) {
        return r;
    }
    *s = new stream;
    return ok;
}

CUresult cuStreamDestroy_v2(void* s)
{
    if (const CUresult r = enter("cuStreamDestroy_v2", true); r != ok) {
        return r;
    }
    auto* target = static_cast<stream*>(s);
    {
        std::unique_lock lock{state_mutex};
        target->destroy(lock);
    }
    delete target;
    return ok;
}

CUresult cuEventCreate(void** e, unsigned)
{
    if (const CUresult r = enter("cuEventCreate", true); r != ok) {
        return r;
    }
    const std::lock_guard lock{state_mutex};
    *e = events.emplace_back(std::make_unique<event>()).get();
    return ok;
}

CUresult cuEventDestroy_v2(void* e)
{
    if (const CUresult r = enter("cuEventDestroy_v2", true); r != ok) {
        return r;
    }
    // Queued operations may still refer to it; the fake keeps every event (see `events`).
    (void)e;
    return ok;
}

CUresult cuEventRecord(void* e, void* s)
{
    if (const CUresult r = enter_work("cuEventRecord"); r != ok) {
        return r;
    }
    auto* ev = static_cast<event*>(e);
    const std::lock_guard lock{state_mutex};
    const std::uint64_t generation = ++ev->recorded;
    of(s)->enqueue([ev, generation] {
        const std::lock_guard inner{state_mutex};
        ev->completed = std::max(ev->completed, generation);
        state_changed.notify_all();
    });
    return ok;
}

CUresult cuStreamWaitEvent(void* s, void* e, unsigned)
{
    if (const CUresult r = enter_work("cuStreamWaitEvent"); r != ok) {
        return r;
    }
    auto* ev = static_cast<event*>(e);
    const std::lock_guard lock{state_mutex};
    const std::uint64_t target = ev->recorded;
    of(s)->enqueue([ev, target] {
        std::unique_lock inner{state_mutex};
        state_changed.wait(inner, [ev, target] { return ev->completed >= target; });
    });
    return ok;
}

CUresult cuEventSynchronize(void* e)
{
    if (const CUresult r = enter_work("cuEventSynchronize"); r != ok) {
        return r;
    }
    auto* ev = static_cast<event*>(e);
    std::unique_lock lock{state_mutex};
    const std::uint64_t target = ev->recorded;
    state_changed.wait(lock, [ev, target] { return ev->completed >= target; });
    return ok;
}

CUresult cuEventElapsedTime(float* ms, void*, void*)
{
    *ms = 0;
    return enter_work("cuEventElapsedTime");
}

CUresult cuLaunchHostFunc(void* s, host_fn fn, void* data)
{
    if (const CUresult r = enter_work("cuLaunchHostFunc"); r != ok) {
        return r;
    }
    const std::lock_guard lock{state_mutex};
    of(s)->enqueue([fn, data] {
        {
            const std::lock_guard inner{state_mutex};
            if (context_fault != ok) {
                return;
            }
        }
        in_host_function = true;
        fn(data);
        in_host_function = false;
    });
    return ok;
}

CUresult cuStreamQuery(void* s)
{
    if (const CUresult r = enter_work("cuStreamQuery"); r != ok) {
        return r;
    }
    const std::lock_guard lock{state_mutex};
    return of(s)->busy() ? not_ready : ok;
}

CUresult cuStreamSynchronize(void* s)
{
    if (const CUresult r = enter_work("cuStreamSynchronize"); r != ok) {
        return r;
    }
    bool done = false;
    std::unique_lock lock{state_mutex};
    of(s)->enqueue([&done] {
        const std::lock_guard inner{state_mutex};
        done = true;
        state_changed.notify_all();
    });
    state_changed.wait(lock, [&done] { return done; });
    return ok;
}

CUresult cuMemAlloc_v2(CUdeviceptr* address, std::size_t bytes)
{
    if (const CUresult r = enter_work("cuMemAlloc_v2"); r != ok) {
        return r;
    }
    void* memory = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (memory == nullptr) {
        return out_of_memory;
    }
    *address = reinterpret_cast<CUdeviceptr>(memory);
    const std::lock_guard lock{state_mutex};
    device_memory[*address] = bytes;
    return ok;
}

CUresult cuMemFree_v2(CUdeviceptr address)
{
    if (const CUresult r = enter("cuMemFree_v2", true); r != ok) {
        return r;
    }
    // Like cudaFree, waits for the work queued so far, which may still use the memory.
    std::unique_lock lock{state_mutex};
    state_changed.wait(lock, [] { return pending_ops == 0; });
    if (device_memory.erase(address) == 0) {
        return invalid_value;
    }
    std::free(reinterpret_cast<void*>(address));
    return ok;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, std::size_t* size, CUdeviceptr address)
{
    if (const CUresult r = enter("cuMemGetAddressRange_v2", true); r != ok) {
        return r;
    }
    const std::lock_guard lock{state_mutex};
    auto found = device_memory.upper_bound(address);
    if (found == device_memory.begin()) {
        return invalid_value;
    }
    --found;
    if (address >= found->first + found->second) {
        return invalid_value;
    }
    *base = found->first;
    *size = found->second;
    return ok;
}

CUresult cuMemHostRegister_v2(void* p, std::size_t bytes, unsigned)
{
    if (const CUresult r = enter_work("cuMemHostRegister_v2"); r != ok) {
        return r;
    }
    const std::lock_guard lock{state_mutex};
    registered[reinterpret_cast<std::uintptr_t>(p)] = bytes;
    return ok;
}

CUresult cuMemHostUnregister(void* p)
{
    if (const CUresult r = enter("cuMemHostUnregister", true); r != ok) {
        return r;
    }
    const std::lock_guard lock{state_mutex};
    return registered.erase(reinterpret_cast<std::uintptr_t>(p)) == 1 ? ok : invalid_value;
}

CUresult cuMemcpyDtoHAsync_v2(void* to, CUdeviceptr from, std::size_t bytes, void* s)
{
    if (const CUresult r = enter_work("cuMemcpyDtoHAsync_v2"); r != ok) {
        return r;
    }
    const std::lock_guard lock{state_mutex};
    if (!device_range(from, bytes)) {
        return invalid_value;
    }
    pageable_copies += pinned(to, bytes) ? 0 : 1;
    enqueue_copy(s, to, reinterpret_cast<const void*>(from), bytes);
    return ok;
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr to, const void* from, std::size_t bytes, void* s)
{
    if (const CUresult r = enter_work("cuMemcpyHtoDAsync_v2"); r != ok) {
        return r;
    }
    const std::lock_guard lock{state_mutex};
    if (!device_range(to, bytes)) {
        return invalid_value;
    }
    pageable_copies += pinned(from, bytes) ? 0 : 1;
    enqueue_copy(s, reinterpret_cast<void*>(to), from, bytes);
    return ok;
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr to, CUdeviceptr from, std::size_t bytes, void* s)
{
    if (const CUresult r = enter_work("cuMemcpyDtoDAsync_v2"); r != ok) {
        return r;
    }
    const std::lock_guard lock{state_mutex};
    if (!device_range(to, bytes) || !device_range(from, bytes)) {
        return invalid_value;
    }
    enqueue_copy(s, reinterpret_cast<void*>(to), reinterpret_cast<const void*>(from), bytes);
    return ok;
}

} // extern "C"
