// Gradient snapshots: sorted entries with the original dtype, point-in-time capture while
// another coroutine keeps writing, the in-flight limit, the reference's error texts, no
// partial record, cancellation, and the blocking form's refusals.
#include "../support/async_test.hpp"

#include <ruda/backend/async_backend.hpp>
#include <ruda/backend/cpu_backend.hpp>
#include <ruda/optim/async_snapshot.hpp>
#include <ruda/optim/gradients_params.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/use_future.hpp>
#include <future>
#include <thread>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/test/unit_test.hpp>

namespace {

using namespace std::chrono_literals;
using ruda::errc;
using cpu = ruda::cpu_backend;
using gpu = ruda::async_backend;

ruda::tensor_data floats(std::vector<float> values)
{
    const std::size_t n = values.size();
    return ruda::tensor_data::from_values(std::move(values), {n}).value();
}

ruda::gradients_params device_grads(const ruda::async_device& device, std::size_t count)
{
    ruda::gradients_params grads;
    for (std::size_t i = 0; i < count; ++i) {
        grads.insert<gpu>(ruda::param_id{100 - i},
                          gpu::float_from_data(floats({float(i), 0.5F}), device).value());
    }
    return grads;
}

// Keeps replacing and adding gradients until told to stop, yielding between writes.
boost::asio::awaitable<ruda::result<int>> keep_writing(ruda::gradients_params& grads,
                                                       const ruda::async_device& device,
                                                       const bool& stop)
{
    boost::asio::steady_timer tick{co_await boost::asio::this_coro::executor};
    int writes = 0;
    while (!stop) {
        grads.insert<gpu>(ruda::param_id{100}, gpu::float_from_data(floats({-1, -1}), device).value());
        grads.insert<gpu>(ruda::param_id{1000 + std::uint64_t(writes)},
                          gpu::float_from_data(floats({-2, -2}), device).value());
        ++writes;
        tick.expires_after(1ms);
        co_await tick.async_wait(boost::asio::use_awaitable);
    }
    co_return writes;
}

} // namespace

BOOST_AUTO_TEST_SUITE(optim_snapshot)

BOOST_AUTO_TEST_CASE(entries_are_sorted_with_the_original_dtype)
{
    const ruda::test::watchdog guard{"entries_are_sorted_with_the_original_dtype"};
    ruda::gradients_params grads;
    const auto half = floats({1.5F, 2.5F}).convert(ruda::dtype::bf16()).value();
    grads.insert<cpu>(ruda::param_id{30}, cpu::float_from_data(half, {}).value());
    grads.insert<cpu>(ruda::param_id{10}, cpu::float_from_data(floats({3}), {}).value());
    boost::asio::io_context io;
    auto record = ruda::test::run_to_end(io, grads.to_record_async<cpu>());
    BOOST_REQUIRE(record.has_value());
    BOOST_REQUIRE(*record);
    const auto& entries = record->value().entries();
    BOOST_REQUIRE_EQUAL(entries.size(), 2U);
    BOOST_TEST(entries[0].id.val() == 10U);
    BOOST_TEST(entries[0].dtype == ruda::dtype::f32());
    BOOST_TEST(entries[1].id.val() == 30U);
    BOOST_TEST(entries[1].dtype == ruda::dtype::bf16());
    BOOST_TEST(entries[1].data == half);
}

BOOST_AUTO_TEST_CASE(names_go_from_the_container_into_the_record_and_back)
{
    const ruda::test::watchdog guard{"names_go_from_the_container_into_the_record_and_back"};
    ruda::gradients_params grads;
    grads.insert<cpu>(ruda::param_id{2}, cpu::float_from_data(floats({1}), {}).value(), "fc1.bias");
    grads.insert<cpu>(ruda::param_id{1}, cpu::float_from_data(floats({2}), {}).value());
    BOOST_TEST(grads.name(ruda::param_id{2}) == "fc1.bias");
    BOOST_TEST(grads.name(ruda::param_id{1}).empty());
    BOOST_TEST(grads.name(ruda::param_id{3}).empty());
    const auto record = grads.try_to_record<cpu>().value();
    BOOST_TEST(record.entries()[0].name.empty());
    BOOST_TEST(record.entries()[1].name == "fc1.bias");
    BOOST_TEST(record.into_item<ruda::half_precision>().value().entries()[1].name == "fc1.bias");
    const auto restored = ruda::gradients_params::from_record<cpu>(record, {}).value();
    BOOST_TEST(restored.name(ruda::param_id{2}) == "fc1.bias");
    grads.insert<cpu>(ruda::param_id{2}, cpu::float_from_data(floats({1}), {}).value());
    BOOST_TEST(grads.name(ruda::param_id{2}).empty()); // replaced, name and all

    // Through the gather too, on a backend whose reads wait.
    boost::asio::io_context io;
    const ruda::async_device device{{.latency = 1ms}};
    ruda::gradients_params on_device;
    on_device.insert<gpu>(ruda::param_id{5}, gpu::float_from_data(floats({3}), device).value(), "w");
    auto snapshot = ruda::test::run_to_end(io, on_device.to_record_async<gpu>());
    BOOST_REQUIRE(snapshot.has_value());
    BOOST_TEST(snapshot->value().entries()[0].name == "w");
}

BOOST_AUTO_TEST_CASE(an_empty_container_gives_an_empty_record)
{
    const ruda::test::watchdog guard{"an_empty_container_gives_an_empty_record"};
    const ruda::gradients_params grads;
    auto record = grads.try_to_record<cpu>();
    BOOST_REQUIRE(record);
    BOOST_TEST(record.value().entries().empty());
}

BOOST_AUTO_TEST_CASE(holds_exactly_the_handles_present_at_the_call)
{
    const ruda::test::watchdog guard{"holds_exactly_the_handles_present_at_the_call"};
    boost::asio::io_context io;
    const ruda::async_device device{{.latency = 5ms, .concurrent_transfers = 2}};
    auto grads = device_grads(device, 6);
    auto snapshot = ruda::test::spawn(io, grads.to_record_async<gpu>({.max_in_flight = 2}));
    bool stop = false;
    auto writer = ruda::test::spawn(io, keep_writing(grads, device, stop));
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return snapshot->done.load(); }));
    stop = true;
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return writer->done.load(); }));
    BOOST_TEST(writer->value->value() > 2); // the writer really ran during the reads
    BOOST_REQUIRE(snapshot->value.has_value());
    BOOST_REQUIRE(*snapshot->value);
    const auto& entries = snapshot->value->value().entries();
    BOOST_REQUIRE_EQUAL(entries.size(), 6U);
    for (std::size_t k = 0; k < 6; ++k) {
        // ids 95..100 in order; id 100 - i held the value i at the call.
        BOOST_TEST(entries[k].id.val() == 95 + k);
        BOOST_TEST(entries[k].data.values<float>().value()[0] == float(5 - k));
    }
}

BOOST_AUTO_TEST_CASE(the_container_may_die_before_the_reads_run)
{
    const ruda::test::watchdog guard{"the_container_may_die_before_the_reads_run"};
    boost::asio::io_context io;
    const ruda::async_device device{{.latency = 1ms}};
    std::optional<boost::asio::awaitable<ruda::result<ruda::gradients_params_record>>> pending;
    {
        const auto grads = device_grads(device, 3);
        pending.emplace(grads.to_record_async<gpu>());
    }
    auto record = ruda::test::run_to_end(io, std::move(*pending));
    BOOST_REQUIRE(record.has_value());
    BOOST_REQUIRE(*record);
    BOOST_TEST(record->value().entries().size() == 3U);
}

BOOST_AUTO_TEST_CASE(reads_stay_within_max_in_flight)
{
    const ruda::test::watchdog guard{"reads_stay_within_max_in_flight"};
    boost::asio::io_context io;
    const ruda::async_device device{{.latency = 1ms, .concurrent_transfers = 64}};
    const auto grads = device_grads(device, 30);
    auto record = ruda::test::run_to_end(io, grads.to_record_async<gpu>({.max_in_flight = 3}));
    BOOST_REQUIRE(record.has_value());
    BOOST_REQUIRE(*record);
    BOOST_TEST(device.stats().peak_in_flight <= 3U);
    BOOST_TEST(device.stats().reads_issued == 30U);
}

BOOST_AUTO_TEST_CASE(reads_stay_within_max_in_flight_bytes)
{
    const ruda::test::watchdog guard{"reads_stay_within_max_in_flight_bytes"};
    boost::asio::io_context io;
    const ruda::async_device device{{.latency = 1ms, .concurrent_transfers = 64}};
    ruda::gradients_params grads;
    for (std::uint64_t id = 0; id < 12; ++id) {
        grads.insert<gpu>(ruda::param_id{id},
                          gpu::float_from_data(floats(std::vector<float>(256, 1.0F)), device)
                              .value()); // 1 KiB each
    }
    auto record = ruda::test::run_to_end(
        io, grads.to_record_async<gpu>({.max_in_flight = 8, .max_in_flight_bytes = 3 * 1024}));
    BOOST_REQUIRE(record.has_value());
    BOOST_REQUIRE(*record);
    BOOST_TEST(record->value().entries().size() == 12U);
    BOOST_TEST(device.stats().peak_in_flight == 3U);

    // A tensor larger than the whole budget is still read, alone.
    device.reset_peak();
    auto alone = ruda::test::run_to_end(io, grads.to_record_async<gpu>({.max_in_flight_bytes = 100}));
    BOOST_REQUIRE(alone.has_value());
    BOOST_REQUIRE(*alone);
    BOOST_TEST(alone->value().entries().size() == 12U);
    BOOST_TEST(device.stats().peak_in_flight == 1U);
}

BOOST_AUTO_TEST_CASE(progress_is_reported_after_each_read)
{
    const ruda::test::watchdog guard{"progress_is_reported_after_each_read"};
    boost::asio::io_context io;
    const ruda::async_device device{{.latency = 1ms, .concurrent_transfers = 8}};
    ruda::gradients_params grads;
    std::uint64_t total = 0;
    for (std::uint64_t id = 1; id <= 9; ++id) {
        grads.insert<gpu>(ruda::param_id{id},
                          gpu::float_from_data(floats(std::vector<float>(id * 10, 0.5F)), device)
                              .value());
        total += id * 10 * sizeof(float);
    }
    std::vector<ruda::snapshot_progress> seen;
    const auto record_progress = [&seen](const ruda::snapshot_progress& p) { seen.push_back(p); };
    auto record = ruda::test::run_to_end(
        io, grads.to_record_async<gpu>({.max_in_flight = 4, .on_progress = record_progress}));
    BOOST_REQUIRE(record.has_value());
    BOOST_REQUIRE(*record);
    BOOST_REQUIRE_EQUAL(seen.size(), 9U);
    std::uint64_t previous = 0;
    for (std::size_t k = 0; k < seen.size(); ++k) {
        BOOST_TEST(seen[k].tensors_done == k + 1);
        BOOST_TEST(seen[k].tensors_total == 9U);
        BOOST_TEST(seen[k].bytes_total == total);
        BOOST_TEST(seen[k].bytes_done > previous);
        previous = seen[k].bytes_done;
    }
    BOOST_TEST(seen.back().bytes_done == total);

    // The blocking form reports on the calling thread; a failed read is not counted.
    seen.clear();
    BOOST_REQUIRE(grads.try_to_record<gpu>({.on_progress = record_progress}));
    BOOST_TEST(seen.size() == 9U);
    const ruda::async_device failing{{.fail_read = 3}};
    const auto bad = device_grads(failing, 5);
    seen.clear();
    BOOST_TEST(!bad.try_to_record<gpu>({.max_in_flight = 1, .on_progress = record_progress}));
    BOOST_TEST(seen.size() == 2U);
}

BOOST_AUTO_TEST_CASE(a_failed_read_names_the_parameter_and_returns_no_record)
{
    const ruda::test::watchdog guard{"a_failed_read_names_the_parameter_and_returns_no_record"};
    boost::asio::io_context io;
    const ruda::async_device device{{.latency = 1ms, .fail_read = 2}};
    const auto grads = device_grads(device, 5);
    auto record = ruda::test::run_to_end(io, grads.to_record_async<gpu>({.max_in_flight = 1}));
    BOOST_REQUIRE(record.has_value());
    BOOST_REQUIRE(!*record);
    BOOST_TEST(record->error() == errc::read_failed);
    // The second read in id order is parameter 97.
    BOOST_TEST(record->error().message().find("Reading gradient for parameter 97: ") == 0U);
    BOOST_TEST(device.stats().reads_issued == 2U);

    // A parameter inserted with a name is named by it too.
    const ruda::async_device failing{{.fail_read = 1}};
    ruda::gradients_params named;
    named.insert<gpu>(ruda::param_id{7}, gpu::float_from_data(floats({1.0F}), failing).value(),
                      "fc1.weight");
    auto failed = ruda::test::run_to_end(io, named.to_record_async<gpu>());
    BOOST_REQUIRE(failed.has_value());
    BOOST_REQUIRE(!*failed);
    BOOST_TEST(failed->error().message().find("Reading gradient for parameter 7 (fc1.weight): ") ==
               0U);
}

BOOST_AUTO_TEST_CASE(a_gradient_of_another_backend_is_an_error)
{
    const ruda::test::watchdog guard{"a_gradient_of_another_backend_is_an_error"};
    const ruda::async_device device;
    auto grads = device_grads(device, 2);
    grads.insert<cpu>(ruda::param_id{5}, cpu::float_from_data(floats({1}), {}).value());
    auto record = grads.try_to_record<gpu>();
    BOOST_REQUIRE(!record);
    BOOST_TEST(record.error() == errc::backend_mismatch);
    BOOST_TEST(record.error().message().find("Missing gradient for parameter 5") == 0U);
}

BOOST_AUTO_TEST_CASE(cancelling_the_snapshot_cancels_the_reads)
{
    const ruda::test::watchdog guard{"cancelling_the_snapshot_cancels_the_reads"};
    boost::asio::io_context io;
    const ruda::async_device device{{.concurrent_transfers = 8, .hang_reads = true}};
    const auto grads = device_grads(device, 20);
    boost::asio::cancellation_signal cancel;
    auto out = ruda::test::spawn(io, grads.to_record_async<gpu>(), &cancel);
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return device.stats().in_flight == 8; }));
    cancel.emit(boost::asio::cancellation_type::terminal);
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return out->done.load(); }));
    BOOST_REQUIRE(out->value.has_value());
    BOOST_REQUIRE(!*out->value);
    BOOST_TEST(out->value->error() == errc::cancelled);
    BOOST_TEST(out->value->error().message() == "Snapshot cancelled after 0 of 20 gradients were read");
    BOOST_TEST(device.stats().in_flight == 0U);
}

BOOST_AUTO_TEST_CASE(try_to_record_reads_on_a_blocking_device)
{
    const ruda::test::watchdog guard{"try_to_record_reads_on_a_blocking_device"};
    const ruda::async_device device{{.latency = 1ms}};
    const auto grads = device_grads(device, 4);
    auto record = grads.try_to_record<gpu>();
    BOOST_REQUIRE(record);
    BOOST_TEST(record.value().entries().size() == 4U);
}

BOOST_AUTO_TEST_CASE(try_to_record_refuses_without_reading)
{
    const ruda::test::watchdog guard{"try_to_record_refuses_without_reading"};
    const ruda::async_device web{{.blocking_reads = false}};
    const auto grads = device_grads(web, 3);
    auto refused = grads.try_to_record<gpu>();
    BOOST_REQUIRE(!refused);
    BOOST_TEST(refused.error() == errc::sync_read_unavailable);
    BOOST_TEST(refused.error().message() ==
               "Synchronous gradient read is unavailable: the device cannot complete a blocking "
               "read; use to_record_async");
    BOOST_TEST(web.stats().reads_issued == 0U);

    const ruda::async_device device;
    const auto on_loop = device_grads(device, 3);
    {
        const ruda::no_blocking_scope event_loop;
        BOOST_TEST(on_loop.try_to_record<gpu>().error() == errc::sync_read_unavailable);
    }
    const auto predicate = on_loop.try_to_record<gpu>({.refuse_if = [] { return true; }});
    BOOST_TEST(predicate.error() == errc::sync_read_unavailable);
    BOOST_TEST(predicate.error().message() == "Synchronous gradient read is unavailable: refused "
                                              "by the caller's predicate; use to_record_async");
    BOOST_TEST(device.stats().reads_issued == 0U);
}

BOOST_AUTO_TEST_CASE(try_to_record_times_out_on_a_hung_device)
{
    const ruda::test::watchdog guard{"try_to_record_times_out_on_a_hung_device"};
    const ruda::async_device device{{.hang_reads = true}};
    const auto grads = device_grads(device, 3);
    auto record = grads.try_to_record<gpu>({.deadline = 30ms});
    BOOST_REQUIRE(!record);
    BOOST_TEST(record.error() == errc::timed_out);
    BOOST_TEST(device.stats().in_flight == 0U);
}

namespace {

boost::asio::awaitable<ruda::result<ruda::gradients_params_record>>
snapshot_awaited(const ruda::gradients_params& grads)
{
    co_return co_await ruda::async_snapshot<gpu>(grads, {}, boost::asio::use_awaitable);
}

boost::asio::awaitable<ruda::result<ruda::gradients_params_record>>
snapshot_as_tuple(const ruda::gradients_params& grads)
{
    auto [record] = co_await ruda::async_snapshot<gpu>(grads, boost::asio::as_tuple(boost::asio::use_awaitable));
    co_return record;
}

} // namespace

BOOST_AUTO_TEST_CASE(async_snapshot_takes_any_completion_token)
{
    const ruda::test::watchdog guard{"async_snapshot_takes_any_completion_token"};
    boost::asio::io_context io;
    const ruda::async_device device{{.latency = 1ms}};
    const auto grads = device_grads(device, 4);

    auto awaited = ruda::test::run_to_end(io, snapshot_awaited(grads));
    BOOST_REQUIRE(awaited.has_value());
    BOOST_REQUIRE(*awaited);
    BOOST_TEST(awaited->value().entries().size() == 4U);

    std::optional<ruda::result<ruda::gradients_params_record>> called; // default options
    ruda::async_snapshot<gpu>(grads, boost::asio::bind_executor(io, [&](auto r) {
                                  called.emplace(std::move(r));
                              }));
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return called.has_value(); }));
    BOOST_TEST((called->value() == awaited->value()));

    auto op = ruda::async_snapshot<gpu>(grads, boost::asio::deferred);
    std::optional<ruda::result<ruda::gradients_params_record>> deferred_result;
    std::move(op)(boost::asio::bind_executor(io, [&](auto r) { deferred_result.emplace(std::move(r)); }));
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return deferred_result.has_value(); }));
    BOOST_TEST((deferred_result->value() == awaited->value()));

    auto work = boost::asio::make_work_guard(io);
    io.restart();
    std::thread runner{[&] { io.run(); }};
    auto future = ruda::async_snapshot<gpu>(grads, {},
                                            boost::asio::bind_executor(io, boost::asio::use_future));
    const auto from_future = future.get();
    work.reset();
    runner.join();
    BOOST_TEST((from_future.value() == awaited->value()));

    // as_tuple: a one-element tuple of the result (an error code and a value would not bind).
    auto tupled = ruda::test::run_to_end(io, snapshot_as_tuple(grads));
    BOOST_REQUIRE(tupled.has_value());
    BOOST_TEST((tupled->value() == awaited->value()));

    // Failures arrive through the token too, code and message.
    const ruda::async_device failing{{.fail_read = 1}};
    const auto bad = device_grads(failing, 2);
    std::optional<ruda::result<ruda::gradients_params_record>> failed;
    ruda::async_snapshot<gpu>(bad, {}, boost::asio::bind_executor(io, [&](auto r) {
                                  failed.emplace(std::move(r));
                              }));
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return failed.has_value(); }));
    BOOST_TEST(failed->error() == errc::read_failed);
    BOOST_TEST(failed->error().message().find("Reading gradient for parameter") == 0U,
               failed->error().message());
}

BOOST_AUTO_TEST_CASE(async_snapshot_runs_on_the_executor_it_is_given)
{
    const ruda::test::watchdog guard{"async_snapshot_runs_on_the_executor_it_is_given"};
    boost::asio::io_context io;
    const ruda::async_device device{{.latency = 1ms}};
    const auto grads = device_grads(device, 3);

    // A plain callback with the executor as the first argument: it runs there, on `io`.
    std::optional<ruda::result<ruda::gradients_params_record>> called;
    std::thread::id ran_on;
    ruda::async_snapshot<gpu>(io.get_executor(), grads, [&](auto r) {
        ran_on = std::this_thread::get_id();
        called.emplace(std::move(r));
    });
    BOOST_TEST(!called.has_value()); // never inline
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return called.has_value(); }));
    BOOST_REQUIRE(*called);
    BOOST_TEST(called->value().entries().size() == 3U);
    BOOST_TEST((ran_on == std::this_thread::get_id()));

    // use_future with the executor given: the reads run on `io`, which nothing runs yet.
    auto future = ruda::async_snapshot<gpu>(io.get_executor(), grads, {.max_in_flight = 2},
                                            boost::asio::use_future);
    BOOST_TEST((future.wait_for(20ms) == std::future_status::timeout));
    io.restart();
    io.run();
    BOOST_TEST((future.get().value() == called->value()));
}

namespace {

// Starts a snapshot of reads that never finish, then cancels it through the token's slot with
// `type` once `io` has run for a while (or at once, before it ever ran).
ruda::result<ruda::gradients_params_record> cancelled_snapshot(boost::asio::cancellation_type type,
                                                               bool before_start)
{
    boost::asio::io_context io;
    const ruda::async_device hung{{.hang_reads = true}};
    const auto grads = device_grads(hung, 4);
    boost::asio::cancellation_signal cancel;
    std::optional<ruda::result<ruda::gradients_params_record>> outcome;
    ruda::async_snapshot<gpu>(grads, {.max_in_flight = 2},
                              boost::asio::bind_cancellation_slot(
                                  cancel.slot(), boost::asio::bind_executor(io, [&](auto r) {
                                      outcome.emplace(std::move(r));
                                  })));
    if (!before_start) {
        BOOST_TEST(!ruda::test::run_until(io, [&] { return outcome.has_value(); }, 20ms));
        BOOST_TEST(hung.stats().in_flight == 2U);
    }
    cancel.emit(type);
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return outcome.has_value(); }));
    BOOST_TEST(hung.stats().in_flight == 0U);
    cancel.emit(type); // after the completion: the slot was cleared, nothing happens
    io.restart();
    io.poll();
    return std::move(*outcome);
}

} // namespace

BOOST_AUTO_TEST_CASE(async_snapshot_is_cancelled_through_the_token_slot)
{
    const ruda::test::watchdog guard{"async_snapshot_is_cancelled_through_the_token_slot"};
    using ct = boost::asio::cancellation_type;
    for (const auto type : {ct::terminal, ct::partial, ct::total}) {
        for (const bool before_start : {false, true}) {
            const auto outcome = cancelled_snapshot(type, before_start);
            BOOST_REQUIRE(!outcome);
            BOOST_TEST(outcome.error() == errc::cancelled, outcome.error().message());
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()
