// The controls of the CUDA driver double (see fake_cuda.cpp), for tests (extern "C", found with
// dlsym): devices, injected errors, the copy gate, held streams, a failed context, memory the
// test makes, and counters.
#include "fake_cuda_state.hpp"

using namespace fake_cuda;

extern "C" {

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
