// checkpoint_manager's asynchronous saves: the two completions (staged, then durable), failures
// of the snapshot and of the write, cancellation through the token's slot, several groups read
// by one snapshot, and the bounded queue of saves.
#include "../support/async_test.hpp"
#include "checkpoint_test_support.hpp"
#include "manager_test_support.hpp"

#include <ruda/backend/async_backend.hpp>
#include <ruda/checkpoint/checkpoint_manager.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/test/unit_test.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <condition_variable>
#include <mutex>
#include <optional>

namespace {

using ruda::test::step_in;
using namespace std::chrono_literals;
using ruda::errc;
using ruda::test::temp_dir;
using gpu = ruda::async_backend;
using ruda::test::as_saved;
using ruda::test::contents_of;
using ruda::test::counting_ops;
using ruda::test::tmp_files;

boost::asio::awaitable<ruda::result<ruda::saved_checkpoint>>
save_then_change(ruda::checkpoint_manager& manager, ruda::gradients_params& grads,
                 const ruda::async_device& device, counting_ops& ops, bool& staged_before_durable)
{
    ruda::checkpoint state;
    state.put("step", std::uint64_t{42}).value();
    auto pending = co_await manager.async_save<gpu>(42, grads, std::move(state), {},
                                                    boost::asio::use_awaitable);
    if (!pending) {
        co_return pending.error();
    }
    staged_before_durable = !pending.value().done(); // fsync is held: not on disk yet
    // Training goes on: a new gradient for parameter 1 must not reach the file.
    grads.insert<gpu>(ruda::param_id{1},
                      gpu::float_from_data(
                          ruda::tensor_data::from_values(std::vector<float>{-1, -1}, {2}).value(),
                          device)
                          .value());
    ops.release();
    co_return co_await pending.value().async_wait(boost::asio::use_awaitable);
}

ruda::gradients_params two_gradients(const ruda::async_device& device)
{
    ruda::gradients_params grads;
    for (std::uint64_t id = 1; id <= 2; ++id) {
        grads.insert<gpu>(ruda::param_id{id},
                          gpu::float_from_data(ruda::tensor_data::from_values(
                                                   std::vector<float>{float(id), 0.5F}, {2})
                                                   .value(),
                                               device)
                              .value());
    }
    return grads;
}

} // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_manager_async)

BOOST_AUTO_TEST_CASE(async_save_is_staged_then_durable)
{
    const ruda::test::watchdog guard{"async_save_is_staged_then_durable"};
    const temp_dir dir;
    counting_ops ops;
    ops.hold_fsync();
    // Before the manager, so it outlives the writer thread: run_to_end stops running `io` as
    // soon as the result is in, while the writer may still be returning from its post to it.
    boost::asio::io_context io;
    ruda::checkpoint_manager manager{dir.path(), {.ops = &ops}};
    const ruda::async_device device{{.latency = 2ms}};
    auto grads = two_gradients(device);
    bool staged_before_durable = false;
    auto saved = ruda::test::run_to_end(
        io, save_then_change(manager, grads, device, ops, staged_before_durable));
    BOOST_REQUIRE(saved.has_value());
    BOOST_REQUIRE(*saved);
    BOOST_TEST(staged_before_durable);
    BOOST_TEST(saved->value().step == 42U);

    const auto loaded = manager.load_latest();
    BOOST_REQUIRE(loaded);
    BOOST_TEST(step_in(loaded.value()) == 42U);
    const auto& entries = loaded.value().gradients().entries();
    BOOST_REQUIRE_EQUAL(entries.size(), 2U);
    BOOST_TEST(entries[0].data.values<float>().value()[0] == 1.0F); // as at the call
}

BOOST_AUTO_TEST_CASE(async_save_reports_snapshot_and_write_failures)
{
    const ruda::test::watchdog guard{"async_save_reports_snapshot_and_write_failures"};
    const temp_dir dir;
    boost::asio::io_context io;

    // A read fault: the staged completion fails and nothing is written.
    counting_ops ops;
    ruda::checkpoint_manager manager{dir.path(), {.ops = &ops}};
    const ruda::async_device faulty{{.fail_read = 2}};
    const auto bad = two_gradients(faulty);
    std::optional<ruda::result<ruda::pending_save>> staged;
    manager.async_save<gpu>(1, bad, {}, {}, boost::asio::bind_executor(io, [&](auto&& r) {
                                staged.emplace(std::move(r));
                            }));
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return staged.has_value(); }));
    BOOST_TEST(staged->error() == errc::read_failed);
    BOOST_TEST(staged->error().message().find("Reading gradient for parameter 2") == 0U);
    BOOST_TEST(manager.steps().value().empty());
    BOOST_TEST(ops.calls == 0);

    // A write failure: staged succeeds, durable reports the error; a blocking wait sees it too.
    const ruda::async_device device;
    const auto good = two_gradients(device);
    ops.fail_at = 1;
    staged.reset();
    manager.async_save<gpu>(2, good, {}, boost::asio::bind_executor(io, [&](auto&& r) { // default options
                                staged.emplace(std::move(r));
                            }));
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return staged.has_value(); }));
    BOOST_REQUIRE(*staged);
    const auto durable = staged->value().wait();
    BOOST_TEST(durable.error() == errc::io_error);
    BOOST_TEST(staged->value().done());
    std::optional<ruda::result<ruda::saved_checkpoint>> waited; // waiting after the end works
    staged->value().async_wait(boost::asio::bind_executor(io, [&](auto r) { waited.emplace(r); }));
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return waited.has_value(); }));
    BOOST_TEST(waited->error() == errc::io_error);
    BOOST_TEST(!manager.latest_step().value().has_value());
}

// A checkpoint already in host memory (parts snapshotted apart): staged at once, never inside
// the call, then durable; a write that fails is the pending save's, and "latest" stays.
BOOST_AUTO_TEST_CASE(async_save_record_is_staged_at_once_then_durable)
{
    const ruda::test::watchdog guard{"async_save_record_is_staged_at_once_then_durable"};
    const temp_dir dir;
    counting_ops ops;
    ops.hold_fsync();
    boost::asio::io_context io; // outlives the manager's writer thread
    ruda::checkpoint_manager manager{dir.path(), {.ops = &ops}};
    std::optional<ruda::result<ruda::pending_save>> staged;
    const auto keep = [&](ruda::result<ruda::pending_save> r) { staged.emplace(std::move(r)); };
    manager.async_save_record(7, contents_of(7), boost::asio::bind_executor(io, keep));
    BOOST_TEST(!staged.has_value());
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return staged.has_value(); }));
    BOOST_REQUIRE(*staged);
    BOOST_TEST(!staged->value().done()); // fsync is held: staged, not on disk yet
    ops.release();
    const auto saved = staged->value().wait();
    BOOST_REQUIRE(saved);
    BOOST_TEST(saved.value().step == 7U);
    BOOST_TEST((manager.latest_step().value() == std::optional<std::uint64_t>{7}));
    BOOST_TEST((as_saved(manager.load(7).value()) == contents_of(7)));

    ops.fail_at = ops.calls + 1;
    staged.reset();
    manager.async_save_record(8, contents_of(8), boost::asio::bind_executor(io, keep));
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return staged.has_value(); }));
    BOOST_REQUIRE(*staged);
    const auto failed = staged->value().wait();
    BOOST_REQUIRE(!failed);
    BOOST_TEST(failed.error() == errc::io_error);
    BOOST_TEST((manager.latest_step().value() == std::optional<std::uint64_t>{7}));
    BOOST_TEST(manager.steps().value() == std::vector<std::uint64_t>{7});
}

BOOST_AUTO_TEST_CASE(async_save_is_cancelled_through_the_token_slot)
{
    const ruda::test::watchdog guard{"async_save_is_cancelled_through_the_token_slot"};
    const temp_dir dir;
    boost::asio::io_context io;
    counting_ops ops;
    ruda::checkpoint_manager manager{dir.path(), {.ops = &ops}};
    BOOST_REQUIRE(manager.save(1, ruda::checkpoint{}));
    const auto calls_before = ops.calls;

    // The snapshot hangs; cancelling it ends the save with nothing written.
    const ruda::async_device hung{{.hang_reads = true}};
    const auto grads = two_gradients(hung);
    boost::asio::cancellation_signal cancel;
    std::optional<ruda::result<ruda::pending_save>> staged;
    manager.async_save<gpu>(2, grads, {},
                            boost::asio::bind_cancellation_slot(
                                cancel.slot(), boost::asio::bind_executor(io, [&](auto&& r) {
                                    staged.emplace(std::move(r));
                                })));
    BOOST_TEST(!ruda::test::run_until(io, [&] { return staged.has_value(); }, 20ms));
    cancel.emit(boost::asio::cancellation_type::terminal);
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return staged.has_value(); }));
    BOOST_REQUIRE(!*staged);
    BOOST_TEST(staged->error() == errc::cancelled, staged->error().message());
    BOOST_TEST(hung.stats().in_flight == 0U);
    BOOST_TEST(ops.calls == calls_before);
    BOOST_TEST((manager.steps().value() == std::vector<std::uint64_t>{1}));
    BOOST_TEST((manager.latest_step().value() == std::optional<std::uint64_t>{1}));
    BOOST_TEST(tmp_files(dir.path()).empty());

    // A pending save waits on the executor of the save that staged it.
    const ruda::async_device device;
    const auto good = two_gradients(device);
    staged.reset();
    manager.async_save<gpu>(3, good, {}, boost::asio::bind_executor(io, [&](auto&& r) {
                                staged.emplace(std::move(r));
                            }));
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return staged.has_value(); }));
    BOOST_REQUIRE(*staged);
    BOOST_TEST((staged->value().get_executor() == boost::asio::any_io_executor{io.get_executor()}));
    std::optional<ruda::result<ruda::saved_checkpoint>> waited;
    staged->value().async_wait([&](auto r) { waited.emplace(std::move(r)); }); // no executor
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return waited.has_value(); }));
    BOOST_TEST(waited->value().step == 3U);
}

namespace {

// Two parameters' values on the device, as a trainer's weights: ids shared with the gradients.
ruda::gradients_params two_weights(const ruda::async_device& device)
{
    ruda::gradients_params weights;
    for (std::uint64_t id = 1; id <= 2; ++id) {
        weights.insert<gpu>(ruda::param_id{id},
                            gpu::float_from_data(ruda::tensor_data::from_values(
                                                     std::vector<float>{10.0F * float(id), 2}, {2})
                                                     .value(),
                                                 device)
                                .value());
    }
    return weights;
}

} // namespace

// Weights and gradients of one model read by one snapshot: every handle captured at the call,
// the reads of both groups in flight together, the state's own sections and groups kept.
BOOST_AUTO_TEST_CASE(async_save_snapshots_several_groups_at_once)
{
    const ruda::test::watchdog guard{"async_save_snapshots_several_groups_at_once"};
    const temp_dir dir;
    boost::asio::io_context io;
    ruda::checkpoint_manager manager{dir.path()};
    const ruda::async_device device{{.latency = 5ms}};
    auto grads = two_gradients(device);
    auto weights = two_weights(device);
    ruda::checkpoint state;
    state.put("step", std::uint64_t{5}).value();
    state.put_group("rng", ruda::gradients_params_record{{{ruda::param_id{9}, ruda::dtype::u8(),
                                                          ruda::test::patterned(4, {4},
                                                                                ruda::dtype::u8()),
                                                          "cpu"}}})
        .value();
    std::optional<ruda::result<ruda::pending_save>> staged;
    manager.async_save<gpu>(
        5, {{"weights", weights}, {"gradients", grads}}, std::move(state),
        {.max_in_flight = 4},
        boost::asio::bind_executor(io, [&](auto&& r) { staged.emplace(std::move(r)); }));
    // Captured at the call: what changes now is not in the checkpoint.
    weights.remove<gpu>(ruda::param_id{2});
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return staged.has_value(); }));
    BOOST_REQUIRE(*staged);
    BOOST_TEST(device.stats().peak_in_flight == 4U); // both groups' reads at once
    BOOST_REQUIRE(staged->value().wait());
    const auto loaded = manager.load(5).value();
    BOOST_REQUIRE_EQUAL(loaded.groups().size(), 3U);
    BOOST_TEST(loaded.groups()[1].name == "rng");
    BOOST_TEST(loaded.groups()[2].name == "weights");
    BOOST_REQUIRE_EQUAL(loaded.group("weights")->entries().size(), 2U);
    BOOST_TEST(loaded.group("weights")->entries()[1].data.values<float>().value()[0] == 20.0F);
    BOOST_TEST(loaded.gradients().entries()[0].data.values<float>().value()[0] == 1.0F);
    BOOST_TEST(step_in(loaded) == 5U);

    // A group given twice, or one the state holds already, is refused; nothing is read.
    for (const auto& [groups, text] :
         std::vector<std::pair<std::vector<std::string>, std::string>>{
             {{"weights", "weights"}, "Group weights is given twice"},
             {{"rng"}, "Group rng is given twice: the checkpoint to save holds it already"},
             {{""}, "A group name must have 1 to 255 bytes"}}) {
        std::vector<ruda::tensor_group_source> sources;
        for (const std::string& name : groups) {
            sources.push_back({name, grads});
        }
        ruda::checkpoint with_rng;
        with_rng.put_group("rng", loaded.group("rng") != nullptr ? *loaded.group("rng")
                                                                  : ruda::gradients_params_record{})
            .value();
        const auto reads_before = device.stats().reads_issued;
        staged.reset();
        manager.async_save<gpu>(6, sources, std::move(with_rng),
                                boost::asio::bind_executor(io, [&](auto&& r) {
                                    staged.emplace(std::move(r));
                                }));
        BOOST_REQUIRE(ruda::test::run_until(io, [&] { return staged.has_value(); }));
        BOOST_REQUIRE(!*staged);
        BOOST_TEST(staged->error() == errc::malformed_record);
        BOOST_TEST(staged->error().message().find(text) == 0U, staged->error().message());
        BOOST_TEST(device.stats().reads_issued == reads_before);
    }
    // A read that fails names its group.
    const ruda::async_device failing{{.fail_read = 1}};
    const auto broken = two_gradients(failing);
    staged.reset();
    manager.async_save<gpu>(7, {{"weights", broken}}, ruda::checkpoint{},
                            boost::asio::bind_executor(io, [&](auto&& r) {
                                staged.emplace(std::move(r));
                            }));
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return staged.has_value(); }));
    BOOST_REQUIRE(!*staged);
    BOOST_TEST(staged->error().message().find("Reading weights for parameter 1") == 0U,
               staged->error().message());
}

// A plain loop's saves: staged at the call, written by the manager's thread, at most
// max_queued_saves at once (the next call waits for room), all durable at the destructor.
BOOST_AUTO_TEST_CASE(queue_save_bounds_the_saves_waiting_and_the_destructor_finishes_them)
{
    const ruda::test::watchdog guard{"queue_save_bounds_the_saves_waiting"};
    const temp_dir dir;
    counting_ops ops;
    ops.hold_fsync();
    std::optional<ruda::checkpoint_manager> manager{
        std::in_place, dir.path(), ruda::checkpoint_manager_options{.keep_last = 10, .ops = &ops,
                                                                    .max_queued_saves = 2}};
    auto first = manager->queue_save(1, contents_of(1));
    auto second = manager->queue_save(2, contents_of(2));
    BOOST_TEST(!first.done()); // fsync is held: queued, not durable
    // A third save waits for room: it returns only once the first is durable.
    std::atomic<bool> third_returned{false};
    bool first_done_when_third_returned = false;
    std::thread loop{[&] {
        auto third = manager->queue_save(3, contents_of(3));
        first_done_when_third_returned = first.done();
        third_returned = true;
        static_cast<void>(third.wait());
    }};
    ops.release();
    loop.join();
    BOOST_TEST(third_returned.load());
    BOOST_TEST(first_done_when_third_returned);
    BOOST_TEST(first.wait().value().step == 1U);
    BOOST_TEST(second.wait().value().step == 2U);

    // The destructor waits for what is queued: every save is durable once it returns.
    ops.hold_fsync();
    auto fourth = manager->queue_save(4, contents_of(4));
    std::thread releaser{[&] {
        std::this_thread::sleep_for(10ms);
        ops.release();
    }};
    manager.reset();
    releaser.join();
    BOOST_TEST(fourth.done());
    BOOST_TEST(fourth.wait().has_value());
    ruda::checkpoint_manager after{dir.path()};
    BOOST_TEST(after.steps().value() == (std::vector<std::uint64_t>{1, 2, 3, 4}));
    BOOST_TEST((as_saved(after.load_latest().value()) == contents_of(4)));

    // A failed write is the pending save's; a refused step too.
    ruda::checkpoint_manager again{dir.path()};
    const auto refused = again.queue_save(2, contents_of(2)).wait();
    BOOST_TEST(refused.error() == errc::step_not_newer);
}

BOOST_AUTO_TEST_SUITE_END()
