// checkpoint_manager: step-numbered files, keep-last-N retention that never drops the latest,
// a "latest" pointer moved only after the checkpoint is durable, stale temporary files
// removed, a process dying between any two write steps leaving a loadable checkpoint, and one
// manager per directory. Its asynchronous saves: checkpoint_manager_async_test.cpp.
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

int operations_of_one_save()
{
    const temp_dir dir;
    counting_ops ops;
    ruda::checkpoint_manager manager{dir.path(), {.ops = &ops}};
    manager.save(1, contents_of(1)).value();
    return ops.calls;
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

BOOST_AUTO_TEST_SUITE_END()
