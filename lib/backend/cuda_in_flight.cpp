// How a read on a CUDA device completes: exactly once, counted, and posted to the reader.
#include "cuda_in_flight.hpp"

#include <ruda/runtime/detail/post_completion.hpp>

namespace ruda::detail {

void cuda_read_op::finish(std::optional<error> failure, cuda_tally& tally)
{
    if (done) {
        return;
    }
    done = true;
    result<storage> outcome = std::move(destination);
    if (failure) {
        if (*failure == errc::cancelled) {
            tally.reads_cancelled.fetch_add(1);
        } else {
            tally.reads_failed.fetch_add(1);
        }
        outcome = std::move(*failure);
    } else {
        tally.reads_completed.fetch_add(1);
        tally.bytes_read.fetch_add(tensor->bytes);
    }
    tensor.reset();
    post_completion(std::move(work), std::move(handler), std::move(outcome));
}

void cuda_read_op::finish_from(const cuda_run& run, cuda_tally& tally)
{
    if (run.failure) {
        finish(*run.failure, tally);
        return;
    }
    destination = run.buffer.slice(tensor->run_offset, tensor->bytes);
    finish(stopped ? std::optional<error>{cancelled_read()} : std::nullopt, tally);
}

void finish_waiters(cuda_run& run, cuda_tally& tally)
{
    for (const auto& waiter : run.waiting) {
        waiter->finish_from(run, tally);
    }
    run.waiting.clear();
}

} // namespace ruda::detail
