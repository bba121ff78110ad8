// backend_cuda_gpu: the CUDA backend's scenarios that need no fault injection
// (cuda_scenarios_test.cpp), against the real driver; they run where a GPU is present
// (scripts/gpu-check) and are skipped elsewhere.
#include "cuda_scenarios.hpp"
#include "cuda_test_support.hpp"

#include <boost/test/unit_test.hpp>

namespace {

using ruda::test::gpu_present;
using ruda::test::raw_gpu;
using ruda::test::round_trip_every_dtype;
using ruda::test::reads_wait_for_the_producer;
using ruda::test::uploads_into_the_trainers_memory_in_order;
using ruda::test::large_tensors_go_in_pieces;
using ruda::test::record_buffers_are_pinned_once_and_reused;
using ruda::test::device_staging_fixes_the_snapshot_at_the_call;
using ruda::test::async_save_with_device_staging_lets_the_trainer_go_on_at_once;
using ruda::test::weights_and_gradients_staged_apart_are_saved_once_landed;
using ruda::test::sync_snapshots_work_from_a_plain_thread;

} // namespace

BOOST_AUTO_TEST_SUITE(backend_cuda_gpu, *boost::unit_test::precondition([](boost::unit_test::test_unit_id) {
    return gpu_present();
}))

BOOST_AUTO_TEST_CASE(gpu_round_trip_of_every_dtype_is_bit_exact)
{
    raw_gpu raw{"libcuda.so.1"};
    round_trip_every_dtype(ruda::cuda_device::open().value(), raw);
}

BOOST_AUTO_TEST_CASE(gpu_reads_wait_for_the_producer_stream)
{
    raw_gpu raw{"libcuda.so.1"};
    reads_wait_for_the_producer(ruda::cuda_device::open().value(), raw, false);
}

BOOST_AUTO_TEST_CASE(gpu_large_tensors_go_in_pieces)
{
    raw_gpu raw{"libcuda.so.1"};
    large_tensors_go_in_pieces("libcuda.so.1", raw, true);
    large_tensors_go_in_pieces("libcuda.so.1", raw, false);
}

BOOST_AUTO_TEST_CASE(gpu_uploads_into_the_trainers_memory_in_order)
{
    raw_gpu raw{"libcuda.so.1"};
    uploads_into_the_trainers_memory_in_order("libcuda.so.1", raw, false);
}

BOOST_AUTO_TEST_CASE(gpu_record_buffers_are_pinned_once_and_reused)
{
    raw_gpu raw{"libcuda.so.1"};
    record_buffers_are_pinned_once_and_reused(ruda::cuda_device::open().value(), raw);
}

BOOST_AUTO_TEST_CASE(gpu_device_staging_fixes_the_snapshot_at_the_call)
{
    raw_gpu raw{"libcuda.so.1"};
    device_staging_fixes_the_snapshot_at_the_call("libcuda.so.1", raw);
}

BOOST_AUTO_TEST_CASE(gpu_async_save_with_device_staging_lets_the_trainer_go_on_at_once)
{
    raw_gpu raw{"libcuda.so.1"};
    async_save_with_device_staging_lets_the_trainer_go_on_at_once("libcuda.so.1", raw);
}

BOOST_AUTO_TEST_CASE(gpu_weights_and_gradients_staged_apart_are_saved_once_landed)
{
    raw_gpu raw{"libcuda.so.1"};
    weights_and_gradients_staged_apart_are_saved_once_landed("libcuda.so.1", raw);
}

BOOST_AUTO_TEST_CASE(gpu_sync_snapshots_work_from_a_plain_thread)
{
    raw_gpu raw{"libcuda.so.1"};
    sync_snapshots_work_from_a_plain_thread(ruda::cuda_device::open().value(), raw);
}

BOOST_AUTO_TEST_SUITE_END()
