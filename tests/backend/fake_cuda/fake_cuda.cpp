// A test double of the CUDA driver API: the entry points ruda opens, backed by host memory.
// Each stream is a thread running its queued operations in order; events complete when their
// stream reaches them, and a stream waiting for an event blocks until then, as on a GPU.
// "Device memory" is host memory, so tests read and write it directly.
//
// Controls for tests (extern "C", found with dlsym): inject an error into the n-th call of an
// entry point, hold every copy at a gate, hold one stream, count calls, pageable copies, and
// driver calls made from a host function (which the real driver forbids), and fail the context
// as a GPU fault does: every call that queues or waits for work returns the error from then on,
// and no queued copy or host function runs (the real driver never calls a host function once
// its context has failed).
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using CUresult = int;
using CUdeviceptr = std::uint64_t;
using host_fn = void (*)(void*);

constexpr CUresult ok = 0;
constexpr CUresult invalid_value = 1;
constexpr CUresult out_of_memory = 2;
constexpr CUresult invalid_device = 101;
constexpr CUresult invalid_context = 201;
constexpr CUresult invalid_handle = 400;
constexpr CUresult not_ready = 600;
constexpr CUresult not_permitted = 800;

// One lock for all shared state: streams, events, memory and the controls. Never destroyed:
// stream threads the process never ended still wait on them while it exits.
std::mutex& state_mutex = *new std::mutex;
std::condition_variable& state_changed = *new std::condition_variable;

int device_count = 1;
std::map<std::string, std::pair<long, CUresult>> injected; // entry -> (calls left, error)
std::map<std::string, long> calls;
std::map<CUdeviceptr, std::size_t> device_memory;
std::map<std::uintptr_t, std::size_t> registered;
long retained_contexts = 0;
long pageable_copies = 0;
long calls_from_host_functions = 0;
bool copies_held = false;
long pending_ops = 0; // queued on any stream and not yet run
CUresult context_fault = ok; // a failed context's error, which calls that queue or wait return

int contexts[8];
thread_local void* current_context = nullptr;
thread_local bool in_host_function = false;

struct event {
    std::uint64_t recorded = 0;
    std::uint64_t completed = 0;
};

class stream {
public:
    stream() : worker_([this] { run(); }) {}

    // Under state_mutex.
    void enqueue(std::function<void()> op)
    {
        ops_.push_back(std::move(op));
        ++pending_ops;
        state_changed.notify_all();
    }
    // Under state_mutex: whether work is queued or running.
    [[nodiscard]] bool busy() const { return !ops_.empty() || running_; }
    void hold(bool on)
    {
        held_ = on;
        state_changed.notify_all();
    }
    // Waits for the queued work, then ends the thread.
    void destroy(std::unique_lock<std::mutex>& lock)
    {
        stopping_ = true;
        state_changed.notify_all();
        state_changed.wait(lock, [this] { return finished_; });
        lock.unlock();
        worker_.join();
        lock.lock();
    }

private:
    void run()
    {
        std::unique_lock lock{state_mutex};
        for (;;) {
            state_changed.wait(lock, [this] { return (!ops_.empty() && !held_) || (stopping_ && ops_.empty()); });
            if (ops_.empty()) {
                finished_ = true;
                state_changed.notify_all();
                return;
            }
            auto op = std::move(ops_.front());
            ops_.pop_front();
            running_ = true;
            lock.unlock();
            op();
            lock.lock();
            running_ = false;
            --pending_ops;
            state_changed.notify_all();
        }
    }

    std::deque<std::function<void()>> ops_;
    bool held_ = false;
    bool running_ = false;
    bool stopping_ = false;
    bool finished_ = false;
    std::thread worker_;
};

// Every event ever created: queued operations may refer to one after it is destroyed, so the
// fake keeps them (reachable, for the leak checker) until the process ends.
std::vector<std::unique_ptr<event>>& events = *new std::vector<std::unique_ptr<event>>;

stream* legacy_stream()
{
    static auto* s = new stream; // lives until the process exits
    return s;
}

stream* of(void* s) { return s == nullptr ? legacy_stream() : static_cast<stream*>(s); }

// Counts the call; the injected error when its turn has come; refusals of calls without a
// context or from a host function.
CUresult enter(const char* entry, bool needs_context)
{
    const std::lock_guard lock{state_mutex};
    ++calls[entry];
    if (in_host_function) {
        ++calls_from_host_functions;
        return not_permitted;
    }
    if (auto found = injected.find(entry); found != injected.end()) {
        if (--found->second.first == 0) {
            const CUresult code = found->second.second;
            injected.erase(found);
            return code;
        }
    }
    if (needs_context && current_context == nullptr) {
        return invalid_context;
    }
    return ok;
}

// `enter` for a call that queues work or waits for it: in a failed context, the context's error.
CUresult enter_work(const char* entry)
{
    if (const CUresult r = enter(entry, true); r != ok) {
        return r;
    }
    const std::lock_guard lock{state_mutex};
    return context_fault;
}

bool device_range(CUdeviceptr address, std::size_t bytes) // under state_mutex
{
    auto found = device_memory.upper_bound(address);
    if (found == device_memory.begin()) {
        return false;
    }
    --found;
    return address >= found->first && address + bytes <= found->first + found->second;
}

bool pinned(const void* p, std::size_t bytes) // under state_mutex
{
    const auto address = reinterpret_cast<std::uintptr_t>(p);
    auto found = registered.upper_bound(address);
    if (found == registered.begin()) {
        return false;
    }
    --found;
    return address >= found->first && address + bytes <= found->first + found->second;
}

// A copy on `s`, run when the stream reaches it and the copy gate is open.
void enqueue_copy(void* s, void* to, const void* from, std::size_t bytes)
{
    of(s)->enqueue([to, from, bytes] {
        {
            std::unique_lock lock{state_mutex};
            state_changed.wait(lock, [] { return !copies_held; });
            if (context_fault != ok) {
                return;
            }
        }
        if (bytes != 0) { // an empty host buffer may be null
            std::memmove(to, from, bytes);
        }
    });
}

} // namespace

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

// Controls.

void fake_cuda_set_devices(int count)
{
    const std::lock_guard lock{state_mutex};
    device_count = count;
}

/// The `nth` call of `entry` from now (1 = the next) fails with `code`.
void fake_cuda_fail(const char* entry, long nth, int code)
{
    const std::lock_guard lock{state_mutex};
    injected[entry] = {nth, code};
}

/// Forgets injected errors and counts; opens the copy gate.
void fake_cuda_reset()
{
    const std::lock_guard lock{state_mutex};
    injected.clear();
    calls.clear();
    pageable_copies = 0;
    calls_from_host_functions = 0;
    copies_held = false;
    device_count = 1;
    context_fault = ok;
    state_changed.notify_all();
}

/// The context fails with `code` now (a GPU fault: CUDA_ERROR_ILLEGAL_ADDRESS, say).
void fake_cuda_fail_context(int code)
{
    const std::lock_guard lock{state_mutex};
    context_fault = code;
    state_changed.notify_all();
}

/// While held, every copy waits before moving a byte (what is queued behind it waits too).
void fake_cuda_hold_copies(bool held)
{
    const std::lock_guard lock{state_mutex};
    copies_held = held;
    state_changed.notify_all();
}

/// A stream of the test's own, standing for the trainer's.
void* fake_cuda_stream_create() { return new stream; }

void fake_cuda_stream_destroy(void* s)
{
    auto* target = static_cast<stream*>(s);
    {
        std::unique_lock lock{state_mutex};
        target->destroy(lock);
    }
    delete target;
}

/// While held, the stream runs nothing more.
void fake_cuda_hold_stream(void* s, bool held)
{
    const std::lock_guard lock{state_mutex};
    of(s)->hold(held);
}

/// A "kernel" on `s` that sets `bytes` bytes at `address` to `value`.
void fake_cuda_fill(void* s, CUdeviceptr address, int value, std::size_t bytes)
{
    const std::lock_guard lock{state_mutex};
    of(s)->enqueue([address, value, bytes] {
        std::memset(reinterpret_cast<void*>(address), value, bytes);
    });
}

/// Device memory for a test, outside any context.
CUdeviceptr fake_cuda_alloc(std::size_t bytes)
{
    void* memory = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
    const auto address = reinterpret_cast<CUdeviceptr>(memory);
    const std::lock_guard lock{state_mutex};
    device_memory[address] = bytes;
    return address;
}

void fake_cuda_free(CUdeviceptr address)
{
    const std::lock_guard lock{state_mutex};
    device_memory.erase(address);
    std::free(reinterpret_cast<void*>(address));
}

/// Makes the allocation at `address` two, split at `offset`: adjacent addresses that one copy
/// may not span. `fake_cuda_join` undoes it before the memory is freed.
void fake_cuda_split(CUdeviceptr address, std::size_t offset)
{
    const std::lock_guard lock{state_mutex};
    const std::size_t bytes = device_memory.at(address);
    device_memory[address] = offset;
    device_memory[address + offset] = bytes - offset;
}

void fake_cuda_join(CUdeviceptr address, std::size_t offset)
{
    const std::lock_guard lock{state_mutex};
    device_memory[address] += device_memory.at(address + offset);
    device_memory.erase(address + offset);
}

long fake_cuda_calls(const char* entry)
{
    const std::lock_guard lock{state_mutex};
    const auto found = calls.find(entry);
    return found == calls.end() ? 0 : found->second;
}

long fake_cuda_pageable_copies()
{
    const std::lock_guard lock{state_mutex};
    return pageable_copies;
}

long fake_cuda_calls_from_host_functions()
{
    const std::lock_guard lock{state_mutex};
    return calls_from_host_functions;
}

long fake_cuda_retained_contexts()
{
    const std::lock_guard lock{state_mutex};
    return retained_contexts;
}

long fake_cuda_device_allocations()
{
    const std::lock_guard lock{state_mutex};
    return static_cast<long>(device_memory.size());
}

long fake_cuda_registered_ranges()
{
    const std::lock_guard lock{state_mutex};
    return static_cast<long>(registered.size());
}

} // extern "C"
