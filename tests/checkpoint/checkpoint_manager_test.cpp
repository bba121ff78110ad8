// checkpoint_manager: step-numbered files, keep-last-N retention that never drops the latest,
// a "latest" pointer moved only after the checkpoint is durable, stale temporary files
// removed, a process dying between any two write steps leaving a loadable checkpoint, and the
// asynchronous save's two completions (staged, then durable).
#include "../support/async_test.hpp"
#include "checkpoint_test_support.hpp"

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

ruda::checkpoint contents_of(std::uint64_t step)
{
    std::vector<ruda::gradient_entry> entries;
    for (std::uint64_t id = 1; id <= 3; ++id) {
        std::vector<float> values(16, static_cast<float>(step * 10 + id));
        entries.push_back({ruda::param_id{id}, ruda::dtype::f32(),
                           ruda::tensor_data::from_values(std::move(values), {4, 4}).value()});
    }
    ruda::checkpoint c{ruda::gradients_params_record{std::move(entries)}};
    c.put("step", step).value();
    return c;
}

using ruda::test::as_saved;

// Counts the file operations of a save and, when told to, fails one or blocks fsync.
class counting_ops : public ruda::file_ops {
public:
    int calls = 0;
    int fail_at = 0;
    bool exit_instead = false; // die (like a killed process) instead of failing

    ruda::result<int> create(const std::filesystem::path& p) override
    {
        BOOST_OUTCOME_TRY(step());
        return ruda::file_ops::create(p);
    }
    ruda::result<std::size_t> write(int fd, const void* d, std::size_t n) override
    {
        BOOST_OUTCOME_TRY(step());
        return ruda::file_ops::write(fd, d, n);
    }
    ruda::result<void> pwrite(int fd, const void* d, std::size_t n, std::uint64_t at) override
    {
        BOOST_OUTCOME_TRY(step());
        return ruda::file_ops::pwrite(fd, d, n, at);
    }
    ruda::result<void> fsync(int fd) override
    {
        BOOST_OUTCOME_TRY(step());
        std::unique_lock lock{mutex_};
        released_cv_.wait(lock, [this] { return released_; });
        return ruda::file_ops::fsync(fd);
    }
    ruda::result<void> close(int fd) override
    {
        BOOST_OUTCOME_TRY(step());
        return ruda::file_ops::close(fd);
    }
    ruda::result<void> rename(const std::filesystem::path& a, const std::filesystem::path& b) override
    {
        BOOST_OUTCOME_TRY(step());
        return ruda::file_ops::rename(a, b);
    }
    ruda::result<void> sync_directory(const std::filesystem::path& d) override
    {
        BOOST_OUTCOME_TRY(step());
        return ruda::file_ops::sync_directory(d);
    }

    /// fsync waits until `release()` once this is called.
    void hold_fsync()
    {
        const std::lock_guard lock{mutex_};
        released_ = false;
    }
    void release()
    {
        {
            const std::lock_guard lock{mutex_};
            released_ = true;
        }
        released_cv_.notify_all();
    }

private:
    ruda::result<void> step()
    {
        if (++calls != fail_at) {
            return ruda::success();
        }
        if (exit_instead) {
            std::_Exit(0);
        }
        return ruda::error{errc::io_error, "injected failure"};
    }
    std::mutex mutex_;
    std::condition_variable released_cv_;
    bool released_ = true;
};

int operations_of_one_save()
{
    const temp_dir dir;
    counting_ops ops;
    ruda::checkpoint_manager manager{dir.path(), {.ops = &ops}};
    manager.save(1, contents_of(1)).value();
    return ops.calls;
}

std::vector<std::string> tmp_files(const std::filesystem::path& dir)
{
    std::vector<std::string> found;
    for (const auto& item : std::filesystem::directory_iterator(dir)) {
        if (item.path().extension() == ".tmp") {
            found.push_back(item.path().filename().string());
        }
    }
    return found;
}

} // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_manager)

BOOST_AUTO_TEST_CASE(steps_are_none_before_the_first_save_and_an_unlistable_directory_says_so)
{
    const temp_dir dir;
    BOOST_TEST(ruda::checkpoint_manager{dir / "not-yet"}.steps().value().empty());
    ruda::test::write_bytes(dir / "a-file", {'x'});
    const ruda::checkpoint_manager manager{dir / "a-file"};
    const auto listed = manager.steps();
    BOOST_REQUIRE(!listed);
    BOOST_TEST(listed.error() == errc::io_error);
    BOOST_TEST(listed.error().message().find("Listing " + (dir / "a-file").string() + ": ") == 0U,
               listed.error().message());
    BOOST_TEST(manager.load_newest_valid().error() == errc::io_error);
}

BOOST_AUTO_TEST_CASE(saves_keep_the_last_n_and_move_latest)
{
    const temp_dir dir;
    ruda::checkpoint_manager manager{dir / "run", {.keep_last = 3}};
    BOOST_TEST(!manager.latest_step().value().has_value());
    const auto none = manager.load_latest();
    BOOST_TEST(none.error() == errc::not_found);
    BOOST_TEST(none.error().message().find("No checkpoint in") == 0U);
    BOOST_TEST(manager.load_newest_valid().error() == errc::not_found);

    for (std::uint64_t step = 1; step <= 6; ++step) {
        const auto saved = manager.save(step, contents_of(step));
        BOOST_REQUIRE(saved);
        BOOST_TEST(saved.value().path == manager.path_of(step));
        BOOST_TEST(saved.value().bytes == std::filesystem::file_size(saved.value().path));
        BOOST_TEST(!saved.value().cleanup_failure.has_value());
        BOOST_TEST((manager.latest_step().value() == std::optional<std::uint64_t>{step}));
    }
    BOOST_TEST(manager.steps().value() == (std::vector<std::uint64_t>{4, 5, 6}));
    BOOST_TEST(manager.path_of(6).filename() == "step-00000000000000000006.ruda");
    BOOST_TEST((as_saved(manager.load_latest().value()) == contents_of(6)));
    BOOST_TEST(step_in(manager.load(5).value()) == 5U);
    BOOST_TEST(manager.load(1).error() == errc::io_error);

    // Going back to an older step is refused (checkpoint_runs has the deliberate rollback).
    BOOST_TEST(manager.save(2, contents_of(2)).error() == errc::step_not_newer);
    BOOST_TEST((manager.latest_step().value() == std::optional<std::uint64_t>{6}));
    BOOST_TEST(manager.steps().value() == (std::vector<std::uint64_t>{4, 5, 6}));
}

BOOST_AUTO_TEST_CASE(a_bad_latest_pointer_is_an_error)
{
    const temp_dir dir;
    ruda::checkpoint_manager manager{dir.path()};
    BOOST_REQUIRE(manager.save(7, contents_of(7)));
    ruda::test::write_bytes(dir / "latest", {'s', 't', 'e', 'p', '-', '9', '\n'});
    const auto latest = manager.latest_step();
    BOOST_TEST(latest.error() == errc::malformed_record);
    BOOST_TEST(manager.load_latest().error() == errc::malformed_record);
}

BOOST_AUTO_TEST_CASE(latest_never_names_a_checkpoint_that_cannot_load)
{
    const temp_dir dir;
    ruda::checkpoint_manager manager{dir.path()};
    BOOST_REQUIRE(manager.save(1, contents_of(1)));
    const auto f32 = ruda::dtype::f32();
    ruda::checkpoint twice{ruda::gradients_params_record{
        {{ruda::param_id{7}, f32, ruda::test::patterned(4, {1}, f32)}, {ruda::param_id{7}, f32, ruda::test::patterned(4, {1}, f32)}}}};
    const auto refused = manager.save(2, twice);
    BOOST_TEST(refused.error() == errc::duplicate_param_id);
    BOOST_TEST((manager.latest_step().value() == std::optional<std::uint64_t>{1}));
    BOOST_TEST(manager.steps().value() == (std::vector<std::uint64_t>{1}));
    BOOST_TEST(tmp_files(dir.path()).empty());
    BOOST_TEST(step_in(manager.load_latest().value()) == 1U);
}

BOOST_AUTO_TEST_CASE(a_damaged_latest_is_reported_and_the_newest_valid_one_found)
{
    const temp_dir dir;
    ruda::checkpoint_manager manager{dir.path(), {.keep_last = 4}};
    for (std::uint64_t step = 1; step <= 4; ++step) {
        BOOST_REQUIRE(manager.save(step, contents_of(step)));
    }
    const auto newest = manager.load_newest_valid();
    BOOST_REQUIRE(newest);
    BOOST_TEST(newest.value().step == 4U);
    BOOST_TEST(newest.value().skipped.empty());

    // Step 4 (the latest) loses a byte of a payload, step 3 is cut short.
    auto damaged = ruda::test::read_bytes(manager.path_of(4));
    damaged[100] ^= 0x40U;
    ruda::test::write_bytes(manager.path_of(4), damaged);
    auto cut = ruda::test::read_bytes(manager.path_of(3));
    cut.resize(cut.size() / 2);
    ruda::test::write_bytes(manager.path_of(3), cut);

    const auto latest = manager.load_latest();
    BOOST_TEST(latest.error() == errc::checksum_mismatch);
    BOOST_TEST(latest.error().message().find("The checkpoint \"latest\" names (step 4) does not "
                                             "load: ") == 0U);
    BOOST_TEST(latest.error().message().find("load_newest_valid()") != std::string::npos);

    const auto found = manager.load_newest_valid();
    BOOST_REQUIRE(found);
    BOOST_TEST(found.value().step == 2U);
    BOOST_TEST((as_saved(found.value().contents) == contents_of(2)));
    BOOST_REQUIRE(found.value().skipped.size() == 2U);
    BOOST_TEST(found.value().skipped[0].step == 4U);
    BOOST_TEST(found.value().skipped[0].why == errc::checksum_mismatch);
    BOOST_TEST(found.value().skipped[1].step == 3U);
    BOOST_TEST(found.value().skipped[1].why == errc::malformed_record);

    // A file newer than "latest" (a crash before "latest" moved) that loads is the newest.
    BOOST_REQUIRE(ruda::save_checkpoint_file(
        manager.path_of(5), contents_of(5), {.identity = ruda::run_identity{manager.run_id(), 5}}));
    BOOST_TEST(manager.load_newest_valid().value().step == 5U);

    // None loads: an error naming each.
    const auto present = manager.steps().value();
    for (const std::uint64_t step : present) {
        ruda::test::write_bytes(manager.path_of(step), {'x'});
    }
    const auto none = manager.load_newest_valid();
    BOOST_TEST(none.error() == errc::io_error);
    BOOST_TEST(none.error().message().find("No checkpoint in " + dir.path().string() +
                                           " loads; step 5: ") == 0U);
    BOOST_TEST(none.error().message().find("; step 1: ") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_next_save_removes_stale_temporary_files)
{
    const temp_dir dir;
    ruda::checkpoint_manager manager{dir.path()};
    BOOST_REQUIRE(manager.save(1, contents_of(1)));
    ruda::test::write_bytes(dir / "step-00000000000000000002.ruda.tmp", {1, 2, 3});
    ruda::test::write_bytes(dir / "latest.tmp", {'x'});
    BOOST_TEST(tmp_files(dir.path()).size() == 2U);
    BOOST_TEST(manager.steps().value() == (std::vector<std::uint64_t>{1})); // a temp is no checkpoint
    BOOST_REQUIRE(manager.save(3, contents_of(3)));
    BOOST_TEST(tmp_files(dir.path()).empty());
}

BOOST_AUTO_TEST_CASE(a_failed_save_leaves_latest_on_the_previous_checkpoint)
{
    const int operations = operations_of_one_save();
    // The last six are the "latest" pointer's create, write, fsync, close, rename, dir fsync.
    const int latest_renamed = operations - 1;
    for (int k = 1; k <= operations; ++k) {
        BOOST_TEST_CONTEXT("failing operation " << k << " of " << operations)
        {
            const temp_dir dir;
            counting_ops ops;
            ruda::checkpoint_manager manager{dir.path(), {.ops = &ops}};
            BOOST_REQUIRE(manager.save(1, contents_of(1)));
            ops.calls = 0;
            ops.fail_at = k;
            const auto saved = manager.save(2, contents_of(2));
            BOOST_REQUIRE(!saved);
            BOOST_TEST(saved.error() == errc::io_error);
            const auto latest = manager.load_latest();
            BOOST_REQUIRE(latest);
            BOOST_TEST(step_in(latest.value()) == (k <= latest_renamed ? 1U : 2U));
            ops.fail_at = 0;
            BOOST_REQUIRE(manager.save(3, contents_of(3)));
            BOOST_TEST(tmp_files(dir.path()).empty());
        }
    }
}

BOOST_AUTO_TEST_CASE(a_process_dying_between_any_two_steps_leaves_a_whole_checkpoint)
{
    const int operations = operations_of_one_save();
    const int latest_renamed = operations - 1;
    for (int k = 1; k <= operations + 1; ++k) {
        BOOST_TEST_CONTEXT("dying before operation " << k << " of " << operations)
        {
            const temp_dir dir;
            {
                ruda::checkpoint_manager first{dir.path()};
                BOOST_REQUIRE(first.save(1, contents_of(1)));
            }
            const pid_t child = ::fork();
            BOOST_REQUIRE(child >= 0);
            if (child == 0) {
                counting_ops ops;
                ops.fail_at = k;
                ops.exit_instead = true;
                ruda::checkpoint_manager dying{dir.path(), {.ops = &ops}};
                (void)dying.save(2, contents_of(2));
                std::_Exit(0); // k past the end: the save completed
            }
            int status = 0;
            BOOST_REQUIRE(::waitpid(child, &status, 0) == child);
            BOOST_REQUIRE(WIFEXITED(status));

            ruda::checkpoint_manager after{dir.path()};
            const auto latest = after.load_latest();
            BOOST_REQUIRE(latest);
            const auto expected = k <= latest_renamed ? 1U : 2U;
            BOOST_TEST(step_in(latest.value()) == expected);
            BOOST_TEST((as_saved(latest.value()) == contents_of(expected)));
            BOOST_REQUIRE(after.save(3, contents_of(3)));
            BOOST_TEST(tmp_files(dir.path()).empty());
        }
    }
}

namespace {

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

BOOST_AUTO_TEST_CASE(a_second_manager_on_the_directory_is_refused_naming_the_holder)
{
    const temp_dir dir;
    std::optional<ruda::checkpoint_manager> first{std::in_place, dir.path()};
    BOOST_REQUIRE(first->save(1, contents_of(1)));
    ruda::checkpoint_manager second{dir.path()};
    const auto refused = second.save(2, contents_of(2));
    BOOST_REQUIRE(!refused);
    BOOST_TEST(refused.error() == errc::directory_in_use);
    const auto& message = refused.error().message();
    BOOST_TEST(message.find("pid " + std::to_string(::getpid())) != std::string::npos);
    BOOST_TEST(message.find(dir.path().string()) != std::string::npos);
    BOOST_TEST(step_in(second.load_latest().value()) == 1U); // loads take no lock
    BOOST_TEST(tmp_files(dir.path()).empty());
    first.reset(); // releases the directory
    BOOST_REQUIRE(second.save(2, contents_of(2)));
    BOOST_TEST(step_in(second.load_latest().value()) == 2U);
}

BOOST_AUTO_TEST_CASE(a_killed_holder_leaves_no_lock_behind)
{
    const temp_dir dir;
    int saved[2];
    BOOST_REQUIRE(::pipe(saved) == 0);
    const pid_t child = ::fork();
    BOOST_REQUIRE(child >= 0);
    if (child == 0) {
        ::close(saved[0]);
        ruda::checkpoint_manager holder{dir.path()};
        const bool ok = static_cast<bool>(holder.save(1, contents_of(1)));
        if (::write(saved[1], ok ? "y" : "n", 1) != 1 || !ok) {
            std::_Exit(1);
        }
        for (;;) {
            ::pause(); // holds the directory until killed
        }
    }
    ::close(saved[1]);
    char answer = 0;
    const bool child_saved = ::read(saved[0], &answer, 1) == 1 && answer == 'y';
    ::close(saved[0]);
    {
        ruda::checkpoint_manager second{dir.path()};
        const auto refused = second.save(2, contents_of(2));
        ::kill(child, SIGKILL);
        int status = 0;
        BOOST_REQUIRE(::waitpid(child, &status, 0) == child);
        BOOST_REQUIRE(child_saved);
        BOOST_REQUIRE(!refused);
        BOOST_TEST(refused.error() == errc::directory_in_use);
        const auto& message = refused.error().message();
        BOOST_TEST(message.find("pid " + std::to_string(child)) != std::string::npos);
        BOOST_REQUIRE(second.save(2, contents_of(2))); // the kernel dropped the dead holder's lock
        BOOST_TEST(step_in(second.load_latest().value()) == 2U);
    }
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
