// ruda-inspect: the table, valid JSON (parsed back), --verify's one-line verdicts and exit
// statuses for sound, corrupt and foreign files, directories, and usage errors.
#include "../checkpoint/checkpoint_test_support.hpp"
#include "inspect_test_support.hpp"

#include <inspect.hpp>

#include <cereal/archives/json.hpp> // rapidjson, configured as cereal configures it
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

} // namespace

BOOST_AUTO_TEST_SUITE(tool_inspect)

BOOST_AUTO_TEST_CASE(the_table_lists_entries_and_sections)
{
    const temp_dir dir;
    const auto path = sample_file(dir, "a.ruda");
    const auto r = inspect({path.string()});
    BOOST_TEST(r.status == 0);
    BOOST_TEST(contains(r.out, path.string() + ": format 1, written by ruda " RUDA_VERSION_STRING));
    BOOST_TEST(contains(r.out, "14 gradients, 1 sections"));
    BOOST_TEST(contains(r.out, "| id | name | dtype | stored | shape | size | checksum |"));
    BOOST_TEST(contains(r.out, "| 1 |  | f64 | f64 | [2, 3] | 48 B | ok |"));
    BOOST_TEST(contains(r.out, "| 9 |  | bf16 | f16 | [3, 2] | 12 B | ok |"));
    BOOST_TEST(contains(r.out, "| 7 |  | f16 | f16 | [3, 0, 2] | 0 B | ok |"));
    BOOST_TEST(contains(r.out, "| step | 8 B | ok |"));

    corrupt_first_payload(path);
    const auto bad = inspect({path.string()});
    BOOST_TEST(bad.status == 1);
    BOOST_TEST(contains(bad.out, "| 1 |  | f64 | f64 | [2, 3] | 48 B | MISMATCH |"));
    BOOST_TEST(contains(bad.out, "checksum mismatch in the gradient of parameter 1"));
}

BOOST_AUTO_TEST_CASE(verify_gives_one_line_per_file_and_the_exit_status)
{
    const temp_dir dir;
    const auto good = sample_file(dir, "a.ruda");
    const auto bad = sample_file(dir, "b.ruda");
    corrupt_first_payload(bad);
    const auto ok = inspect({"--verify", good.string()});
    BOOST_TEST(ok.status == 0);
    BOOST_TEST(ok.out == good.string() + ": ok (14 gradients, 1 sections, " +
                             ruda::tools::human_size(std::filesystem::file_size(good)) + ")\n");

    // A directory stands for its .ruda files, in name order.
    const auto both = inspect({"--verify", dir.path().string()});
    BOOST_TEST(both.status == 1);
    std::istringstream lines{both.out};
    std::string first;
    std::string second;
    std::getline(lines, first);
    std::getline(lines, second);
    BOOST_TEST(first.find(good.string() + ": ok") == 0U);
    BOOST_TEST(second == bad.string() + ": checksum mismatch in the gradient of parameter 1");

    ruda::test::write_bytes(dir / "foreign.ruda", std::vector<std::uint8_t>(128, 'z'));
    const auto foreign = inspect({"--verify", (dir / "foreign.ruda").string()});
    BOOST_TEST(foreign.status == 1);
    BOOST_TEST(contains(foreign.out, "not a ruda checkpoint"));
    BOOST_TEST(inspect({"--verify", (dir / "none.ruda").string()}).status == 1);
}

BOOST_AUTO_TEST_CASE(verify_of_a_checkpoint_directory_shows_latest_and_the_newest_that_loads)
{
    const temp_dir dir;
    std::string run;
    {
        ruda::checkpoint_manager manager{dir.path(), {.keep_last = 3}};
        run = manager.run_id();
        for (std::uint64_t step = 1; step <= 3; ++step) {
            ruda::checkpoint c{ruda::test::valid_sample()};
            c.put("step", step).value();
            BOOST_REQUIRE(manager.save(step, c));
        }
    }
    const std::string d = dir.path().string();
    const auto sound = inspect({"--verify", d});
    BOOST_TEST(sound.status == 0);
    BOOST_TEST(contains(sound.out, d + ": \"latest\" names step 3 of run " + run + "\n" + d +
                                       ": the newest checkpoint that loads is step 3\n"),
               sound.out);

    const ruda::checkpoint_manager manager{dir.path()};
    corrupt_first_payload(manager.path_of(3));
    const auto damaged = inspect({"--verify", d});
    BOOST_TEST(damaged.status == 1);
    BOOST_TEST(contains(damaged.out,
                        d + ": \"latest\" names step 3 of run " + run +
                            ", which does not load\n" + d +
                            ": passed over step 3: checksum mismatch in the gradient of parameter 1\n" + d +
                            ": the newest checkpoint that loads is step 2\n"),
               damaged.out);
    BOOST_TEST(manager.load_newest_valid().value().step == 2U); // what the library returns
}

BOOST_AUTO_TEST_CASE(latest_stands_for_the_file_it_names_and_an_empty_directory_says_so)
{
    const temp_dir dir;
    ruda::checkpoint_manager manager{dir.path()};
    ruda::checkpoint c{ruda::test::valid_sample()};
    BOOST_REQUIRE(manager.save(5, c));
    const auto followed = inspect({"--verify", (dir / "latest").string()});
    BOOST_TEST(followed.status == 0);
    BOOST_TEST(followed.out.find(manager.path_of(5).string() + ": ok (14 gradients") == 0U,
               followed.out);

    const temp_dir nothing;
    const auto empty = inspect({"--verify", nothing.path().string()});
    BOOST_TEST(empty.status == 1);
    BOOST_TEST(empty.out == nothing.path().string() + ": no checkpoint files (*.ruda)\n");
    const auto listed = inspect({nothing.path().string()});
    BOOST_TEST(listed.status == 1);
    BOOST_TEST(listed.out == nothing.path().string() + ": no checkpoint files (*.ruda)\n");
}

BOOST_AUTO_TEST_CASE(verify_also_validates_the_record)
{
    const temp_dir dir;
    const auto path = sample_file(dir, "a.ruda");
    ruda::test::rewrite(path, [](ruda::checkpoint_index& i) { i.entries[1].id = i.entries[0].id; });
    BOOST_TEST(inspect({path.string()}).status == 0); // the frame and checksums are sound
    const auto verified = inspect({"--verify", path.string()});
    BOOST_TEST(verified.status == 1);
    BOOST_TEST(contains(verified.out, "Duplicate gradient parameter ID 1"));
}

BOOST_AUTO_TEST_CASE(json_is_valid_and_complete)
{
    const temp_dir dir;
    const auto good = sample_file(dir, "a.ruda");
    const auto bad = sample_file(dir, "b.ruda");
    corrupt_first_payload(bad);
    ruda::test::write_bytes(dir / "c.ruda", std::vector<std::uint8_t>(128, '"'));
    const auto r = inspect({"--json", dir.path().string()});
    BOOST_TEST(r.status == 1);

    rapidjson::Document doc;
    doc.Parse(r.out.c_str());
    BOOST_REQUIRE(!doc.HasParseError());
    BOOST_REQUIRE(doc.IsArray());
    BOOST_REQUIRE_EQUAL(doc.Size(), 3U);
    const auto& a = doc[0];
    BOOST_TEST(a["ok"].GetBool());
    BOOST_TEST(a["error"].IsNull());
    BOOST_TEST(a["format_version"].GetInt() == 1);
    BOOST_TEST(a["bytes"].GetUint64() == std::filesystem::file_size(good));
    BOOST_REQUIRE_EQUAL(a["entries"].Size(), 14U);
    BOOST_TEST(a["entries"][13]["id"].GetUint64() == ~std::uint64_t{0});
    BOOST_TEST(a["entries"][0]["shape"].Size() == 2U);
    BOOST_TEST(std::string(a["entries"][8]["dtype"].GetString()) == "bf16");
    BOOST_TEST(std::string(a["entries"][8]["stored_dtype"].GetString()) == "f16");
    BOOST_TEST(std::string(a["sections"][0]["name"].GetString()) == "step");
    const auto& b = doc[1];
    BOOST_TEST(!b["ok"].GetBool());
    BOOST_TEST(!b["entries"][0]["checksum_ok"].GetBool());
    BOOST_TEST(b["entries"][1]["checksum_ok"].GetBool());
    const auto& c = doc[2];
    BOOST_TEST(!c["ok"].GetBool());
    BOOST_TEST(contains(c["error"].GetString(), "not a ruda checkpoint"));
    BOOST_TEST(!c.HasMember("entries"));
}

BOOST_AUTO_TEST_CASE(parameter_names_and_sizes_read_as_a_person_reads_them)
{
    BOOST_TEST(ruda::tools::human_size(0) == "0 B");
    BOOST_TEST(ruda::tools::human_size(1023) == "1023 B");
    BOOST_TEST(ruda::tools::human_size(1024) == "1.0 KiB");
    BOOST_TEST(ruda::tools::human_size(1536) == "1.5 KiB");
    BOOST_TEST(ruda::tools::human_size(std::uint64_t{5} << 30U) == "5.0 GiB");
    BOOST_TEST(ruda::tools::human_size(~std::uint64_t{0}) == "16.0 EiB");

    const temp_dir dir;
    auto entries = ruda::test::valid_sample().into_entries();
    entries[0].name = "fc1.weight";
    entries[1].name = "a|b \"q\"";
    entries[2].data = ruda::tensor_data{std::vector<std::uint8_t>(std::size_t{3} << 20U), {786432},
                                        ruda::dtype::f32()};
    entries[2].dtype = ruda::dtype::f32();
    const auto path = dir / "named.ruda";
    ruda::save_checkpoint_file(path, ruda::checkpoint{ruda::gradients_params_record{entries}}).value();
    const auto table = inspect({path.string()});
    BOOST_TEST(table.status == 0);
    BOOST_TEST(contains(table.out, "3.0 MiB (" + std::to_string(std::filesystem::file_size(path)) +
                                       " bytes), 14 gradients"));
    BOOST_TEST(contains(table.out, "| 1 | fc1.weight | f64 | f64 | [2, 3] | 48 B | ok |"));
    BOOST_TEST(contains(table.out, "| 2 | a\\|b \"q\" | f32 |"));
    BOOST_TEST(contains(table.out, "| 3 |  | f32 | f32 | [786432] | 3.0 MiB | ok |"));

    const auto json = inspect({"--json", path.string()});
    rapidjson::Document doc;
    doc.Parse(json.out.c_str());
    BOOST_REQUIRE(!doc.HasParseError());
    BOOST_TEST(std::string(doc[0]["entries"][0]["name"].GetString()) == "fc1.weight");
    BOOST_TEST(std::string(doc[0]["entries"][1]["name"].GetString()) == "a|b \"q\"");
    BOOST_TEST(doc[0]["entries"][2]["name"].IsNull());
    BOOST_TEST(doc[0]["bytes"].GetUint64() == std::filesystem::file_size(path));
}

BOOST_AUTO_TEST_CASE(a_progress_line_is_drawn_in_place_and_erased)
{
    const temp_dir dir;
    // Float gradients only, which a safetensors export takes.
    std::vector<ruda::gradient_entry> floats;
    const auto all = ruda::test::valid_sample();
    for (const auto& entry : all.entries()) {
        if (!entry.dtype.is_quantized()) {
            floats.push_back(entry);
        }
    }
    const auto path = dir / "a.ruda";
    ruda::save_checkpoint_file(path, ruda::checkpoint{ruda::gradients_params_record{floats}}).value();
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{path.string()}, {"--verify", path.string()},
          {"--export-safetensors", (dir / "g.safetensors").string(), path.string()}}) {
        std::ostringstream out;
        std::ostringstream progress;
        BOOST_TEST(ruda::tools::inspect_main(args, out, &progress) == 0, args.front());
        const std::string line = progress.str();
        // The last state drawn says it all, and the line is then blanked out.
        const std::string done = path.string() + ": 100% of ";
        BOOST_TEST(line.find("\r" + done) != std::string::npos, line);
        const std::size_t last = line.rfind('\r', line.size() - 2);
        BOOST_TEST(line.back() == '\r');
        BOOST_TEST(line.substr(last + 1, line.size() - last - 2).find_first_not_of(' ') ==
                   std::string::npos);
        BOOST_TEST(out.str().find('\r') == std::string::npos); // the output itself stays clean
    }
    // Without a sink nothing is drawn (ruda-inspect passes one only for a terminal).
    BOOST_TEST(inspect({path.string()}).out.find('\r') == std::string::npos);
}

BOOST_AUTO_TEST_CASE(usage_errors_exit_2)
{
    BOOST_TEST(inspect({}).status == 2);
    BOOST_TEST(inspect({"--verify"}).status == 2);
    const auto unknown = inspect({"--frobnicate", "x"});
    BOOST_TEST(unknown.status == 2);
    BOOST_TEST(unknown.out.find("ruda-inspect: unknown option --frobnicate\nusage:") == 0U);
    BOOST_TEST(inspect({"-x"}).out.find("unknown option -x") != std::string::npos);
    for (const std::string help : {"--help", "-h"}) {
        const auto asked = inspect({help});
        BOOST_TEST(asked.status == 0); // asked for, not a mistake
        BOOST_TEST(asked.out.find("usage: ruda-inspect") == 0U);
    }
    BOOST_TEST(inspect({"--export-safetensors"}).status == 2);
    BOOST_TEST(inspect({"--export-safetensors", "out", "a", "b"}).status == 2);
    BOOST_TEST(inspect({"--export-safetensors", "out", "--json", "a"}).status == 2);
}

BOOST_AUTO_TEST_CASE(export_safetensors_writes_the_gradients_of_a_sound_checkpoint)
{
    const temp_dir dir;
    std::vector<ruda::gradient_entry> floats;
    const auto full = ruda::test::valid_sample();
    for (const auto& entry : full.entries()) {
        if (!entry.dtype.is_quantized()) {
            floats.push_back(entry);
        }
    }
    const ruda::gradients_params_record record{floats};
    const auto path = dir / "float.ruda";
    ruda::save_checkpoint_file(path, ruda::checkpoint{record}).value();
    const auto out = dir / "float.safetensors";
    const auto r = inspect({"--export-safetensors", out.string(), path.string()});
    BOOST_TEST(r.status == 0, r.out);
    BOOST_TEST(contains(r.out, std::to_string(floats.size()) + " tensors of " + path.string()));
    const auto back = ruda::import_safetensors(out);
    BOOST_REQUIRE(back.has_value());
    BOOST_TEST(back.value().entries().size() == floats.size());
    BOOST_TEST(back.value().entries().front().data.bytes() == floats.front().data.bytes());

    // A corrupt checkpoint is not exported; one with quantized gradients cannot be.
    corrupt_first_payload(path);
    const auto corrupt_out = dir / "corrupt.safetensors";
    const auto corrupt = inspect({"--export-safetensors", corrupt_out.string(), path.string()});
    BOOST_TEST(corrupt.status == 1);
    BOOST_TEST(contains(corrupt.out, "checksum"), corrupt.out);
    BOOST_TEST(!std::filesystem::exists(corrupt_out));
    const auto quantized = sample_file(dir, "q.ruda");
    const auto q = inspect({"--export-safetensors", (dir / "q.safetensors").string(), quantized.string()});
    BOOST_TEST(q.status == 1);
    BOOST_TEST(contains(q.out, "safetensors export takes"), q.out);
}

BOOST_AUTO_TEST_SUITE_END()
