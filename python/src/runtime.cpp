#include "runtime.hpp"

#include <pybind11/pybind11.h>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include <algorithm>
#include <condition_variable>
#include <csignal>
#include <cstddef>
#include <memory>
#include <mutex>
#include <pthread.h>
#include <shared_mutex>
#include <thread>

namespace py = pybind11;

namespace ruda::python {
namespace {

// Leaked on purpose: a static destructor would join threads after Python is gone, and a
// forked child's copy has no threads to join.
std::mutex pool_mutex;
boost::asio::thread_pool* pool = nullptr;

in_flight_count operations;

// Held shared by every thread inside Python from C++, exclusively by the exit hook for good.
std::shared_mutex exit_mutex;
bool exiting = false;

boost::asio::thread_pool& threads()
{
    const std::lock_guard lock{pool_mutex};
    if (pool == nullptr) {
        // The threads block every signal, so that Ctrl-C reaches Python's main thread.
        sigset_t all;
        sigset_t previous;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &previous);
        const unsigned cores = std::max(1U, std::thread::hardware_concurrency());
        pool = new boost::asio::thread_pool(std::clamp(cores, 2U, 4U));
        pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    }
    return *pool;
}

void at_exit()
{
    const py::gil_scoped_release release;
    operations.wait_for_none();
    const std::unique_lock lock{exit_mutex};
    exiting = true;
}

void in_forked_child()
{
    // The parent's threads and operations do not exist here; its mutexes may be held by
    // threads that are gone.
    new (&pool_mutex) std::mutex;
    new (&operations) in_flight_count;
    pool = nullptr;
}

} // namespace

void in_flight_count::add()
{
    const std::lock_guard lock{mutex_};
    ++count_;
}

void in_flight_count::remove()
{
    const std::lock_guard lock{mutex_};
    if (--count_ == 0) {
        none_.notify_all();
    }
}

void in_flight_count::wait_for_none()
{
    std::unique_lock lock{mutex_};
    none_.wait(lock, [this] { return count_ == 0; });
}

operation_in_flight::operation_in_flight() { operations.add(); }
operation_in_flight::~operation_in_flight() { operations.remove(); }

void post(std::function<void()> job)
{
    operations.add();
    boost::asio::post(threads(), [job = std::move(job)] {
        job();
        operations.remove();
    });
}

bool with_gil(const std::function<void()>& call)
{
    if (PyGILState_Check() != 0) {
        call();
        return true;
    }
    const std::shared_lock lock{exit_mutex, std::try_to_lock};
    if (!lock.owns_lock() || exiting) {
        return false;
    }
    const py::gil_scoped_acquire gil;
    call();
    return true;
}

void install_runtime_hooks()
{
    py::module_::import("atexit").attr("register")(py::cpp_function(&at_exit));
    pthread_atfork(nullptr, nullptr, &in_forked_child);
}

} // namespace ruda::python
