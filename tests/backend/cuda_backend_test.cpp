// cuda_device and cuda_backend. Three suites:
// - backend_cuda_no_driver: no driver to open, no device, a driver that fails to start;
// - backend_cuda_fake: everything, against the test double of the driver API (a shared
//   library the tests build, backed by host memory and a thread per stream), which can hold
//   copies at a gate, hold a stream and inject driver errors;
// - backend_cuda_gpu: the tests that need no fault injection, against the real driver; they
//   run where a GPU is present (scripts/gpu-check) and are skipped elsewhere.
#include "../checkpoint/checkpoint_test_support.hpp"
#include "../support/async_test.hpp"
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
using ruda::test::gpu_present;
using ruda::test::raw_gpu;

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;

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

std::vector<std::uint8_t> random_bytes(std::size_t n, std::uint32_t seed)
{
    std::mt19937 rng{seed};
    std::vector<std::uint8_t> bytes(n);
    for (auto& b : bytes) {
        b = static_cast<std::uint8_t>(rng());
    }
    return bytes;
}

// Random bit patterns, led by the ones a careless copy or conversion would change: NaN
// payloads (quiet and signalling), both zeros, subnormals, infinities.
std::vector<std::uint8_t> float_bit_patterns(ruda::dtype type, std::size_t count, std::uint32_t seed)
{
    auto bytes = random_bytes(count * type.size(), seed);
    std::vector<std::uint64_t> special;
    switch (type.size()) {
    case 2: special = {0x7c01, 0xfe01, 0x8000, 0x0000, 0x0001, 0x83ff, 0x7c00, 0x7fbf}; break;
    case 4:
        special = {0x7fc00001, 0xffbfffff, 0x80000000, 0x00000000, 0x00000001, 0x807fffff,
                   0x7f800000, 0x7f800001};
        break;
    default:
        special = {0x7ff8000000000001, 0xfff0000000000001, 0x8000000000000000, 0,
                   1,                  0x800fffffffffffff, 0x7ff0000000000000};
    }
    for (std::size_t i = 0; i < special.size() && i < count; ++i) {
        std::memcpy(bytes.data() + i * type.size(), &special[i], type.size());
    }
    return bytes;
}

ruda::dtype q8s()
{
    return ruda::dtype::qfloat({.value = ruda::quant_value::q8s,
                                .param = ruda::quant_param::f32,
                                .store = ruda::quant_store::native(),
                                .level = ruda::quant_level::tensor(),
                                .mode = ruda::quant_mode::symmetric});
}

// A borrowed tensor over fresh device memory holding `bytes`.
cuda::float_tensor borrowed(raw_gpu& raw, const ruda::cuda_device& device,
                            const std::vector<std::uint8_t>& bytes, ruda::dtype type,
                            ruda::cuda_stream producer)
{
    auto memory = raw.alloc(bytes.size());
    raw.write(*memory, bytes, producer);
    return cuda::borrow(device, *memory, {bytes.size() / type.size()}, type, producer, memory)
        .value();
}

ruda::result<ruda::gradients_params_record> snapshot(const ruda::gradients_params& grads,
                                                     ruda::snapshot_options options = {})
{
    drained_io context;
    auto& io = context.io;
    auto record = ruda::test::run_to_end(io, grads.to_record_async<cuda>(std::move(options)));
    BOOST_REQUIRE(record.has_value());
    return std::move(*record);
}

std::vector<std::uint8_t> bytes_of(const ruda::gradient_entry& entry)
{
    const auto& b = entry.data.bytes();
    return {b.begin(), b.end()};
}

// Every float dtype and a quantized one, uploaded, snapshotted, written to a checkpoint file,
// loaded, restored to the device and read back: the same bits at every step.
void round_trip_every_dtype(const ruda::cuda_device& device, raw_gpu& raw)
{
    const ruda::test::watchdog guard{"cuda round trip"};
    const std::vector<ruda::dtype> floats{ruda::dtype::f64(), ruda::dtype::f32(),
                                          ruda::dtype::flex32(), ruda::dtype::f16(),
                                          ruda::dtype::bf16()};
    ruda::gradients_params grads;
    std::map<std::uint64_t, std::vector<std::uint8_t>> expected;
    std::uint64_t id = 1;
    for (const ruda::dtype type : floats) {
        for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{4099}}) {
            auto bytes = float_bit_patterns(type, count, static_cast<std::uint32_t>(id));
            auto data = ruda::tensor_data{ruda::storage::copy_of(bytes), {count}, type};
            grads.insert<cuda>(ruda::param_id{id}, cuda::float_from_data(std::move(data), device).value());
            expected[id++] = std::move(bytes);
        }
    }
    std::vector<std::uint8_t> quantized = random_bytes(1000, 7);
    const float scale = 0.5F;
    std::memcpy(quantized.data() + 996, &scale, sizeof scale);
    grads.insert<cuda>(ruda::param_id{id},
                       cuda::q_from_data({ruda::storage::copy_of(quantized), {996}, q8s()}, device)
                           .value());
    expected[id] = quantized;

    auto record = snapshot(grads);
    BOOST_REQUIRE_MESSAGE(record.has_value(), (record.has_value() ? "" : record.error().message()));
    BOOST_REQUIRE_EQUAL(record.value().entries().size(), expected.size());
    for (const auto& entry : record.value().entries()) {
        BOOST_TEST(bytes_of(entry) == expected.at(entry.id.val()), "parameter " << entry.id);
    }

    const auto path = std::filesystem::temp_directory_path() /
                      ("ruda-cuda-round-trip-" + std::to_string(::getpid()) + ".ruda");
    BOOST_REQUIRE(ruda::save_checkpoint_file(path, ruda::checkpoint{std::move(record).value()}).has_value());
    auto loaded = ruda::load_checkpoint_file(path);
    std::filesystem::remove(path);
    BOOST_REQUIRE((loaded).has_value());
    auto restored = ruda::gradients_params::from_record<cuda>(std::move(loaded).value().gradients(),
                                                              device);
    BOOST_REQUIRE_MESSAGE(restored.has_value(), (restored.has_value() ? "" : restored.error().message()));

    const ruda::cuda_stream reader = raw.new_stream();
    BOOST_REQUIRE((device.order_after_uploads(reader)).has_value());
    for (const auto& [tensor_id, bytes] : expected) {
        const auto tensor = restored.value().get<cuda>(ruda::param_id{tensor_id});
        BOOST_REQUIRE((tensor).has_value());
        const auto address = std::visit([](const auto& t) { return t.address(); }, *tensor);
        BOOST_TEST(raw.read(address, bytes.size(), reader) == bytes, "parameter " << tensor_id);
    }
    raw.destroy_stream(reader);
}

// A read waits for the work the producer queued before it.
void reads_wait_for_the_producer(const ruda::cuda_device& device, raw_gpu& raw, bool hold)
{
    const ruda::test::watchdog guard{"cuda producer ordering"};
    const ruda::cuda_stream producer = raw.new_stream();
    const auto old_values = random_bytes(4 * MiB, 1);
    const auto new_values = random_bytes(4 * MiB, 2);
    ruda::gradients_params grads;
    grads.insert<cuda>(ruda::param_id{1},
                       borrowed(raw, device, old_values, ruda::dtype::f32(), producer));
    const auto tensor = std::get<cuda::float_tensor>(*grads.get<cuda>(ruda::param_id{1}));
    if (hold) {
        fake::hold_stream(producer, true);
    }
    raw.write_async(tensor.address(), new_values, producer);

    drained_io context;
    auto& io = context.io;
    auto out = ruda::test::spawn(io, grads.to_record_async<cuda>());
    if (hold) {
        // The trainer's write has not run, so neither may the read.
        BOOST_TEST(!ruda::test::run_until(io, [&] { return out->done.load(); }, 200ms));
        fake::hold_stream(producer, false);
    }
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return out->done.load(); }));
    BOOST_REQUIRE(out->value && out->value->has_value());
    BOOST_TEST(bytes_of(out->value->value().entries().at(0)) == new_values);
    raw.finish(producer);
    raw.destroy_stream(producer);
}

// A restore into memory the trainer owns, in pieces: after the trainer's work on it so far,
// and before the trainer's later work. With `hold`, the trainer's stream is held first, so the
// upload must wait for it (the bytes fit the staging ring: more would wait for room in it, and
// so for the held stream).
void uploads_into_the_trainers_memory_in_order(const std::string& library, raw_gpu& raw,
                                               bool hold)
{
    const ruda::test::watchdog guard{"cuda upload into"};
    auto device = ruda::cuda_device::open({.driver_library = library,
                                           .piece_bytes = 64 * KiB,
                                           .staging_bytes = 256 * KiB})
                      .value();
    const ruda::cuda_stream trainer = raw.new_stream();
    const auto old_values = random_bytes(3 * 64 * KiB + 7, 5);
    const auto restored = random_bytes(3 * 64 * KiB + 7, 6);
    auto memory = raw.alloc(restored.size() + 64);
    const std::vector<std::uint8_t> zeros(restored.size() + 64);
    raw.write(*memory, zeros, trainer);
    if (hold) {
        fake::hold_stream(trainer, true);
    }
    raw.write_async(*memory, old_values, trainer); // the trainer's last step, still queued
    const auto uploads = device.stats().uploads;
    // At an offset into the allocation, as a tensor's storage may be.
    const auto result = device.upload_into(*memory + 32, restored, trainer);
    BOOST_REQUIRE_MESSAGE(result.has_value(), (result ? "" : result.error().message()));
    BOOST_TEST(device.stats().uploads == uploads + 1);
    if (hold) {
        // Device memory is the double's host memory: nothing may have landed yet.
        std::this_thread::sleep_for(200ms);
        BOOST_TEST(std::memcmp(reinterpret_cast<const void*>(*memory), zeros.data(),
                               zeros.size()) == 0);
        fake::hold_stream(trainer, false);
    }
    // The trainer's next read sees its old bytes around the restored ones.
    auto expected = old_values;
    expected.resize(zeros.size());
    std::copy(restored.begin(), restored.end(), expected.begin() + 32);
    BOOST_TEST(raw.read(*memory, expected.size(), trainer) == expected);
    raw.finish(trainer);
    raw.destroy_stream(trainer);
}

// A tensor many pieces long, straight into pinned records or through the staging ring.
void large_tensors_go_in_pieces(const std::string& library, raw_gpu& raw, bool pinned_records)
{
    const ruda::test::watchdog guard{"cuda pieces"};
    auto device = ruda::cuda_device::open({.driver_library = library,
                                           .piece_bytes = 64 * KiB,
                                           .staging_bytes = 256 * KiB,
                                           .pinned_records = pinned_records})
                      .value();
    const ruda::cuda_stream producer = raw.new_stream();
    const auto values = random_bytes(MiB + 100 * 4, 3);
    const auto small = random_bytes(4 * 10, 4);
    ruda::gradients_params grads;
    grads.insert<cuda>(ruda::param_id{1}, borrowed(raw, device, values, ruda::dtype::f32(), producer));
    grads.insert<cuda>(ruda::param_id{2}, borrowed(raw, device, small, ruda::dtype::f32(), producer));
    auto record = snapshot(grads);
    BOOST_REQUIRE_MESSAGE(record.has_value(), (record.has_value() ? "" : record.error().message()));
    BOOST_TEST(bytes_of(record.value().entries().at(0)) == values);
    BOOST_TEST(bytes_of(record.value().entries().at(1)) == small);
    const auto stats = device.stats();
    BOOST_TEST(stats.pieces == (values.size() + 64 * KiB - 1) / (64 * KiB) + 1);
    BOOST_TEST(stats.reads_completed == 2U);
    BOOST_TEST(stats.bytes_read == values.size() + small.size());
    // The copy stream never holds more than the ring's worth, so there were several batches.
    BOOST_TEST(stats.completions >= values.size() / (256 * KiB));
    raw.destroy_stream(producer);
}

void record_buffers_are_pinned_once_and_reused(const ruda::cuda_device& device, raw_gpu& raw)
{
    const ruda::cuda_stream producer = raw.new_stream();
    ruda::gradients_params grads;
    for (std::uint64_t id = 1; id <= 8; ++id) {
        grads.insert<cuda>(ruda::param_id{id},
                           borrowed(raw, device, random_bytes(64 * KiB, static_cast<std::uint32_t>(id)),
                                    ruda::dtype::f32(), producer));
    }
    BOOST_REQUIRE((snapshot(grads)).has_value()); // the record goes, and its buffers back to the pool
    const auto first = device.record_pool_stats();
    BOOST_TEST(first.allocations == 8U);
    auto second = snapshot(grads);
    BOOST_REQUIRE((second).has_value());
    const auto after = device.record_pool_stats();
    BOOST_TEST(after.allocations == first.allocations);
    BOOST_TEST(after.reuses == first.reuses + 8);
    raw.destroy_stream(producer);
}

// With device staging the snapshot is fixed when it is taken: the trainer's next write, queued
// right after the call, does not reach the record. A tensor too large for the buffer is read
// in place.
void device_staging_fixes_the_snapshot_at_the_call(const std::string& library, raw_gpu& raw)
{
    const ruda::test::watchdog guard{"cuda device staging"};
    auto device = ruda::cuda_device::open({.driver_library = library,
                                           .device_staging_bytes = 256 * KiB})
                      .value();
    const ruda::cuda_stream producer = raw.new_stream();
    const auto before = random_bytes(64 * KiB, 5);
    const auto after = random_bytes(64 * KiB, 6);
    const auto large = random_bytes(MiB, 7);
    ruda::gradients_params grads;
    grads.insert<cuda>(ruda::param_id{1}, borrowed(raw, device, before, ruda::dtype::f32(), producer));
    grads.insert<cuda>(ruda::param_id{2}, borrowed(raw, device, large, ruda::dtype::f32(), producer));
    const auto tensor = std::get<cuda::float_tensor>(*grads.get<cuda>(ruda::param_id{1}));

    auto pending = grads.to_record_async<cuda>();
    raw.write_async(tensor.address(), after, producer); // the next step, not waited for
    drained_io context;
    auto& io = context.io;
    auto record = ruda::test::run_to_end(io, std::move(pending));
    BOOST_REQUIRE(record && record->has_value());
    BOOST_TEST(bytes_of(record->value().entries().at(0)) == before);
    BOOST_TEST(bytes_of(record->value().entries().at(1)) == large);
    BOOST_TEST(device.stats().staged_tensors == 1U);
    BOOST_TEST(device.stats().unstaged_tensors == 1U);
    raw.finish(producer);
    BOOST_TEST(raw.read(tensor.address(), after.size(), producer) == after);
    raw.destroy_stream(producer);
}

// checkpoint_manager::async_save with device staging: the trainer's next step, queued right
// after the call, does not reach the checkpoint.
void async_save_with_device_staging_lets_the_trainer_go_on_at_once(const std::string& library,
                                                                   raw_gpu& raw)
{
    const ruda::test::watchdog guard{"cuda async_save"};
    auto staging = ruda::cuda_device::open({.driver_library = library,
                                            .device_staging_bytes = MiB})
                       .value();
    const ruda::cuda_stream producer = raw.new_stream();
    const auto at_the_call = random_bytes(64 * KiB, 13);
    const auto next_step = random_bytes(64 * KiB, 14);
    ruda::gradients_params grads;
    grads.insert<cuda>(ruda::param_id{1}, borrowed(raw, staging, at_the_call, ruda::dtype::f32(), producer));
    const auto address = std::get<cuda::float_tensor>(*grads.get<cuda>(ruda::param_id{1})).address();

    const ruda::test::temp_dir dir;
    drained_io context; // before the manager: its writer may still post to it
    auto& io = context.io;
    ruda::checkpoint_manager manager{dir.path()};
    std::optional<ruda::result<ruda::pending_save>> staged;
    manager.async_save<cuda>(9, grads, ruda::checkpoint{}, {},
                             boost::asio::bind_executor(io, [&](ruda::result<ruda::pending_save> p) {
                                 staged.emplace(std::move(p));
                             }));
    // The trainer's next step overwrites the gradient before anything has run on the host.
    raw.write_async(address, next_step, producer);
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return staged.has_value(); }));
    BOOST_REQUIRE(staged->has_value());
    BOOST_REQUIRE(staged->value().wait().has_value());
    const auto loaded = manager.load_latest();
    BOOST_REQUIRE(loaded.has_value());
    BOOST_TEST(bytes_of(loaded.value().gradients().entries().at(0)) == at_the_call);
    raw.finish(producer);
    BOOST_TEST(raw.read(address, next_step.size(), producer) == next_step);
    raw.destroy_stream(producer);
}

boost::asio::awaitable<ruda::result<ruda::saved_checkpoint>>
save_once_landed(ruda::checkpoint_manager& manager,
                 boost::asio::awaitable<ruda::result<ruda::gradients_params_record>> weights,
                 boost::asio::awaitable<ruda::result<ruda::gradients_params_record>> grads)
{
    auto weights_record = co_await std::move(weights);
    if (!weights_record) {
        co_return weights_record.error();
    }
    auto grads_record = co_await std::move(grads);
    if (!grads_record) {
        co_return grads_record.error();
    }
    ruda::checkpoint contents{std::move(grads_record).value()};
    contents.put("weights", weights_record.value()).value();
    auto pending =
        co_await manager.async_save_record(3, std::move(contents), boost::asio::use_awaitable);
    if (!pending) {
        co_return pending.error();
    }
    co_return co_await pending.value().async_wait(boost::asio::use_awaitable);
}

// A model's weights and gradients snapshotted apart, each fixed on the device at its call, then
// written once both have landed (`async_save_record`): the trainer's next step, queued right
// after the calls, reaches neither.
void weights_and_gradients_staged_apart_are_saved_once_landed(const std::string& library,
                                                              raw_gpu& raw)
{
    const ruda::test::watchdog guard{"cuda weights and gradients staged apart"};
    auto staging = ruda::cuda_device::open({.driver_library = library,
                                            .device_staging_bytes = MiB})
                       .value();
    const ruda::cuda_stream producer = raw.new_stream();
    const auto weight = random_bytes(64 * KiB, 15);
    const auto grad = random_bytes(64 * KiB, 16);
    const auto next_step = random_bytes(64 * KiB, 17);
    ruda::gradients_params values;
    ruda::gradients_params grads;
    values.insert<cuda>(ruda::param_id{1}, borrowed(raw, staging, weight, ruda::dtype::f32(), producer));
    grads.insert<cuda>(ruda::param_id{1}, borrowed(raw, staging, grad, ruda::dtype::f32(), producer));
    const auto address_of = [](const ruda::gradients_params& p) {
        return std::get<cuda::float_tensor>(*p.get<cuda>(ruda::param_id{1})).address();
    };

    const ruda::test::temp_dir dir;
    drained_io context; // before the manager: its writer may still post to it
    auto& io = context.io;
    ruda::checkpoint_manager manager{dir.path()};
    auto weights_landed = values.to_record_async<cuda>();
    auto grads_landed = grads.to_record_async<cuda>();
    BOOST_TEST(staging.stats().staged_tensors == 2U);
    // The optimizer step and the next backward pass, before anything has run on the host.
    raw.write_async(address_of(values), next_step, producer);
    raw.write_async(address_of(grads), next_step, producer);
    auto saved = ruda::test::run_to_end(
        io, save_once_landed(manager, std::move(weights_landed), std::move(grads_landed)));
    BOOST_REQUIRE(saved.has_value());
    BOOST_REQUIRE_MESSAGE(saved->has_value(), (saved->has_value() ? "" : saved->error().message()));
    const auto loaded = manager.load_latest();
    BOOST_REQUIRE(loaded.has_value());
    ruda::gradients_params_record weights_loaded;
    BOOST_REQUIRE(loaded.value().get("weights", weights_loaded).has_value());
    BOOST_TEST(bytes_of(weights_loaded.entries().at(0)) == weight);
    BOOST_TEST(bytes_of(loaded.value().gradients().entries().at(0)) == grad);
    raw.finish(producer);
    BOOST_TEST(raw.read(address_of(grads), next_step.size(), producer) == next_step);
    raw.destroy_stream(producer);
}

void sync_snapshots_work_from_a_plain_thread(const ruda::cuda_device& device, raw_gpu& raw)
{
    const ruda::test::watchdog guard{"cuda try_to_record"};
    const ruda::cuda_stream producer = raw.new_stream();
    const auto values = random_bytes(256 * KiB, 8);
    ruda::gradients_params grads;
    grads.insert<cuda>(ruda::param_id{3}, borrowed(raw, device, values, ruda::dtype::f32(), producer));
    auto record = grads.try_to_record<cuda>();
    BOOST_REQUIRE_MESSAGE(record.has_value(), (record.has_value() ? "" : record.error().message()));
    BOOST_TEST(bytes_of(record.value().entries().at(0)) == values);
    {
        const ruda::no_blocking_scope event_loop;
        auto refused = grads.try_to_record<cuda>();
        BOOST_REQUIRE(!refused);
        BOOST_TEST(refused.error() == errc::sync_read_unavailable);
    }
    raw.destroy_stream(producer);
}

// A device whose copy window two pieces of 64 KiB fill: a read of 1 MiB has 2 of its 16
// pieces queued while the copies are held.
ruda::cuda_device two_piece_window(bool pinned_records = true)
{
    return ruda::cuda_device::open({.driver_library = ruda::test::fake_cuda_library(),
                                    .piece_bytes = 64 * KiB,
                                    .staging_bytes = 128 * KiB,
                                    .pinned_records = pinned_records})
        .value();
}

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
    auto record = snapshot(grads); // eight reads in flight: the runs are decided at the call
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
    auto again = snapshot(grads);
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
    auto record = snapshot(grads);
    BOOST_REQUIRE(!record);
    BOOST_TEST(record.error() == errc::read_failed);
    BOOST_TEST(record.error().message().find("parameter 4") != std::string::npos);
    BOOST_TEST(record.error().message().find("cuMemcpyDtoHAsync") != std::string::npos);
    BOOST_TEST(record.error().message().find("CUDA_ERROR_ILLEGAL_ADDRESS") != std::string::npos);
    // The device goes on: the next snapshot is whole.
    auto again = snapshot(grads);
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
        BOOST_REQUIRE((snapshot(grads)).has_value()); // pins a record buffer, returned to the pool
    }
    // The uploaded tensor still holds its memory and the context, not the device.
    BOOST_TEST(count("fake_cuda_device_allocations") == allocations + 1);
    ruda::gradients_params grads;
    grads.insert<cuda>(ruda::param_id{1}, *orphan);
    auto record = snapshot(grads);
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
