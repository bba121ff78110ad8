// Run identity in a checkpoint directory: each checkpoint records the run and step that saved
// it, a save below the directory's newest step is refused unless it is a deliberate rollback,
// and after a crash the newest valid checkpoint of the run "latest" names is found, never
// another run's without saying so: the case of a new run started in an old run's directory.
#include "checkpoint_test_support.hpp"

#include <ruda/checkpoint/checkpoint_manager.hpp>

#include <boost/test/unit_test.hpp>

namespace {

using ruda::test::step_in;
using ruda::errc;
using ruda::test::temp_dir;

ruda::checkpoint at_step(std::uint64_t step)
{
    std::vector<float> values(8, static_cast<float>(step));
    ruda::checkpoint c{ruda::gradients_params_record{
        {{ruda::param_id{1}, ruda::dtype::f32(),
          ruda::tensor_data::from_values(std::move(values), {8}).value(), "w"}}}};
    c.put("step", step).value();
    return c;
}

void corrupt(const std::filesystem::path& file)
{
    auto bytes = ruda::test::read_bytes(file);
    bytes[ruda::detail::preamble_size] ^= 1U; // the first payload
    ruda::test::write_bytes(file, bytes);
}

// Records the order of a save's file operations.
class order_recording_ops : public ruda::file_ops {
public:
    std::vector<std::string> done;

    ruda::result<void> rename(const std::filesystem::path& a, const std::filesystem::path& b) override
    {
        done.push_back("rename " + b.filename().string());
        return ruda::file_ops::rename(a, b);
    }
    ruda::result<void> remove(const std::filesystem::path& p) override
    {
        done.push_back("remove " + p.filename().string());
        return ruda::file_ops::remove(p);
    }
    ruda::result<void> sync_directory(const std::filesystem::path& d) override
    {
        done.push_back("sync directory");
        return ruda::file_ops::sync_directory(d);
    }
};

} // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_runs)

BOOST_AUTO_TEST_CASE(every_checkpoint_records_the_run_and_step_that_saved_it)
{
    const temp_dir dir;
    std::string first_run;
    {
        ruda::checkpoint_manager manager{dir.path()};
        first_run = manager.run_id();
        BOOST_TEST(first_run.size() == 32U);
        BOOST_REQUIRE(manager.save(5, at_step(5)));
        const auto loaded = manager.load_latest().value();
        BOOST_REQUIRE(loaded.identity());
        BOOST_TEST(loaded.identity()->run_id == first_run);
        BOOST_TEST(loaded.identity()->step == 5U);
        BOOST_TEST(manager.latest_run_id().value_or("") == first_run);
        // "latest" names the run on its second line; its first line is what it always was.
        const auto latest = ruda::test::read_bytes(dir / "latest");
        BOOST_TEST(std::string(latest.begin(), latest.end()) ==
                   "step-00000000000000000005.ruda\nrun " + first_run + "\n");
    }
    ruda::checkpoint_manager named{dir.path(), {.run_id = "bert-base/lr3e-4"}};
    BOOST_TEST(named.run_id() == "bert-base/lr3e-4");
    BOOST_REQUIRE(named.save(6, at_step(6)));
    BOOST_TEST(named.load(6).value().identity()->run_id == "bert-base/lr3e-4");
    BOOST_TEST(ruda::checkpoint_manager{dir.path()}.run_id() != first_run); // random per manager

    // A "latest" of one line (written before runs were recorded) still reads.
    ruda::test::write_bytes(dir / "latest", {'s', 't', 'e', 'p', '-', '0', '0', '0', '0', '0', '0',
                                             '0', '0', '0', '0', '0', '0', '0', '0', '0', '0',
                                             '0', '0', '0', '6', '.', 'r', 'u', 'd', 'a', '\n'});
    BOOST_TEST(named.latest_step().value().value_or(0) == 6U);
    BOOST_TEST(named.latest_run_id().value_or("") == "bert-base/lr3e-4"); // from its file

    ruda::checkpoint_manager invalid{dir.path(), {.run_id = "two\nlines"}};
    const auto refused = invalid.save(7, at_step(7));
    BOOST_REQUIRE(!refused);
    BOOST_TEST(refused.error() == errc::malformed_record);
    BOOST_TEST(!std::filesystem::exists(invalid.path_of(7)));
}

BOOST_AUTO_TEST_CASE(a_save_not_above_the_newest_step_is_refused_and_writes_nothing)
{
    const temp_dir dir;
    {
        ruda::checkpoint_manager manager{dir.path(), {.keep_last = 5, .run_id = "A"}};
        BOOST_REQUIRE(manager.save(10, at_step(10)));
        BOOST_REQUIRE(manager.save(20, at_step(20)));
        for (const std::uint64_t step : {20U, 15U, 0U}) {
            const auto saved = manager.save(step, at_step(step));
            BOOST_REQUIRE(!saved);
            BOOST_TEST(saved.error() == errc::step_not_newer);
            BOOST_TEST(saved.error().message().find(
                           "holds step 20 (\"latest\" names step 20 of this run), not below "
                           "step " +
                           std::to_string(step)) != std::string::npos,
                       saved.error().message());
        }
        BOOST_TEST(manager.steps().value() == (std::vector<std::uint64_t>{10, 20}));
        BOOST_TEST(step_in(manager.load(10).value()) == 10U); // not rewritten
        BOOST_TEST(manager.latest_step().value().value_or(0) == 20U);
    }
    // A step file newer than "latest" (a crash before "latest" moved) counts too.
    std::filesystem::copy_file(dir / "step-00000000000000000020.ruda",
                               dir / "step-00000000000000000030.ruda");
    ruda::checkpoint_manager again{dir.path(), {.run_id = "A"}};
    BOOST_TEST(again.save(25, at_step(25)).error() == errc::step_not_newer);
    BOOST_TEST(again.save(31, at_step(31)).has_value());
}

BOOST_AUTO_TEST_CASE(a_new_run_in_an_old_runs_directory_never_resumes_the_old_run)
{
    // The old run: steps 50 to 300, keep 3 (200, 250 and 300 stay).
    const temp_dir dir;
    {
        ruda::checkpoint_manager old{dir.path(), {.keep_last = 3, .run_id = "old"}};
        for (std::uint64_t step = 50; step <= 300; step += 50) {
            BOOST_REQUIRE(old.save(step, at_step(step)));
        }
    }
    // A new run (saves every 100) starts there: its first save is refused, nothing changes.
    {
        ruda::checkpoint_manager fresh{dir.path(), {.keep_last = 3, .run_id = "new"}};
        const auto refused = fresh.save(100, at_step(100));
        BOOST_REQUIRE(!refused);
        BOOST_TEST(refused.error() == errc::step_not_newer);
        BOOST_TEST(refused.error().message().find("holds step 300 (\"latest\" names step 300 of "
                                                  "run old, not this run new)") !=
                       std::string::npos,
                   refused.error().message());
        BOOST_TEST(fresh.steps().value() == (std::vector<std::uint64_t>{200, 250, 300}));
        BOOST_TEST(fresh.latest_step().value().value_or(0) == 300U);
    }
    // The directory as older ruda left it: the new run's step 100 saved over the old run's
    // directory (latest on it), killed at 199, the old run's 200..300 kept by retention.
    const temp_dir elsewhere;
    {
        ruda::checkpoint_manager fresh{elsewhere.path(), {.run_id = "new"}};
        BOOST_REQUIRE(fresh.save(100, at_step(100)));
    }
    const ruda::checkpoint_manager view{dir.path()};
    std::filesystem::copy_file(elsewhere / "step-00000000000000000100.ruda", view.path_of(100));
    std::filesystem::copy_file(elsewhere / "latest", dir / "latest",
                               std::filesystem::copy_options::overwrite_existing);
    const auto found = view.load_newest_valid().value();
    BOOST_TEST(found.step == 100U); // not the old run's 300
    BOOST_TEST(found.run_id == "new");
    BOOST_TEST(found.latest_run_id.value_or("") == "new");
    BOOST_TEST(!found.other_run);
    BOOST_REQUIRE_EQUAL(found.skipped.size(), 3U);
    for (std::size_t k = 0; k < 3; ++k) {
        BOOST_TEST(found.skipped[k].step == 300U - 50 * k);
        BOOST_TEST(found.skipped[k].why == errc::other_run);
        BOOST_TEST(found.skipped[k].run_id.value_or("") == "old");
        BOOST_TEST(found.skipped[k].why.message() ==
                   "written by run old, not of the line of run new that \"latest\" names");
    }
    // When none of the new run loads, the old run's newest is handed back, said so.
    corrupt(view.path_of(100));
    const auto fallback = view.load_newest_valid().value();
    BOOST_TEST(fallback.step == 300U);
    BOOST_TEST(fallback.run_id == "old");
    BOOST_TEST(fallback.other_run);
    BOOST_TEST(fallback.skipped.size() == 4U);

    // A load can insist on a run.
    const auto wrong = view.load(300, {.run_id = "new"});
    BOOST_REQUIRE(!wrong);
    BOOST_TEST(wrong.error() == errc::other_run);
    BOOST_TEST(wrong.error().message().find("written by run old, not run new") !=
                   std::string::npos,
               wrong.error().message());
    BOOST_TEST(view.load(300, {.run_id = "old"}).has_value());
}

BOOST_AUTO_TEST_CASE(a_restarted_trainer_continues_the_line_of_the_run_it_resumed)
{
    const temp_dir dir;
    {
        ruda::checkpoint_manager first{dir.path(), {.keep_last = 5, .run_id = "A"}};
        BOOST_REQUIRE(first.save(10, at_step(10)));
        BOOST_REQUIRE(first.save(20, at_step(20)));
    }
    const auto latest_of_a = ruda::test::read_bytes(dir / "latest");
    {
        // A restart: a new manager (a new run) resumes from "latest", then saves step 30 and
        // dies before "latest" moves (here: "latest" put back as it was).
        ruda::checkpoint_manager restarted{dir.path(), {.keep_last = 5, .run_id = "B"}};
        BOOST_TEST(restarted.resumed_run_id().empty());
        BOOST_REQUIRE(restarted.load_latest());
        BOOST_TEST(restarted.resumed_run_id() == "A");
        BOOST_REQUIRE(restarted.save(30, at_step(30)));
        const auto identity = restarted.load(30).value().identity().value();
        BOOST_TEST(identity.run_id == "B");
        BOOST_TEST(identity.parent_run_id == "A");
    }
    ruda::test::write_bytes(dir / "latest", latest_of_a);
    // Another run started afresh, at a step above all of them, saved apart and copied in.
    const temp_dir elsewhere;
    {
        ruda::checkpoint_manager afresh{elsewhere.path(), {.run_id = "C"}};
        BOOST_REQUIRE(afresh.save(40, at_step(40)));
    }
    std::filesystem::copy_file(elsewhere / "step-00000000000000000040.ruda",
                               dir / "step-00000000000000000040.ruda");

    ruda::checkpoint_manager after{dir.path(), {.keep_last = 5, .run_id = "D"}};
    const auto found = after.load_newest_valid().value();
    BOOST_TEST(found.step == 30U); // B resumed A: the same line; C is not
    BOOST_TEST(found.run_id == "B");
    BOOST_TEST(!found.other_run);
    BOOST_REQUIRE_EQUAL(found.skipped.size(), 1U);
    BOOST_TEST(found.skipped[0].step == 40U);
    BOOST_TEST(found.skipped[0].why == errc::other_run);
    BOOST_TEST(after.resumed_run_id() == "B");

    const std::vector<ruda::run_identity> runs{{"A", 10, ""}, {"B", 30, "A"}, {"C", 40, ""},
                                               {"E", 50, "B"}, {"S", 60, "Z"}, {"Z", 5, ""}};
    BOOST_TEST((ruda::lineage_of("B", runs) == std::set<std::string, std::less<>>{"A", "B", "E"}));
    BOOST_TEST((ruda::lineage_of("A", runs) == std::set<std::string, std::less<>>{"A", "B", "E"}));
    BOOST_TEST((ruda::lineage_of("C", runs) == std::set<std::string, std::less<>>{"C"}));
}

BOOST_AUTO_TEST_CASE(a_deliberate_rollback_moves_latest_first_then_removes_the_newer_steps)
{
    const temp_dir dir;
    {
        ruda::checkpoint_manager first{dir.path(), {.keep_last = 5, .run_id = "A"}};
        for (std::uint64_t step = 10; step <= 40; step += 10) {
            BOOST_REQUIRE(first.save(step, at_step(step)));
        }
    }
    order_recording_ops ops;
    ruda::checkpoint_manager rollback{
        dir.path(),
        {.keep_last = 5, .ops = &ops, .run_id = "B", .on_newer = ruda::newer_checkpoints::discard}};
    const auto saved = rollback.save(20, at_step(21));
    BOOST_REQUIRE(saved);
    BOOST_TEST(!saved.value().cleanup_failure);
    BOOST_TEST(ops.done == (std::vector<std::string>{
                              "rename step-00000000000000000020.ruda", "sync directory",
                              "rename latest", "sync directory",
                              "remove step-00000000000000000030.ruda",
                              "remove step-00000000000000000040.ruda", "sync directory"}));
    BOOST_TEST(rollback.steps().value() == (std::vector<std::uint64_t>{10, 20}));
    const auto latest = rollback.load_latest().value();
    BOOST_TEST(step_in(latest) == 21U); // the rolled-back step, rewritten
    BOOST_TEST(latest.identity()->run_id == "B");
    BOOST_TEST(rollback.load_newest_valid().value().step == 20U);
}

BOOST_AUTO_TEST_SUITE_END()
