// ruda-inspect on a trainer's whole state: groups, runs and short sections shown, --verify naming
// each step's run, exports that follow "latest" and choose a group, and a distributed
// checkpoint's manifest and pieces.
#include "../checkpoint/checkpoint_test_support.hpp"
#include "inspect_test_support.hpp"

#include <inspect.hpp>

#include <cereal/archives/json.hpp> // rapidjson, configured as cereal configures it
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <ruda/checkpoint/checkpoint_manager.hpp>
#include <ruda/checkpoint/safetensors.hpp>
#include <ruda/dist/dist_checkpoint_manager.hpp>

#include "../support/async_test.hpp"

#include <boost/test/unit_test.hpp>

#include <sstream>

namespace {

using ruda::test::contains;
using ruda::test::corrupt_first_payload;
using ruda::test::inspect;
using ruda::test::sample_file;
using ruda::test::temp_dir;

ruda::gradient_entry named_floats(const std::string& name, float value)
{
    return {ruda::param_id::from_name(name), ruda::dtype::f32(),
            ruda::tensor_data::from_values(std::vector<float>{value, value}, {2}).value(), name};
}

// A trainer's checkpoint: weights, gradients and an optimizer's state of one parameter.
ruda::checkpoint trainer_state()
{
    ruda::checkpoint c{ruda::gradients_params_record{{named_floats("fc.weight", 0.5F)}}};
    c.put_group("weights", ruda::gradients_params_record{{named_floats("fc.weight", 1.5F)}})
        .value();
    c.put_group("optimizer",
                ruda::gradients_params_record{
                    {named_floats("fc.weight.exp_avg", 0.25F),
                     {ruda::param_id::from_name("fc.weight.step"), ruda::dtype::i64(),
                      ruda::tensor_data::from_values(std::vector<std::int64_t>{12}, {}).value(),
                      "fc.weight.step"}}})
        .value();
    c.put("step", std::uint64_t{12}).value();
    c.put("note", std::string{"lr warm-up done"}).value();
    c.put("loss", 0.125).value();
    c.put("big", std::vector<float>(32, 1.0F)).value();
    return c;
}

} // namespace

BOOST_AUTO_TEST_SUITE(tool_inspect_groups)

BOOST_AUTO_TEST_CASE(groups_runs_and_short_sections_are_shown)
{
    const temp_dir dir;
    ruda::checkpoint_manager manager{dir.path(), {.run_id = "run-1"}};
    BOOST_REQUIRE(manager.save(12, trainer_state()));
    const auto file = manager.path_of(12).string();

    const auto table = inspect({file});
    BOOST_TEST(table.status == 0, table.out);
    BOOST_TEST(contains(table.out, ", step 12 of run run-1, "), table.out);
    BOOST_TEST(contains(table.out, "4 tensors in 3 groups (gradients 1, weights 1, optimizer 2)"));
    BOOST_TEST(contains(table.out, "| group | id | name | dtype |"));
    BOOST_TEST(contains(table.out, "| weights | " +
                                       ruda::to_string(ruda::param_id::from_name("fc.weight")) +
                                       " | fc.weight | f32 |"));
    BOOST_TEST(contains(table.out, "| optimizer | " +
                                       ruda::to_string(ruda::param_id::from_name("fc.weight.step")) +
                                       " | fc.weight.step | i64 |"));
    BOOST_TEST(contains(table.out, "| section | size | checksum | value |"));
    BOOST_TEST(contains(table.out, "| step | 8 B | ok | 0x0c00000000000000 (u64 12, f64 "),
               table.out);
    BOOST_TEST(contains(table.out, "| note | 23 B | ok | \"lr warm-up done\" |"), table.out);
    BOOST_TEST(contains(table.out, "| loss | 8 B | ok | 0x000000000000c03f (u64 "
                                   "4593671619917905920, f64 0.125) |"),
               table.out);
    BOOST_TEST(contains(table.out, "| big | 136 B | ok |  |")); // over 64 bytes: not shown

    const auto verified = inspect({"--verify", file});
    BOOST_TEST(verified.out == file + ": ok (4 tensors in 3 groups (gradients 1, weights 1, "
                                      "optimizer 2), 4 sections, " +
                                   ruda::tools::human_size(std::filesystem::file_size(file)) +
                                   "; step 12 of run run-1)\n");

    const auto json = inspect({"--json", file});
    rapidjson::Document doc;
    doc.Parse(json.out.c_str());
    BOOST_REQUIRE(!doc.HasParseError());
    const auto& f = doc[0];
    BOOST_TEST(std::string(f["run_id"].GetString()) == "run-1");
    BOOST_TEST(f["step"].GetUint64() == 12U);
    BOOST_REQUIRE_EQUAL(f["groups"].Size(), 3U);
    BOOST_TEST(std::string(f["groups"][2]["name"].GetString()) == "optimizer");
    BOOST_TEST(f["groups"][2]["tensors"].GetUint64() == 2U);
    BOOST_TEST(std::string(f["entries"][1]["group"].GetString()) == "weights");
    BOOST_TEST(std::string(f["sections"][1]["value"].GetString()) == "\"lr warm-up done\"");
    BOOST_TEST(f["sections"][3]["value"].IsNull());
    const auto plain = inspect({"--json", sample_file(dir, "plain.ruda").string()});
    doc.Parse(plain.out.c_str());
    BOOST_REQUIRE(!doc.HasParseError());
    BOOST_TEST(doc[0]["run_id"].IsNull());
    BOOST_TEST(std::string(doc[0]["entries"][0]["group"].GetString()) == "gradients");
}

BOOST_AUTO_TEST_CASE(verify_says_which_run_each_step_is_of)
{
    // The directory a new run left in an old run's: its step 100 (named by "latest") among the
    // old run's 250 and 300 (see checkpoint_runs).
    const temp_dir dir;
    const temp_dir elsewhere;
    {
        ruda::checkpoint_manager old{dir.path(), {.keep_last = 2, .run_id = "old"}};
        for (std::uint64_t step = 50; step <= 300; step += 50) {
            BOOST_REQUIRE(old.save(step, ruda::checkpoint{ruda::test::valid_sample()}));
        }
        ruda::checkpoint_manager fresh{elsewhere.path(), {.run_id = "new"}};
        BOOST_REQUIRE(fresh.save(100, ruda::checkpoint{ruda::test::valid_sample()}));
    }
    std::filesystem::copy_file(elsewhere / "step-00000000000000000100.ruda",
                               dir / "step-00000000000000000100.ruda");
    std::filesystem::copy_file(elsewhere / "latest", dir / "latest",
                               std::filesystem::copy_options::overwrite_existing);
    const std::string d = dir.path().string();
    const auto r = inspect({"--verify", d});
    BOOST_TEST(r.status == 0, r.out);
    BOOST_TEST(contains(r.out, "step-00000000000000000300.ruda: ok (14 gradients, 0 sections, "),
               r.out);
    BOOST_TEST(contains(r.out, "; step 300 of run old)\n"));
    BOOST_TEST(contains(r.out, d + ": \"latest\" names step 100 of run new\n" + d +
                                   ": passed over step 300 of run old: another run than the line "
                                   "of the one \"latest\" names\n" + d +
                                   ": passed over step 250 of run old: another run than the line "
                                   "of the one \"latest\" names\n" + d +
                                   ": the newest checkpoint that loads is step 100\n"),
               r.out);
    BOOST_TEST(ruda::checkpoint_manager{dir.path()}.load_newest_valid().value().step == 100U);

    corrupt_first_payload(dir / "step-00000000000000000100.ruda");
    const auto fallback = inspect({"--verify", d});
    BOOST_TEST(fallback.status == 1);
    BOOST_TEST(contains(fallback.out, d + ": the newest checkpoint that loads is step 300 of run "
                                          "old, not of the line of the run \"latest\" names: "
                                          "none of that line loads\n"),
               fallback.out);
}

BOOST_AUTO_TEST_CASE(export_follows_latest_and_chooses_a_group)
{
    const temp_dir dir;
    {
        ruda::checkpoint_manager manager{dir.path()};
        BOOST_REQUIRE(manager.save(12, trainer_state()));
    }
    const auto out = dir / "out.safetensors";
    const auto names_in = [](const std::filesystem::path& file) {
        std::vector<std::string> names;
        const auto imported = ruda::import_safetensors(file).value();
        for (const auto& e : imported.entries()) {
            names.push_back(e.name);
        }
        std::sort(names.begin(), names.end());
        return names;
    };
    // A directory stands for the checkpoint "latest" names; the weights are the default.
    auto r = inspect({"--export-safetensors", out.string(), dir.path().string()});
    BOOST_TEST(r.status == 0, r.out);
    BOOST_TEST(contains(r.out, "1 tensors of " + (dir / "step-00000000000000000012.ruda").string()));
    BOOST_TEST(names_in(out) == std::vector<std::string>{"fc.weight"});
    BOOST_TEST(ruda::import_safetensors(out).value().entries()[0].data.values<float>().value()[0] ==
               1.5F);
    r = inspect({"--export-safetensors", out.string(), "--group", "optimizer",
                 (dir / "latest").string()});
    BOOST_TEST(r.status == 0, r.out);
    BOOST_TEST(names_in(out) == (std::vector<std::string>{"fc.weight.exp_avg", "fc.weight.step"}));
    r = inspect({"--export-safetensors", out.string(), "--group", "scheduler", dir.path().string()});
    BOOST_TEST(r.status == 1);
    BOOST_TEST(contains(r.out, "has no group scheduler"), r.out);

    // Without weights, several groups go out together, each tensor as "group.name".
    ruda::checkpoint no_weights = trainer_state();
    BOOST_REQUIRE(no_weights.take_group("weights"));
    const auto file = dir / "no-weights.ruda";
    BOOST_REQUIRE(ruda::save_checkpoint_file(file, no_weights));
    r = inspect({"--export-safetensors", out.string(), file.string()});
    BOOST_TEST(r.status == 0, r.out);
    BOOST_TEST(names_in(out) == (std::vector<std::string>{"gradients.fc.weight",
                                                          "optimizer.fc.weight.exp_avg",
                                                          "optimizer.fc.weight.step"}));

    const temp_dir empty;
    r = inspect({"--export-safetensors", out.string(), empty.path().string()});
    BOOST_TEST(r.status == 1);
    BOOST_TEST(contains(r.out, "no checkpoint saved yet"), r.out);
    BOOST_TEST(inspect({"--group", "weights", dir.path().string()}).status == 2);
}

BOOST_AUTO_TEST_CASE(a_distributed_checkpoint_shows_its_manifest_and_verifies_its_pieces)
{
    const temp_dir dir;
    ruda::solo_communicator world;
    {
        ruda::dist_checkpoint_manager manager{world, dir.path()};
        boost::asio::io_context io;
        ruda::checkpoint contents{ruda::test::valid_sample()};
        auto pending = ruda::test::run_to_end(io, manager.async_save_record(4, contents, {}));
        BOOST_REQUIRE(pending.has_value() && pending->has_value());
        BOOST_REQUIRE(pending->value().wait());
    }
    const auto step = (dir / "step-00000000000000000004").string();
    auto shown = inspect({step});
    BOOST_TEST(shown.status == 0);
    BOOST_TEST(contains(shown.out, step + ": distributed checkpoint of step 4 by 1 ranks"));
    BOOST_TEST(contains(shown.out, "replicated"));
    BOOST_TEST(contains(shown.out, "rank 0 [0, "));
    auto verified = inspect({"--verify", dir.path().string()});
    BOOST_TEST(verified.status == 0);
    BOOST_TEST(contains(verified.out, "rank-00000.ruda: ok ("));
    BOOST_TEST(contains(verified.out, step + ": the manifest and the rank files agree"));
    BOOST_TEST(contains(verified.out, "\"latest\" names step 4"));

    // A rank file from another save: its own checksums hold, the manifest's do not.
    auto entries = ruda::test::valid_sample().entries();
    for (auto& e : entries) {
        auto bytes = e.data.bytes().to_vector();
        if (!bytes.empty()) {
            bytes[0] ^= 1U;
        }
        e.data = ruda::tensor_data{std::move(bytes), e.data.shape(), e.data.dtype()};
    }
    const ruda::checkpoint foreign{ruda::gradients_params_record{entries}};
    BOOST_REQUIRE(ruda::save_checkpoint_file(step + "/rank-00000.ruda", foreign));
    verified = inspect({"--verify", step});
    BOOST_TEST(verified.status == 1);
    BOOST_TEST(contains(verified.out,
                        "rank 0's file holds another payload than the manifest names"));
    std::filesystem::remove(step + "/rank-00000.ruda");
    verified = inspect({"--verify", step});
    BOOST_TEST(verified.status == 1);
}

BOOST_AUTO_TEST_SUITE_END()
