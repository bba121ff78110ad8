// What the CUDA backend's suites share: the scenarios that the double's suite
// (cuda_backend_test.cpp) and the GPU's suite (cuda_gpu_test.cpp) both run, each against the
// device and the raw driver it is given (cuda_scenarios_test.cpp), and their helpers.
#pragma once

#include "../support/async_test.hpp"
#include "cuda_test_support.hpp"

#include <ruda/backend/cuda_backend.hpp>
#include <ruda/optim/gradients_params.hpp>

#include <boost/asio/io_context.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ruda::test {

inline constexpr std::size_t KiB = 1024;
inline constexpr std::size_t MiB = 1024 * KiB;

// An io_context that runs until its work is out before it goes: the device's worker may still
// be returning from its post of a completion when the test has seen the outcome.
struct drained_io {
    boost::asio::io_context io;
    drained_io() = default;
    drained_io(const drained_io&) = delete;
    drained_io& operator=(const drained_io&) = delete;
    ~drained_io()
    {
        io.restart();
        io.run();
    }
};

std::vector<std::uint8_t> random_bytes(std::size_t n, std::uint32_t seed);

// A borrowed tensor over fresh device memory holding `bytes`.
ruda::cuda_backend::float_tensor borrowed(raw_gpu& raw, const ruda::cuda_device& device,
                                          const std::vector<std::uint8_t>& bytes, ruda::dtype type,
                                          ruda::cuda_stream producer);

// `grads` snapshotted through the CUDA backend on an io_context of its own.
ruda::result<ruda::gradients_params_record> cuda_snapshot(const ruda::gradients_params& grads,
                                                          ruda::snapshot_options options = {});

std::vector<std::uint8_t> bytes_of(const ruda::gradient_entry& entry);

// A device of the double whose copy window two pieces of 64 KiB fill: a read of 1 MiB has 2
// of its 16 pieces queued while the copies are held.
ruda::cuda_device two_piece_window(bool pinned_records = true);

// The scenarios, each described where it is defined.
void round_trip_every_dtype(const ruda::cuda_device& device, raw_gpu& raw);
void reads_wait_for_the_producer(const ruda::cuda_device& device, raw_gpu& raw, bool hold);
void uploads_into_the_trainers_memory_in_order(const std::string& library, raw_gpu& raw,
                                               bool hold);
void large_tensors_go_in_pieces(const std::string& library, raw_gpu& raw, bool pinned_records);
void record_buffers_are_pinned_once_and_reused(const ruda::cuda_device& device, raw_gpu& raw);
void device_staging_fixes_the_snapshot_at_the_call(const std::string& library, raw_gpu& raw);
void async_save_with_device_staging_lets_the_trainer_go_on_at_once(const std::string& library,
                                                                   raw_gpu& raw);
void weights_and_gradients_staged_apart_are_saved_once_landed(const std::string& library,
                                                              raw_gpu& raw);
void sync_snapshots_work_from_a_plain_thread(const ruda::cuda_device& device, raw_gpu& raw);

} // namespace ruda::test
