// The inside of the CUDA driver double (fake_cuda.cpp, its entry points; fake_cuda_controls.cpp,
// what the tests control): its streams, events, memory and counters, under one lock.
#pragma once

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

namespace fake_cuda {

using CUresult = int;
using CUdeviceptr = std::uint64_t;
using host_fn = void (*)(void*);

inline constexpr CUresult ok = 0;
inline constexpr CUresult invalid_value = 1;
inline constexpr CUresult out_of_memory = 2;
inline constexpr CUresult invalid_device = 101;
inline constexpr CUresult invalid_context = 201;
inline constexpr CUresult invalid_handle = 400;
inline constexpr CUresult not_ready = 600;
inline constexpr CUresult not_permitted = 800;

// One lock for all shared state: streams, events, memory and the controls. Never destroyed:
// stream threads the process never ended still wait on them while it exits.
inline std::mutex& state_mutex = *new std::mutex;
inline std::condition_variable& state_changed = *new std::condition_variable;

inline int device_count = 1;
inline std::map<std::string, std::pair<long, CUresult>> injected; // entry -> (calls left, error)
inline std::map<std::string, long> calls;
inline std::map<CUdeviceptr, std::size_t> device_memory;
inline std::map<std::uintptr_t, std::size_t> registered;
inline long retained_contexts = 0;
inline long pageable_copies = 0;
inline long calls_from_host_functions = 0;
inline bool copies_held = false;
inline long pending_ops = 0; // queued on any stream and not yet run
inline CUresult context_fault = ok; // a failed context's error, which calls that queue or wait return

inline int contexts[8];
inline thread_local void* current_context = nullptr;
inline thread_local bool in_host_function = false;

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
inline std::vector<std::unique_ptr<event>>& events = *new std::vector<std::unique_ptr<event>>;

inline stream* legacy_stream()
{
    static auto* s = new stream; // lives until the process exits
    return s;
}

inline stream* of(void* s) { return s == nullptr ? legacy_stream() : static_cast<stream*>(s); }

// Counts the call; the injected error when its turn has come; refusals of calls without a
// context or from a host function.
inline CUresult enter(const char* entry, bool needs_context)
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
inline CUresult enter_work(const char* entry)
{
    if (const CUresult r = enter(entry, true); r != ok) {
        return r;
    }
    const std::lock_guard lock{state_mutex};
    return context_fault;
}

inline bool device_range(CUdeviceptr address, std::size_t bytes) // under state_mutex
{
    auto found = device_memory.upper_bound(address);
    if (found == device_memory.begin()) {
        return false;
    }
    --found;
    return address >= found->first && address + bytes <= found->first + found->second;
}

inline bool pinned(const void* p, std::size_t bytes) // under state_mutex
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
inline void enqueue_copy(void* s, void* to, const void* from, std::size_t bytes)
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

} // namespace fake_cuda
