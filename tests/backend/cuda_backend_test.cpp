// cuda_device and cuda_backend. Three suites:
// - backend_cuda_no_driver: no driver to open, no device, a driver that fails to start;
// - backend_cuda_fake: everything, against the test double of the driver API (a shared
//   library the tests build, backed by host memory and a thread per stream), which can hold
//   copies at a gate, hold a stream and inject driver errors;
// - backend_cuda_gpu (cuda_gpu_test.cpp): the scenarios that need no fault injection, against
//   the real driver.
// The scenarios both run are in cuda_scenarios_test.cpp.
#include "../checkpoint/checkpoint_test_support.hpp"
#include "../support/async_test.hpp"
#include "cuda_scenarios.hpp"
#include "cuda_test_support.hpp"

#include <ruda/checkpoint/checkpoint_manager.hpp>

#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/optim/gradients_params.hpp>
#include <ruda/runtime/blocking_scope.hpp>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/test/unit_test.hpp>

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <thread>

namespace {

using namespace std::chrono_literals;
using ruda::errc;
using cuda = ruda::cuda_backend;
using ruda::test::control;
using ruda::test::fake;
using ruda::test::raw_gpu;
using ruda::test::KiB;
using ruda::test::MiB;
using ruda::test::drained_io;
using ruda::test::random_bytes;
using ruda::test::borrowed;
using ruda::test::cuda_snapshot;
using ruda::test::bytes_of;
using ruda::test::two_piece_window;
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

BOOST_AUTO_TEST_SUITE(backend_cuda_no_driver)

BOOST_AUTO_TEST_CASE(a_missing_driver_library_is_device_unavailable_naming_the_loader_reason)
{
    auto device = ruda::cuda_device::open({.driver_library = "/nonexistent/libcuda.so.1"});
    BOOST_REQUIRE(!device);
    BOOST_TEST(device.error() == errc::device_unavailable);
    BOOST_TEST(device.error().message().find("/nonexistent/libcuda.so.1") != std::string::npos);
    BOOST_TEST(device.error().message().find("No such file") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_library_that_is_no_driver_is_device_unavailable_naming_the_entry_point)
{
    // The C library opens, but has none of the driver's entry points.
    auto device = ruda::cuda_device::open({.driver_library = "libc.so.6"});
    BOOST_REQUIRE(!device);
    BOOST_TEST(device.error() == errc::device_unavailable);
    BOOST_TEST(device.error().message().find("has no entry point cuInit") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_driver_whose_init_fails_is_device_unavailable_with_the_drivers_error)
{
    // A copy of the double under another name is a driver of its own, started afresh.
    const auto copy = std::filesystem::temp_directory_path() /
                      ("ruda-fake-cuda-init-" + std::to_string(::getpid()) + ".so");
    std::filesystem::copy_file(ruda::test::fake_cuda_library(), copy,
                               std::filesystem::copy_options::overwrite_existing);
    ::setenv("FAKE_CUDA_INIT_FAILS", "100", 1);
    auto device = ruda::cuda_device::open({.driver_library = copy.string()});
    ::unsetenv("FAKE_CUDA_INIT_FAILS");
    std::filesystem::remove(copy);
    BOOST_REQUIRE(!device);
    BOOST_TEST(device.error() == errc::device_unavailable);
    BOOST_TEST(device.error().message().find("cuInit failed: CUDA_ERROR_NO_DEVICE") !=
               std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(backend_cuda_fake)

BOOST_FIXTURE_TEST_CASE(fake_driver_round_trip_of_every_dtype_is_bit_exact, fake)
{
    raw_gpu raw{ruda::test::fake_cuda_library()};
    round_trip_every_dtype(device, raw);
    BOOST_TEST(device.stats().uploads == 32U); // 16 uploaded, 16 restored
}

BOOST_FIXTURE_TEST_CASE(fake_driver_reads_wait_for_the_producer_stream, fake)
{
    raw_gpu raw{ruda::test::fake_cuda_library()};
    reads_wait_for_the_producer(device, raw, true);
}

BOOST_FIXTURE_TEST_CASE(fake_driver_large_tensors_go_in_pieces_into_pinned_records, fake)
{
    raw_gpu raw{ruda::test::fake_cuda_library()};
    const long before = count("fake_cuda_pageable_copies");
    large_tensors_go_in_pieces(ruda::test::fake_cuda_library(), raw, true);
    BOOST_TEST(count("fake_cuda_pageable_copies") - before == 2); // the test's two writes
}

BOOST_FIXTURE_TEST_CASE(fake_driver_large_tensors_go_in_pieces_through_the_staging_ring, fake)
{
    raw_gpu raw{ruda::test::fake_cuda_library()};
    const long before = count("fake_cuda_pageable_copies");
    large_tensors_go_in_pieces(ruda::test::fake_cuda_library(), raw, false);
    BOOST_TEST(count("fake_cuda_pageable_copies") - before == 2);
}

BOOST_FIXTURE_TEST_CASE(fake_driver_record_buffers_are_pinned_once_and_reused, fake)
{
    raw_gpu raw{ruda::test::fake_cuda_library()};
    record_buffers_are_pinned_once_and_reused(device, raw);
}

BOOST_FIXTURE_TEST_CASE(fake_driver_device_staging_fixes_the_snapshot_at_the_call, fake)
{
    raw_gpu raw{ruda::test::fake_cuda_library()};
    device_staging_fixes_the_snapshot_at_the_call(ruda::test::fake_cuda_library(), raw);
}

BOOST_FIXTURE_TEST_CASE(fake_driver_sync_snapshots_work_from_a_plain_thread, fake)
{
    raw_gpu raw{ruda::test::fake_cuda_library()};
    sync_snapshots_work_from_a_plain_thread(device, raw);
}

BOOST_FIXTURE_TEST_CASE(fake_driver_adjacent_small_tensors_share_one_copy_and_one_buffer, fake)
{
    const ruda::test::watchdog guard{"cuda small runs"};
    raw_gpu raw{ruda::test::fake_cuda_library()};
    const ruda::cuda_stream producer = raw.new_stream();
    // 300 tensors of 1 KiB, slices of one flat buffer that the driver sees as two allocations
    // from the 150th on, then one that is not adjacent.
    const auto flat = random_bytes(300 * KiB, 11);
    auto memory = raw.alloc(flat.size());
    raw.write(*memory, flat, producer);
    control<void(std::uint64_t, std::size_t)>("fake_cuda_split")(*memory, 150 * KiB);
    ruda::gradients_params grads;
    for (std::uint64_t i = 0; i < 300; ++i) {
        grads.insert<cuda>(ruda::param_id{i + 1},
                           cuda::borrow(device, *memory + i * KiB, {KiB / 4}, ruda::dtype::f32(),
                                        producer, memory)
                               .value());
    }
    const auto apart = random_bytes(KiB, 12);
    grads.insert<cuda>(ruda::param_id{301}, borrowed(raw, device, apart, ruda::dtype::f32(), producer));
    const auto pieces = device.stats().pieces;
    auto record = cuda_snapshot(grads); // eight reads in flight: the runs are decided at the call
    BOOST_REQUIRE(record.has_value());
    const auto& entries = record.value().entries();
    for (std::size_t i = 0; i < 300; ++i) {
        const auto bytes = bytes_of(entries.at(i));
        BOOST_REQUIRE(std::equal(bytes.begin(), bytes.end(), flat.begin() + static_cast<std::ptrdiff_t>(i * KiB)));
    }
    BOOST_TEST(bytes_of(entries.at(300)) == apart);
    // One copy per allocation's run, one for the tensor apart.
    BOOST_TEST(device.stats().pieces - pieces == 3U);
    BOOST_TEST(entries.at(0).data.bytes().shares_memory_with(entries.at(1).data.bytes()));
    BOOST_TEST(!entries.at(149).data.bytes().shares_memory_with(entries.at(150).data.bytes()));
    BOOST_TEST(!entries.at(299).data.bytes().shares_memory_with(entries.at(300).data.bytes()));
    control<void(std::uint64_t, std::size_t)>("fake_cuda_join")(*memory, 150 * KiB);
    raw.destroy_stream(producer);
}

BOOST_FIXTURE_TEST_CASE(fake_driver_async_save_with_device_staging_lets_the_trainer_go_on_at_once,
                        fake)
{
    raw_gpu raw{ruda::test::fake_cuda_library()};
    async_save_with_device_staging_lets_the_trainer_go_on_at_once(ruda::test::fake_cuda_library(),
                                                                  raw);
}

BOOST_FIXTURE_TEST_CASE(fake_driver_weights_and_gradients_staged_apart_are_saved_once_landed, fake)
{
    raw_gpu raw{ruda::test::fake_cuda_library()};
    weights_and_gradients_staged_apart_are_saved_once_landed(ruda::test::fake_cuda_library(), raw);
}

BOOST_FIXTURE_TEST_CASE(fake_driver_a_cancelled_snapshot_issues_nothing_more_and_waits_for_queued_copies,
                        fake)
{
    const ruda::test::watchdog guard{"cuda cancel"};
    raw_gpu raw{ruda::test::fake_cuda_library()};
    auto small_pieces = two_piece_window();
    const ruda::cuda_stream producer = raw.new_stream();
    ruda::gradients_params grads;
    grads.insert<cuda>(ruda::param_id{1},
                       borrowed(raw, small_pieces, random_bytes(MiB, 9), ruda::dtype::f32(), producer));
    hold_copies(true);
    drained_io context;
    auto& io = context.io;
    boost::asio::cancellation_signal cancel;
    auto out = ruda::test::spawn(io, grads.to_record_async<cuda>(), &cancel);
    // Two pieces fill the copy stream's window; they are queued and held at the gate.
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return small_pieces.stats().pieces == 2; }));
    cancel.emit(boost::asio::cancellation_type::terminal);
    // The read may not complete while its pieces can still land in its buffer.
    BOOST_TEST(!ruda::test::run_until(io, [&] { return out->done.load(); }, 200ms));
    hold_copies(false);
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return out->done.load(); }));
    BOOST_REQUIRE(out->value && !out->value->has_value());
    BOOST_TEST(out->value->error() == errc::cancelled);
    BOOST_TEST(small_pieces.stats().pieces == 2U); // of 16
    BOOST_TEST(small_pieces.stats().reads_cancelled == 1U);
    raw.destroy_stream(producer);
}

// A GPU fault fails the context: the driver never runs the host functions of the copies out,
// so nothing would tell the snapshot, or an upload waiting for room in the ring, that they are
// over. The device finds the failure by asking the driver and fails both, naming its error.
BOOST_FIXTURE_TEST_CASE(fake_driver_a_context_failing_under_copies_fails_reads_and_uploads_not_hangs,
                        fake)
{
    const ruda::test::watchdog guard{"cuda context failure"};
    raw_gpu raw{ruda::test::fake_cuda_library()};
    auto ring = two_piece_window(false); // reads through the staging ring, which they fill
    const ruda::cuda_stream producer = raw.new_stream();
    const ruda::cuda_stream trainer = raw.new_stream();
    auto memory = raw.alloc(64 * KiB);
    ruda::gradients_params grads;
    grads.insert<cuda>(ruda::param_id{1},
                       borrowed(raw, ring, random_bytes(MiB, 11), ruda::dtype::f32(), producer));
    hold_copies(true);
    drained_io context;
    auto& io = context.io;
    auto out = ruda::test::spawn(io, grads.to_record_async<cuda>());
    // Both pieces queued and their host functions launched: the reads call the driver no more.
    BOOST_REQUIRE(ruda::test::run_until(io, [&] {
        return ring.stats().pieces == 2 && calls("cuLaunchHostFunc") == 2;
    }));
    // An upload waits for room in the ring, which only landing pieces make.
    const long waits = calls("cuStreamWaitEvent");
    ruda::result<void> uploaded = ruda::success();
    std::thread uploader{[&] {
        uploaded = ring.upload_into(*memory, std::vector<std::uint8_t>(64 * KiB, 1), trainer);
    }};
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return calls("cuStreamWaitEvent") > waits; }));
    std::this_thread::sleep_for(50ms); // into the wait for the ring

    fail_context(700);
    hold_copies(false); // the held copies are dropped: the context has failed
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return out->done.load(); }));
    BOOST_REQUIRE(out->value && !out->value->has_value());
    const ruda::error& failure = out->value->error();
    BOOST_TEST(failure == errc::read_failed);
    BOOST_TEST(failure.message().find("parameter 1") != std::string::npos, failure.message());
    BOOST_TEST(failure.message().find("the context failed with copies in flight") !=
                   std::string::npos,
               failure.message());
    BOOST_TEST(failure.message().find("CUDA_ERROR_ILLEGAL_ADDRESS") != std::string::npos,
               failure.message());
    uploader.join();
    BOOST_REQUIRE(!uploaded);
    BOOST_TEST(uploaded.error() == errc::read_failed);
    BOOST_TEST(uploaded.error().message().find("the context failed with copies in flight") !=
                   std::string::npos,
               uploaded.error().message());
    BOOST_TEST(ring.stats().reads_failed == 1U);

    // Later reads fail at once with the same error; the device then closes without waiting for
    // copies that will never land.
    auto again = cuda_snapshot(grads);
    BOOST_REQUIRE(!again);
    BOOST_TEST(again.error().message().find("CUDA_ERROR_ILLEGAL_ADDRESS") != std::string::npos,
               again.error().message());
    grads = {};
    { const auto closing = std::move(ring); }
    raw.destroy_stream(producer);
    raw.destroy_stream(trainer);
}

BOOST_FIXTURE_TEST_CASE(fake_driver_a_copy_failing_mid_snapshot_names_the_parameter_and_the_driver_error,
                        fake)
{
    const ruda::test::watchdog guard{"cuda fault"};
    raw_gpu raw{ruda::test::fake_cuda_library()};
    const ruda::cuda_stream producer = raw.new_stream();
    ruda::gradients_params grads;
    for (std::uint64_t id = 1; id <= 6; ++id) {
        grads.insert<cuda>(ruda::param_id{id}, borrowed(raw, device, random_bytes(4 * KiB, 10),
                                                        ruda::dtype::f32(), producer));
    }
    fail("cuMemcpyDtoHAsync_v2", 4, 700);
    auto record = cuda_snapshot(grads);
    BOOST_REQUIRE(!record);
    BOOST_TEST(record.error() == errc::read_failed);
    BOOST_TEST(record.error().message().find("parameter 4") != std::string::npos);
    BOOST_TEST(record.error().message().find("cuMemcpyDtoHAsync") != std::string::npos);
    BOOST_TEST(record.error().message().find("CUDA_ERROR_ILLEGAL_ADDRESS") != std::string::npos);
    // The device goes on: the next snapshot is whole.
    auto again = cuda_snapshot(grads);
    BOOST_REQUIRE_MESSAGE(again.has_value(), (again.has_value() ? "" : again.error().message()));
    BOOST_TEST(again.value().entries().size() == 6U);
    raw.destroy_stream(producer);
}

BOOST_FIXTURE_TEST_CASE(fake_driver_uploads_into_the_trainers_memory_in_order, fake)
{
    raw_gpu raw{ruda::test::fake_cuda_library()};
    uploads_into_the_trainers_memory_in_order(ruda::test::fake_cuda_library(), raw, true);
}

BOOST_FIXTURE_TEST_CASE(fake_driver_upload_into_refuses_memory_it_does_not_fit_and_names_it, fake)
{
    raw_gpu raw{ruda::test::fake_cuda_library()};
    const ruda::cuda_stream trainer = raw.new_stream();
    auto memory = raw.alloc(64);
    const std::vector<std::uint8_t> bytes(48, 1);
    const auto pieces = calls("cuMemcpyHtoDAsync_v2");

    auto past_the_end = device.upload_into(*memory + 32, bytes, trainer);
    BOOST_REQUIRE(!past_the_end);
    BOOST_TEST(past_the_end.error() == errc::byte_count_mismatch);
    BOOST_TEST(past_the_end.error().message().find("48 bytes at 0x") != std::string::npos,
               past_the_end.error().message());
    BOOST_TEST(past_the_end.error().message().find("do not fit the allocation of 64 bytes") !=
                   std::string::npos,
               past_the_end.error().message());

    auto host_memory = device.upload_into(reinterpret_cast<ruda::cuda_device_ptr>(bytes.data()),
                                          bytes, trainer);
    BOOST_REQUIRE(!host_memory);
    BOOST_TEST(host_memory.error() == errc::invalid_tensor);
    BOOST_TEST(host_memory.error().message().find("not device memory") != std::string::npos);
    BOOST_TEST(calls("cuMemcpyHtoDAsync_v2") == pieces); // nothing was copied

    fail("cuMemcpyHtoDAsync_v2", 1, 700);
    auto failed = device.upload_into(*memory, bytes, trainer);
    BOOST_REQUIRE(!failed);
    BOOST_TEST(failed.error() == errc::read_failed);
    BOOST_TEST(failed.error().message().find("CUDA_ERROR_ILLEGAL_ADDRESS") != std::string::npos);

    // The ring's piece went back: the next upload goes through.
    BOOST_REQUIRE(device.upload_into(*memory, bytes, trainer).has_value());
    BOOST_TEST(raw.read(*memory, bytes.size(), trainer) == bytes);
    raw.destroy_stream(trainer);
}

BOOST_FIXTURE_TEST_CASE(fake_driver_upload_errors_are_named_and_leave_nothing_behind, fake)
{
    const long allocations = count("fake_cuda_device_allocations");
    fail("cuMemAlloc_v2", 1, 2);
    auto oom = cuda::float_from_data(ruda::tensor_data::from_values(std::vector<float>{1, 2}, {2}).value(),
                                     device);
    BOOST_REQUIRE(!oom);
    BOOST_TEST(oom.error() == errc::allocation_too_large);
    BOOST_TEST(oom.error().message().find("CUDA_ERROR_OUT_OF_MEMORY") != std::string::npos);

    fail("cuMemcpyHtoDAsync_v2", 1, 700);
    auto failed = cuda::float_from_data(
        ruda::tensor_data::from_values(std::vector<float>{1, 2}, {2}).value(), device);
    BOOST_REQUIRE(!failed);
    BOOST_TEST(failed.error().message().find("CUDA_ERROR_ILLEGAL_ADDRESS") != std::string::npos);
    BOOST_TEST(count("fake_cuda_device_allocations") == allocations);

    auto mismatch = cuda::float_from_data({ruda::storage::copy_of(std::vector<std::uint8_t>(7)),
                                           {2}, ruda::dtype::f32()},
                                          device);
    BOOST_REQUIRE(!mismatch);
    BOOST_TEST(mismatch.error() == errc::byte_count_mismatch);
    auto not_float = cuda::float_from_data(
        ruda::tensor_data::from_values(std::vector<std::int32_t>{1}, {1}).value(), device);
    BOOST_REQUIRE(!not_float);
    BOOST_TEST(not_float.error() == errc::invalid_dtype);
    auto not_quantized = cuda::q_from_data(
        ruda::tensor_data::from_values(std::vector<float>{1}, {1}).value(), device);
    BOOST_REQUIRE(!not_quantized);
    BOOST_TEST(not_quantized.error() == errc::invalid_dtype);
}

BOOST_FIXTURE_TEST_CASE(fake_driver_borrowing_checks_the_dtype_and_the_size, fake)
{
    auto not_float = cuda::borrow(device, 4096, {4}, ruda::dtype::i32(), nullptr, nullptr);
    BOOST_REQUIRE(!not_float);
    BOOST_TEST(not_float.error() == errc::invalid_dtype);
    auto overflow = cuda::borrow(device, 4096, {std::size_t{1} << 62U, 8}, ruda::dtype::f32(),
                                 nullptr, nullptr);
    BOOST_REQUIRE(!overflow);
    BOOST_TEST(overflow.error() == errc::shape_overflow);
    auto not_quantized = cuda::borrow_quantized(device, 4096, 8, {4}, ruda::dtype::f32(), nullptr,
                                                nullptr);
    BOOST_REQUIRE(!not_quantized);
    BOOST_TEST(not_quantized.error() == errc::invalid_dtype);
    const long pageable = count("fake_cuda_pageable_copies");
    auto uploaded = cuda::float_from_data(
        ruda::tensor_data::from_values(std::vector<float>{1, 2}, {2}).value(), device);
    BOOST_REQUIRE((uploaded).has_value());
    BOOST_TEST(count("fake_cuda_pageable_copies") == pageable); // through the pinned ring
    BOOST_TEST((cuda::float_cast(uploaded.value(), ruda::dtype::f32())).has_value());
    auto cast = cuda::float_cast(uploaded.value(), ruda::dtype::f16());
    BOOST_REQUIRE(!cast);
    BOOST_TEST(cast.error() == errc::invalid_dtype);
    BOOST_TEST(cast.error().message().find("upload the data in f16") != std::string::npos);
}

BOOST_FIXTURE_TEST_CASE(fake_driver_a_device_that_is_gone_cancels_reads_and_releases_everything, fake)
{
    const ruda::test::watchdog guard{"cuda device gone"};
    const long contexts = count("fake_cuda_retained_contexts");
    const long allocations = count("fake_cuda_device_allocations");
    const long registered = count("fake_cuda_registered_ranges");
    std::optional<cuda::float_tensor> orphan;
    {
        auto short_lived = ruda::cuda_device::open(options()).value();
        BOOST_TEST(count("fake_cuda_retained_contexts") == contexts + 1);
        orphan = cuda::float_from_data(
                     ruda::tensor_data::from_values(std::vector<float>{1, 2, 3}, {3}).value(),
                     short_lived)
                     .value();
        ruda::gradients_params grads;
        grads.insert<cuda>(ruda::param_id{1}, *orphan);
        BOOST_REQUIRE((cuda_snapshot(grads)).has_value()); // pins a record buffer, returned to the pool
    }
    // The uploaded tensor still holds its memory and the context, not the device.
    BOOST_TEST(count("fake_cuda_device_allocations") == allocations + 1);
    ruda::gradients_params grads;
    grads.insert<cuda>(ruda::param_id{1}, *orphan);
    auto record = cuda_snapshot(grads);
    BOOST_REQUIRE(!record);
    BOOST_TEST(record.error() == errc::cancelled);
    grads = ruda::gradients_params{};
    orphan.reset();
    BOOST_TEST(count("fake_cuda_device_allocations") == allocations);
    BOOST_TEST(count("fake_cuda_retained_contexts") == contexts);
    BOOST_TEST(count("fake_cuda_registered_ranges") == registered);
    auto upload = cuda::float_from_data(
        ruda::tensor_data::from_values(std::vector<float>{1}, {1}).value(),
        ruda::cuda_device::from_state({}));
    BOOST_REQUIRE(!upload);
    BOOST_TEST(upload.error() == errc::device_unavailable);
    const std::vector<std::uint8_t> bytes(4);
    auto into = ruda::cuda_device::from_state({}).upload_into(4096, bytes, nullptr);
    BOOST_REQUIRE(!into);
    BOOST_TEST(into.error() == errc::device_unavailable);
}

BOOST_FIXTURE_TEST_CASE(fake_driver_host_functions_never_call_the_driver, fake)
{
    raw_gpu raw{ruda::test::fake_cuda_library()};
    reads_wait_for_the_producer(device, raw, false);
    BOOST_TEST(calls("cuLaunchHostFunc") >= 1);
    BOOST_TEST(count("fake_cuda_calls_from_host_functions") == 0);
}

BOOST_FIXTURE_TEST_CASE(fake_driver_no_device_and_a_refused_context_are_device_unavailable, fake)
{
    control<void(int)>("fake_cuda_set_devices")(0);
    auto none = ruda::cuda_device::open(options());
    BOOST_REQUIRE(!none);
    BOOST_TEST(none.error() == errc::device_unavailable);
    BOOST_TEST(none.error().message().find("sees 0 device(s)") != std::string::npos);
    control<void(int)>("fake_cuda_set_devices")(1);
    fail("cuDevicePrimaryCtxRetain", 1, 999);
    auto refused = ruda::cuda_device::open(options());
    BOOST_REQUIRE(!refused);
    BOOST_TEST(refused.error() == errc::device_unavailable);
    BOOST_TEST(refused.error().message().find("cuDevicePrimaryCtxRetain") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
