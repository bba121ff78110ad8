// Checkpoint files: bit-exact round trips with sections; partial loads; loads from memory;
// a failed or short write; names; progress. The files a load refuses:
// checkpoint_file_refusals_test.cpp.
#include "checkpoint_test_support.hpp"
#include "file_test_support.hpp"

#include <ruda/checkpoint/checkpoint_file.hpp>

#include <cereal/types/map.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <map>
#include <stdexcept>
#include <string>

namespace {

using ruda::errc;
using ruda::test::edit_file;
using ruda::test::expect_load_error;
using ruda::test::faulty_ops;
using ruda::test::optimizer_state;
using ruda::test::sample_checkpoint;
using ruda::test::saved_sample;
using ruda::test::temp_dir;

} // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_file)

BOOST_AUTO_TEST_CASE(round_trip_is_bit_exact_with_sections)
{
    const temp_dir dir;
    const auto original = sample_checkpoint();
    const auto path = dir / "c.ruda";
    const auto size = ruda::save_checkpoint_file(path, original);
    BOOST_REQUIRE(size);
    BOOST_TEST(size.value() == std::filesystem::file_size(path));
    BOOST_TEST(!std::filesystem::exists(dir / "c.ruda.tmp"));

    const auto loaded = ruda::load_checkpoint_file(path);
    BOOST_REQUIRE(loaded);
    BOOST_TEST((loaded.value() == original)); // entries, dtypes, shapes, bytes and sections
    std::uint64_t step = 0;
    BOOST_REQUIRE(loaded.value().get("step", step));
    BOOST_TEST(step == 1234U);
    optimizer_state optimizer;
    BOOST_REQUIRE(loaded.value().get("optimizer", optimizer));
    BOOST_TEST((optimizer == optimizer_state{7, {0.5, -1e-300, 3.0}, {{"lr", 0.01F}, {"beta", 0.9F}}}));

    // Payloads are 64-byte aligned; the index describes the file.
    const auto reader = ruda::checkpoint_reader::open(path).value();
    BOOST_TEST(reader.index().format_version == ruda::checkpoint_format_version);
    BOOST_TEST(reader.index().producer == RUDA_VERSION_STRING);
    BOOST_TEST(reader.index().entries.size() == original.gradients().entries().size());
    for (const auto& e : reader.index().entries) {
        BOOST_TEST(e.payload.offset % 64 == 0U);
        BOOST_TEST(reader.payload_intact(e.payload).value());
    }
    BOOST_TEST(reader.index().sections.size() == 3U);
    BOOST_TEST(reader.index().sections[1].name == "optimizer");

    // Empty contents are a valid checkpoint too.
    BOOST_REQUIRE(ruda::save_checkpoint_file(dir / "empty.ruda", ruda::checkpoint{}));
    const auto empty = ruda::load_checkpoint_file(dir / "empty.ruda");
    BOOST_REQUIRE(empty);
    BOOST_TEST(empty.value().gradients().entries().empty());
}

BOOST_AUTO_TEST_CASE(partial_load_reads_only_the_selected_gradients)
{
    const temp_dir dir;
    const auto path = saved_sample(dir);
    const auto all = ruda::test::valid_sample().entries();
    const auto some = ruda::load_checkpoint_file(path, {.only_ids = std::vector<ruda::param_id>{ruda::param_id{3}, ruda::param_id{11}, ruda::param_id{3}}});
    BOOST_REQUIRE(some);
    const auto& entries = some.value().gradients().entries();
    BOOST_REQUIRE_EQUAL(entries.size(), 2U);
    BOOST_TEST((entries[0] == all[2]));
    BOOST_TEST((entries[1] == all[10]));
    BOOST_TEST(some.value().sections().size() == 3U);

    // A corrupt payload outside the selection does not matter.
    const auto reader = ruda::checkpoint_reader::open(path).value();
    const auto other = reader.index().entries[0].payload.offset;
    edit_file(path, [other](auto& b) { b[other] ^= 0x01; });
    BOOST_CHECK(ruda::load_checkpoint_file(path, {.only_ids = std::vector<ruda::param_id>{ruda::param_id{3}}}));

    expect_load_error(path, errc::missing_gradient, "has no gradient for parameter 99",
                      {.only_ids = std::vector<ruda::param_id>{ruda::param_id{3}, ruda::param_id{99}}});
}

BOOST_AUTO_TEST_CASE(a_reader_loads_keeping_its_index_or_consumed_without_it)
{
    const temp_dir dir;
    const auto path = saved_sample(dir);
    const auto all = ruda::test::valid_sample().entries();
    auto reader = ruda::checkpoint_reader::open(path).value();
    const std::size_t indexed = reader.index().entries.size();

    // Loaded from a reader kept: the same contents, and the index is still whole.
    const auto kept = reader.load();
    BOOST_REQUIRE(kept);
    BOOST_TEST((kept.value().gradients().entries() == all));
    BOOST_TEST(reader.index().entries.size() == indexed);
    BOOST_TEST(reader.index().entries[2].shape == all[2].data.shape());
    const auto some = reader.load({.only_ids = std::vector<ruda::param_id>{ruda::param_id{11}}});
    BOOST_REQUIRE(some);
    BOOST_REQUIRE_EQUAL(some.value().gradients().entries().size(), 1U);
    BOOST_TEST((some.value().gradients().entries()[0] == all[10]));
    BOOST_TEST(reader.index().entries.size() == indexed);

    // Consumed: the same contents again; the index's entries went to the checkpoint.
    const auto consumed = std::move(reader).load();
    BOOST_REQUIRE(consumed);
    BOOST_TEST((consumed.value() == kept.value()));
    BOOST_TEST(reader.index().entries.empty()); // NOLINT(bugprone-use-after-move): documented
    BOOST_TEST(reader.index().sections.size() == 3U);
}

BOOST_AUTO_TEST_CASE(a_failed_write_leaves_the_previous_file_and_no_temporary)
{
    const temp_dir dir;
    const auto path = dir / "c.ruda";
    BOOST_REQUIRE(ruda::save_checkpoint_file(path, ruda::checkpoint{}));
    const auto previous = ruda::test::read_bytes(path);

    // Count the operations of one save, then fail each of them in turn.
    faulty_ops counting;
    BOOST_REQUIRE(ruda::save_checkpoint_file(dir / "count.ruda", sample_checkpoint(), counting));
    const int operations = counting.calls;
    BOOST_TEST(operations >= 7); // create, writes, pwrite, fsync, close, rename, directory fsync
    for (int k = 1; k <= operations; ++k) {
        BOOST_TEST_CONTEXT("failing operation " << k)
        {
            faulty_ops ops;
            ops.fail_at = k;
            const auto saved = ruda::save_checkpoint_file(path, sample_checkpoint(), ops);
            BOOST_REQUIRE(!saved);
            BOOST_TEST(saved.error() == errc::io_error);
            BOOST_TEST(saved.error().message().find("Saving " + path.string()) == 0U);
            BOOST_TEST(!std::filesystem::exists(dir / "c.ruda.tmp"));
            if (k < operations) { // before the rename: the previous file is untouched
                BOOST_TEST(ruda::test::read_bytes(path) == previous);
            } else { // the directory fsync failed after the rename: the new file is whole
                BOOST_CHECK(ruda::load_checkpoint_file(path));
                ruda::test::write_bytes(path, previous);
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(short_writes_still_produce_the_whole_file)
{
    const temp_dir dir;
    faulty_ops ops;
    ops.chunk = 7;
    const auto original = sample_checkpoint();
    BOOST_REQUIRE(ruda::save_checkpoint_file(dir / "c.ruda", original, ops));
    const auto loaded = ruda::load_checkpoint_file(dir / "c.ruda");
    BOOST_REQUIRE(loaded);
    BOOST_TEST((loaded.value() == original));
}

BOOST_AUTO_TEST_CASE(large_payloads_stream_past_the_buffer)
{
    const temp_dir dir;
    std::vector<ruda::gradient_entry> entries;
    for (std::uint64_t id = 0; id < 3; ++id) {
        const std::size_t n = (std::size_t{3} << 20U) / 4 + id; // over the 1 MiB buffer
        entries.push_back({ruda::param_id{id}, ruda::dtype::f32(), ruda::test::patterned(n * 4, {n}, ruda::dtype::f32())});
    }
    for (std::uint64_t id = 3; id < 2000; ++id) { // and many that share it
        entries.push_back({ruda::param_id{id}, ruda::dtype::f16(), ruda::test::patterned(2 * 3, {3}, ruda::dtype::f16())});
    }
    const ruda::checkpoint original{ruda::gradients_params_record{std::move(entries)}};
    BOOST_REQUIRE(ruda::save_checkpoint_file(dir / "big.ruda", original));
    const auto loaded = ruda::load_checkpoint_file(dir / "big.ruda");
    BOOST_REQUIRE(loaded);
    BOOST_TEST((loaded.value() == original));
}



BOOST_AUTO_TEST_CASE(parameter_names_are_kept_and_files_without_them_are_unchanged)
{
    const temp_dir dir;
    auto entries = ruda::test::valid_sample().into_entries();
    entries[0].name = "fc1.weight";
    entries[1].name = "encoder.layers.0.self_attn.q_proj.bias";
    entries[2].name = "caf\xc3\xa9 | \"quoted\""; // any UTF-8
    ruda::checkpoint named{ruda::gradients_params_record{entries}};
    named.put("step", std::uint64_t{3}).value();
    const auto path = dir / "named.ruda";
    ruda::save_checkpoint_file(path, named).value();
    BOOST_TEST(ruda::test::read_bytes(path)[12] == ruda::detail::flag_entry_names);
    const auto loaded = ruda::load_checkpoint_file(path);
    BOOST_REQUIRE(loaded);
    BOOST_TEST((loaded.value() == named));
    BOOST_TEST(ruda::checkpoint_reader::open(path).value().index().entries[1].name ==
               entries[1].name);
    const auto some = ruda::load_checkpoint_file(path, {.only_ids = std::vector<ruda::param_id>{ruda::param_id{1}, ruda::param_id{4}}});
    BOOST_REQUIRE(some);
    BOOST_TEST(some.value().gradients().entries()[0].name == "fc1.weight");
    BOOST_TEST(some.value().gradients().entries()[1].name.empty());

    // A file without names sets no flag: any reader of format version 1 reads it.
    const auto plain = ruda::test::read_bytes(saved_sample(dir));
    BOOST_TEST(ruda::test::le64(plain, 8) == 1U); // format version 1, flags 0
}

BOOST_AUTO_TEST_CASE(forged_names_are_refused_at_load_and_unsavable_names_at_save)
{
    const temp_dir dir;
    const auto path = saved_sample(dir);
    const auto whole = ruda::test::read_bytes(path);
    const auto with_names = [](ruda::detail::frame& f) { f.flags = ruda::detail::flag_entry_names; };
    const auto forge = [&](const std::function<void(ruda::checkpoint_index&)>& edit,
                           bool flagged = true) {
        ruda::test::write_bytes(path, whole);
        ruda::test::rewrite(path, edit, flagged ? with_names : std::function<void(ruda::detail::frame&)>{});
    };
    forge([](auto& i) { i.entries[0].name = std::string(1, 'x'); }, false);
    expect_load_error(path, errc::malformed_record, "(parameter 1) has a name of invalid length 1");
    forge([](auto& i) { i.entries[0].name = std::string(1025, 'n'); });
    expect_load_error(path, errc::malformed_record,
                      "(parameter 1) has a name of invalid length 1025");
    forge([](auto& i) { i.entries[1].name = "caf\xe9"; });
    expect_load_error(path, errc::malformed_record, "(parameter 2) has a name that is not UTF-8");
    forge([](auto& i) { i.entries[2].name = i.entries[5].name = "fc1.bias"; });
    expect_load_error(path, errc::malformed_record,
                      "Parameters 3 and 6 have the same name fc1.bias");
    // Of two names used twice, the one whose second use comes first in the file, whatever
    // order the names sort in; of a name used three times, its first two uses.
    forge([](auto& i) {
        i.entries[1].name = i.entries[4].name = "a.first_in_sort";
        i.entries[2].name = i.entries[3].name = "z.second_use_first";
    });
    expect_load_error(path, errc::malformed_record,
                      "Parameters 3 and 4 have the same name z.second_use_first");
    forge([](auto& i) { i.entries[0].name = i.entries[2].name = i.entries[5].name = "w"; });
    expect_load_error(path, errc::malformed_record, "Parameters 1 and 3 have the same name w");
    forge([](auto& i) { i.entries[0].name = std::string(1024, 'n'); }); // the longest allowed
    BOOST_TEST(ruda::load_checkpoint_file(path).value().gradients().entries()[0].name.size() == 1024U);
    ruda::test::write_bytes(path, whole);
    ruda::test::rewrite(path, [](auto&) {}, [](auto& f) { f.flags = 8; });
    expect_load_error(path, errc::unsupported_version, "flags 8");

    // A save refuses each before writing a byte.
    const auto refused = [&](std::string first, std::string second, const std::string& text) {
        auto entries = ruda::test::valid_sample().into_entries();
        entries[0].name = std::move(first);
        entries[1].name = std::move(second);
        const auto target = dir / "refused.ruda";
        const auto saved = ruda::save_checkpoint_file(
            target, ruda::checkpoint{ruda::gradients_params_record{std::move(entries)}});
        BOOST_REQUIRE(!saved);
        BOOST_TEST(saved.error() == errc::malformed_record);
        BOOST_TEST(saved.error().message().find(text) != std::string::npos, saved.error().message());
        BOOST_TEST(!std::filesystem::exists(target));
    };
    refused("a", "a", "Parameters 1 and 2 have the same name a");
    refused(std::string(1025, 'n'), "", "Parameter 1 has a name of 1025 bytes");
    refused("", "caf\xe9", "Parameter 2 has a name that is not UTF-8");
}

BOOST_AUTO_TEST_CASE(saves_and_loads_report_progress_and_a_throwing_report_stops_them)
{
    const temp_dir dir;
    // Small payloads gathered into runs, and one of 20 MiB, written in pieces by 4 writers.
    auto entries = ruda::test::valid_sample().into_entries();
    entries[0].data = ruda::test::patterned(std::size_t{20} << 20U, {std::size_t{5} << 20U},
                                            ruda::dtype::f32());
    entries[0].dtype = ruda::dtype::f32();
    ruda::checkpoint contents{ruda::gradients_params_record{entries}};
    contents.put("step", std::uint64_t{5}).value();
    std::uint64_t payload_bytes = contents.sections()[0].bytes.size();
    for (const auto& e : entries) {
        payload_bytes += e.data.bytes().size();
    }
    // Every call sees more done than the last, of the same total, and the last sees it all.
    struct seen {
        std::vector<ruda::checkpoint_progress> calls;
        std::atomic<int> inside{0};
        bool overlapped = false;
        void operator()(const ruda::checkpoint_progress& p)
        {
            overlapped = overlapped || inside.fetch_add(1) != 0;
            calls.push_back(p);
            inside.fetch_sub(1);
        }
        void check(std::uint64_t total) const
        {
            BOOST_REQUIRE(!calls.empty());
            BOOST_TEST(!overlapped);
            for (std::size_t i = 0; i < calls.size(); ++i) {
                BOOST_TEST(calls[i].bytes_total == total);
                BOOST_TEST((i == 0 || calls[i].bytes_done > calls[i - 1].bytes_done));
            }
            BOOST_TEST(calls.back().bytes_done == total);
        }
    };
    const auto path = dir / "progress.ruda";
    seen saving;
    ruda::checkpoint_save_options save_options;
    save_options.writers = 4;
    save_options.on_progress = [&](const auto& p) { saving(p); };
    ruda::save_checkpoint_file(path, contents, save_options).value();
    saving.check(payload_bytes);
    BOOST_TEST(saving.calls.size() >= 3U); // the large payload alone comes in 3 pieces

    seen loading;
    ruda::checkpoint_load_options load_options;
    load_options.readers = 4;
    load_options.on_progress = [&](const auto& p) { loading(p); };
    BOOST_TEST((ruda::load_checkpoint_file(path, load_options).value() == contents));
    loading.check(payload_bytes);
    seen mapped; // a sealed memfd is mapped, not read: progress all the same
    load_options.on_progress = [&](const auto& p) { mapped(p); };
    const ruda::test::sealed_memfd sealed{ruda::test::read_bytes(path)};
    BOOST_TEST(ruda::checkpoint_reader::open(sealed.path()).value().load(load_options).has_value());
    mapped.check(payload_bytes);

    // A report that throws stops the save (the previous file stays, no temporary is left)
    // and the load, with errc::cancelled.
    save_options.on_progress = [](const auto& p) {
        if (p.bytes_done > 0) {
            throw std::runtime_error("enough");
        }
    };
    const auto stopped = ruda::save_checkpoint_file(path, ruda::checkpoint{}, save_options);
    BOOST_TEST(stopped.has_value()); // nothing to write, nothing reported
    const auto stopped_save = ruda::save_checkpoint_file(path, contents, save_options);
    BOOST_REQUIRE(!stopped_save);
    BOOST_TEST(stopped_save.error() == errc::cancelled);
    BOOST_TEST(stopped_save.error().message().find("Stopped by on_progress: exception: enough") !=
                   std::string::npos,
               stopped_save.error().message());
    BOOST_TEST(!std::filesystem::exists(dir / "progress.ruda.tmp"));
    BOOST_TEST(ruda::load_checkpoint_file(path).value().gradients().entries().empty());
    ruda::save_checkpoint_file(path, contents).value();
    load_options.on_progress = save_options.on_progress;
    const auto stopped_load = ruda::load_checkpoint_file(path, load_options);
    BOOST_REQUIRE(!stopped_load);
    BOOST_TEST(stopped_load.error() == errc::cancelled);
}

BOOST_AUTO_TEST_SUITE_END()
