// A Python callable that C++ threads may hold and drop: called under the GIL, and released
// under it (or leaked, once the interpreter is exiting), never dropped without it.
#pragma once

#include "runtime.hpp"

#include <pybind11/pybind11.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

namespace ruda::python {

class python_callback {
public:
    explicit python_callback(pybind11::object callable) : callable_(std::move(callable)) {}
    python_callback(const python_callback&) = delete;
    python_callback& operator=(const python_callback&) = delete;
    ~python_callback()
    {
        if (!with_gil([this] { callable_ = pybind11::object(); })) {
            callable_.release();
        }
    }

    /// Calls it with `args` under the GIL; false when it raised (its message kept for
    /// `failure()`) or Python is exiting.
    template <class... Args>
    bool operator()(Args... args)
    {
        bool ok = false;
        with_gil([&] {
            try {
                callable_(args...);
                ok = true;
            } catch (pybind11::error_already_set& e) {
                const std::lock_guard lock{mutex_};
                failure_ = e.what();
            }
        });
        return ok;
    }

    /// What its last failing call raised ("ZeroDivisionError: division by zero").
    [[nodiscard]] std::optional<std::string> failure() const
    {
        const std::lock_guard lock{mutex_};
        return failure_;
    }

private:
    pybind11::object callable_;
    mutable std::mutex mutex_;
    std::optional<std::string> failure_;
};

/// Null for None, else the callable, shareable by C++ threads.
[[nodiscard]] inline std::shared_ptr<python_callback> share_callback(pybind11::object callable)
{
    if (callable.is_none()) {
        return nullptr;
    }
    return std::make_shared<python_callback>(std::move(callable));
}

} // namespace ruda::python
