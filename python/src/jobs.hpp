// An operation run on the module's I/O threads and reported through a `ruda.Future`.
#pragma once

#include "future.hpp"
#include "runtime.hpp"

#include <ruda/error.hpp>

#include <memory>
#include <utility>

namespace ruda::python {

/// Runs `job(state)` (which returns a `result<T>`) on an I/O thread, unless cancelled first,
/// and completes the future with its failure or with `present(value)`, `value` a
/// `std::shared_ptr<const T>`, made under the GIL at each `result()` (so `present` must capture
/// nothing of Python, and shares the value rather than copy it: a record may be gigabytes).
template <class Job, class Present>
[[nodiscard]] std::shared_ptr<future_state> start_job(Job job, Present present)
{
    auto state = std::make_shared<future_state>();
    post([state, job = std::move(job), present = std::move(present)]() mutable {
        if (state->done()) {
            return; // cancelled before it started
        }
        auto outcome = job(*state);
        if (!outcome) {
            state->fail(std::move(outcome).error());
            return;
        }
        using value_type = typename decltype(outcome)::value_type;
        std::shared_ptr<const value_type> value =
            std::make_shared<value_type>(std::move(outcome).value());
        state->succeed([value, present] { return present(value); });
    });
    return state;
}

} // namespace ruda::python
