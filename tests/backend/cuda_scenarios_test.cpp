// The scenarios of cuda_scenarios.hpp, which the double's suite (cuda_backend_test.cpp) and the
// GPU's suite (cuda_gpu_test.cpp) both run, and the helpers they share.
#include "cuda_scenarios.hpp"

#include "../checkpoint/checkpoint_test_support.hpp"

#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/checkpoint/checkpoint_manager.hpp>
#include <ruda/optim/gradients_params.hpp>
#include <ruda/runtime/blocking_scope.hpp>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

namespace ruda::test {
namespace {

using namespace std::chrono_literals;
using ruda::errc;
using cuda = ruda::cuda_backend;

} // namespace

std::vector<std::uint8_t> random_bytes(std::size_t n, std::uint32_t seed)
{
    std::mt19937 rng{seed};
    std::vector<std::uint8_t> bytes(n);
    for (auto& b : bytes) {
        b = static_cast<std::uint8_t>(rng());
    }
    return bytes;
}

namespace {

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

} // namespace

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

ruda::result<ruda::gradients_params_record> cuda_snapshot(const ruda::gradients_params& grads,
                                                          ruda::snapshot_options options)
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

    auto record = cuda_snapshot(grads);
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
    auto record = cuda_snapshot(grads);
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
    BOOST_REQUIRE((cuda_snapshot(grads)).has_value()); // the record goes, and its buffers back to the pool
    const auto first = device.record_pool_stats();
    BOOST_TEST(first.allocations == 8U);
    auto second = cuda_snapshot(grads);
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

namespace {

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

} // namespace

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
ruda::cuda_device two_piece_window(bool pinned_records)
{
    return ruda::cuda_device::open({.driver_library = ruda::test::fake_cuda_library(),
                                    .piece_bytes = 64 * KiB,
                                    .staging_bytes = 128 * KiB,
                                    .pinned_records = pinned_records})
        .value();
}

} // namespace ruda::test
