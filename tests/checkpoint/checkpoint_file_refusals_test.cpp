// Checkpoint files a load refuses: a newer format version; every kind of corrupt, truncated,
// foreign or inconsistent frame rejected with its own code before anything is deserialized;
// payload checksums; and what a save refuses because a load would.
#include "checkpoint_test_support.hpp"
#include "file_test_support.hpp"

#include <ruda/checkpoint/checkpoint_file.hpp>

#include <boost/test/unit_test.hpp>

#include <atomic>
#include <stdexcept>
#include <string>

namespace {

using ruda::errc;
using ruda::test::edit_file;
using ruda::test::expect_load_error;
using ruda::test::faulty_ops;
using ruda::test::sample_checkpoint;
using ruda::test::saved_sample;
using ruda::test::temp_dir;

} // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_file_refusals)

BOOST_AUTO_TEST_CASE(a_newer_format_version_asks_for_an_upgrade)
{
    const temp_dir dir;
    const auto path = saved_sample(dir);
    const auto whole = ruda::test::read_bytes(path);
    ruda::test::rewrite(path, [](auto&) {}, [](ruda::detail::frame& f) {
        f.format_version = 2;
        f.producer = {3, 1, 4};
    });
    expect_load_error(path, errc::unsupported_version,
                      "checkpoint format version 2 (written by ruda 3.1.4) is newer than this ruda "
                      RUDA_VERSION_STRING " reads (format version 1); upgrade ruda");
    ruda::test::write_bytes(path, whole);
    ruda::test::rewrite(path, [](auto&) {}, [](ruda::detail::frame& f) { f.flags = 8; });
    expect_load_error(path, errc::unsupported_version, "flags 8");
    ruda::test::write_bytes(path, whole);
    ruda::test::rewrite(path, [](auto&) {}, [](ruda::detail::frame& f) { f.format_version = 0; });
    expect_load_error(path, errc::malformed_record, "version 0");
}

BOOST_AUTO_TEST_CASE(foreign_short_and_truncated_files_are_malformed)
{
    const temp_dir dir;
    ruda::test::write_bytes(dir / "text", std::vector<std::uint8_t>(200, 'x'));
    expect_load_error(dir / "text", errc::malformed_record, "not a ruda checkpoint");
    ruda::test::write_bytes(dir / "empty", {});
    expect_load_error(dir / "empty", errc::malformed_record, "too short");
    expect_load_error(dir / "missing", errc::io_error, "open");
    expect_load_error(dir.path(), errc::malformed_record, "not a regular file");

    const auto path = saved_sample(dir);
    const auto whole = ruda::test::read_bytes(path);
    for (const std::size_t keep : {whole.size() - 1, whole.size() - 32, whole.size() / 2, std::size_t{100}}) {
        ruda::test::write_bytes(path, {whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(keep)});
        expect_load_error(path, errc::malformed_record, "(truncated or extended)");
    }
    auto longer = whole;
    longer.push_back(0);
    ruda::test::write_bytes(path, longer);
    expect_load_error(path, errc::malformed_record, "(truncated or extended)");
}

BOOST_AUTO_TEST_CASE(corrupt_frame_bytes_fail_their_checksums)
{
    const temp_dir dir;
    const auto path = saved_sample(dir);
    const auto whole = ruda::test::read_bytes(path);
    const auto header_offset = ruda::test::le64(whole, 24);

    edit_file(path, [](auto& b) { b[33] ^= 0x10; }); // header length in the preamble
    expect_load_error(path, errc::checksum_mismatch, "preamble checksum mismatch");

    ruda::test::write_bytes(path, whole);
    edit_file(path, [header_offset](auto& b) { b[header_offset + 20] ^= 0x01; });
    expect_load_error(path, errc::checksum_mismatch, "header checksum mismatch");

    ruda::test::write_bytes(path, whole);
    edit_file(path, [](auto& b) { b[b.size() - 3] ^= 0x01; }); // the trailer's own checksum
    expect_load_error(path, errc::checksum_mismatch, "trailer checksum mismatch");

    ruda::test::write_bytes(path, whole);
    edit_file(path, [](auto& b) { b[b.size() - 32] = 'X'; });
    expect_load_error(path, errc::malformed_record, "no trailer");

    ruda::test::write_bytes(path, whole);
    edit_file(path, [](auto& b) { b[0] = 'r'; });
    expect_load_error(path, errc::malformed_record, "no RUDACKPT magic");
}

BOOST_AUTO_TEST_CASE(corrupt_payloads_fail_their_checksums_unless_skipped)
{
    const temp_dir dir;
    const auto path = saved_sample(dir);
    const auto index = ruda::checkpoint_reader::open(path).value().index();
    const auto& target = index.entries[4]; // parameter 5
    edit_file(path, [&](auto& b) { b[target.payload.offset + 1] ^= 0x80; });
    expect_load_error(path, errc::checksum_mismatch,
                      "checksum mismatch in the gradient of parameter 5");
    const auto reader = ruda::checkpoint_reader::open(path).value();
    BOOST_TEST(!reader.payload_intact(target.payload).value());

    // Skipping verification is an explicit choice; the flipped bit then comes through.
    const auto unchecked = ruda::load_checkpoint_file(path, {.verify_checksums = false});
    BOOST_REQUIRE(unchecked);
    BOOST_TEST(!(unchecked.value().gradients().entries()[4] == ruda::test::valid_sample().entries()[4]));

    const auto section = index.sections[0];
    edit_file(path, [&](auto& b) {
        b[target.payload.offset + 1] ^= 0x80;
        b[section.payload.offset] ^= 0x01;
    });
    expect_load_error(path, errc::checksum_mismatch, "checksum mismatch in section step");
}

BOOST_AUTO_TEST_CASE(padding_between_payloads_must_be_zero)
{
    const temp_dir dir;
    const auto path = saved_sample(dir);
    const auto index = ruda::checkpoint_reader::open(path).value().index();
    const auto& first = index.entries[0].payload; // 48 bytes, then 16 bytes of padding
    BOOST_REQUIRE(first.length % 64 != 0);
    edit_file(path, [&](auto& b) { b[first.offset + first.length + 3] = 0x5a; });
    expect_load_error(path, errc::malformed_record, "nonzero padding between offsets");
    // A partial load reads only what it needs.
    BOOST_CHECK(ruda::load_checkpoint_file(path, {.only_ids = std::vector<ruda::param_id>{ruda::param_id{2}}}));
}

BOOST_AUTO_TEST_CASE(a_checkpoint_in_memory_loads_like_the_file)
{
    const temp_dir dir;
    const auto path = saved_sample(dir);
    const auto bytes = ruda::test::read_bytes(path);
    const auto from_memory = ruda::load_checkpoint_bytes(bytes);
    BOOST_REQUIRE(from_memory);
    BOOST_TEST((from_memory.value() == ruda::load_checkpoint_file(path).value()));
    const auto truncated = std::vector<std::uint8_t>(bytes.begin(), bytes.end() - 1);
    const auto bad = ruda::load_checkpoint_bytes(truncated);
    BOOST_TEST(bad.error() == errc::malformed_record);
    BOOST_TEST(bad.error().message().find("Checkpoint <memory>: ") == 0U);
}

BOOST_AUTO_TEST_CASE(an_oversized_header_is_refused_before_it_is_read)
{
    const temp_dir dir;
    const auto path = saved_sample(dir);
    const auto whole = ruda::test::read_bytes(path);
    expect_load_error(path, errc::malformed_record,
                      "exceeds the limit of 100", {.max_header_bytes = 100});
    // A header that claims more than the file holds, a little or vastly.
    ruda::test::rewrite(path, [](auto&) {}, [](ruda::detail::frame& f) { f.header_length += 1000; });
    expect_load_error(path, errc::malformed_record,
                      "does not end 32 bytes before the end of the file");
    ruda::test::write_bytes(path, whole);
    ruda::test::rewrite(path, [](auto&) {}, [](ruda::detail::frame& f) {
        f.header_length = std::uint64_t{1} << 40U;
    });
    expect_load_error(path, errc::malformed_record, "exceeds the limit of 67108864");
}

BOOST_AUTO_TEST_CASE(payloads_outside_the_area_misaligned_or_overlapping_are_refused)
{
    const temp_dir dir;
    const auto path = saved_sample(dir);
    const auto whole = ruda::test::read_bytes(path);
    const auto header_offset = ruda::test::le64(whole, 24);
    const auto cases = std::vector<std::pair<std::function<void(ruda::checkpoint_index&)>, std::string>>{
        {[&](auto& i) { i.entries[0].payload.offset = 0; }, "outside the payload area"},
        {[&](auto& i) { i.entries[0].payload.offset = header_offset + 64; }, "outside the payload area"},
        {[&](auto& i) { i.entries[1].payload.length = header_offset; }, "outside the payload area"},
        {[&](auto& i) { i.entries[2].payload.length = ~std::uint64_t{0}; }, "outside the payload area"},
        {[&](auto& i) { i.entries[0].payload.offset += 1; }, "outside the payload area"},
        {[&](auto& i) { i.entries[1].payload.offset = i.entries[0].payload.offset; }, "overlap"},
        {[&](auto& i) { i.sections[0].payload = i.entries[3].payload; }, "overlap"},
    };
    for (const auto& [edit, text] : cases) {
        ruda::test::write_bytes(path, whole);
        ruda::test::rewrite(path, edit);
        expect_load_error(path, errc::malformed_record, text);
    }
}

BOOST_AUTO_TEST_CASE(impossible_counts_dtypes_ranks_and_names_are_refused)
{
    const temp_dir dir;
    const auto path = saved_sample(dir);
    const auto whole = ruda::test::read_bytes(path);
    const auto header_offset = ruda::test::le64(whole, 24);
    // Raw header edits with the checksums recomputed: the decoder sees exactly these bytes.
    const auto with_header = [&](const std::function<void(std::vector<std::uint8_t>&)>& edit) {
        std::vector<std::uint8_t> header(whole.begin() + static_cast<std::ptrdiff_t>(header_offset),
                                         whole.end() - 32);
        edit(header);
        ruda::test::write_bytes(path, ruda::test::reframe(whole, header));
    };
    const auto set64 = [](std::vector<std::uint8_t>& b, std::size_t at, std::uint64_t v) {
        for (std::size_t i = 0; i < 8; ++i) {
            b[at + i] = static_cast<std::uint8_t>(v >> (8 * i));
        }
    };
    with_header([&](auto& h) { set64(h, 0, std::uint64_t{1} << 60U); });
    expect_load_error(path, errc::malformed_record, "claims 1152921504606846976 entries");
    with_header([&](auto& h) { set64(h, 8, 1000000); });
    expect_load_error(path, errc::malformed_record, "1000000 sections");
    with_header([](auto& h) { h[16 + 8] = 99; }); // the first entry's dtype kind
    expect_load_error(path, errc::malformed_record, "parameter 1) has an invalid dtype");
    with_header([](auto& h) { h[16 + 8 + 24 + 23] = 1; }); // its stored dtype's padding
    expect_load_error(path, errc::malformed_record, "invalid dtype");
    with_header([](auto& h) { h[16 + 8 + 48] = 65; }); // its rank
    expect_load_error(path, errc::malformed_record, "invalid rank 65");
    with_header([](auto& h) { h.push_back(0); });
    expect_load_error(path, errc::malformed_record, "header is too long");
    with_header([](auto& h) { h.erase(h.end() - 3, h.end()); });
    expect_load_error(path, errc::malformed_record, "header is truncated");

    ruda::test::write_bytes(path, whole);
    ruda::test::rewrite(path, [](auto& i) { i.sections[1].name = i.sections[0].name; });
    expect_load_error(path, errc::malformed_record, "two sections named step");
    ruda::test::write_bytes(path, whole);
    ruda::test::rewrite(path, [](auto& i) { i.sections[1].name = std::string(256, 'n'); });
    expect_load_error(path, errc::malformed_record, "name of invalid length 256");
    ruda::test::write_bytes(path, whole);
    ruda::test::rewrite(path, [](auto& i) { i.sections[1].name = "caf\xe9"; });
    expect_load_error(path, errc::malformed_record, "section 1 has a name that is not UTF-8");
}

BOOST_AUTO_TEST_CASE(a_save_refuses_what_a_load_would_reject_before_writing_a_byte)
{
    const temp_dir dir;
    const auto path = dir / "bad.ruda";
    const auto f32 = ruda::dtype::f32();
    const auto q4 = ruda::test::quantized(ruda::quant_value::q4f, ruda::quant_param::f32,
                                          ruda::quant_store::packed_u32(2));
    const std::size_t huge = std::size_t{1} << 40U;
    struct refused {
        const char* what;
        ruda::gradients_params_record record;
        errc code;
        const char* text;
    };
    const std::vector<refused> cases{
        {"duplicate ids",
         ruda::gradients_params_record{{{ruda::param_id{1}, f32, ruda::test::patterned(4, {1}, f32)},
                                        {ruda::param_id{1}, f32, ruda::test::patterned(4, {1}, f32)}}},
         errc::duplicate_param_id, "Duplicate gradient parameter ID 1"},
        {"bytes that do not match the shape",
         ruda::gradients_params_record{{{ruda::param_id{2}, f32, ruda::test::patterned(12, {2, 2}, f32)}}},
         errc::byte_count_mismatch, "parameter 2: expected 16, got 12"},
        {"a dtype the stored one cannot restore",
         ruda::gradients_params_record{{{ruda::param_id{3}, f32, ruda::test::patterned(4, {1}, ruda::dtype::i32())}}},
         errc::invalid_dtype, "Invalid gradient dtype for parameter 3"},
        {"a quantized layout past the rank",
         ruda::gradients_params_record{{{ruda::param_id{4}, q4, ruda::test::patterned(8, {2, 2}, q4)}}},
         errc::invalid_quantization, "parameter 4: packing dimension exceeds tensor rank"},
        {"a shape that overflows",
         ruda::gradients_params_record{{{ruda::param_id{5}, f32, ruda::tensor_data{{}, {huge, huge}, f32}}}},
         errc::shape_overflow, "Gradient shape overflows for parameter 5"},
        {"65 dimensions",
         ruda::gradients_params_record{
             {{ruda::param_id{6}, f32, ruda::test::patterned(4, ruda::shape(65, 1), f32)}}},
         errc::malformed_record, "parameter 6 has 65 dimensions; a checkpoint holds at most 64"},
    };
    for (const refused& c : cases) {
        BOOST_TEST_CONTEXT(c.what)
        {
            faulty_ops counting;
            const auto saved = ruda::save_checkpoint_file(path, ruda::checkpoint{c.record}, counting);
            BOOST_REQUIRE(!saved);
            BOOST_TEST(saved.error() == c.code);
            BOOST_TEST(saved.error().message().starts_with("Checkpoint " + path.string() + ": "));
            BOOST_TEST(saved.error().message().find(c.text) != std::string::npos,
                       saved.error().message());
            BOOST_TEST(counting.calls == 0); // not even the temporary file was created
            BOOST_TEST(std::filesystem::is_empty(dir.path()));
        }
    }
    // A header over the limit a load accepts: refused, and the limit is exact.
    BOOST_REQUIRE(ruda::save_checkpoint_file(path, sample_checkpoint()));
    const auto header_length = ruda::test::le64(ruda::test::read_bytes(path), 32);
    std::filesystem::remove(path);
    faulty_ops counting;
    const auto over = ruda::save_checkpoint_file(path, sample_checkpoint(),
                                                 {.max_header_bytes = header_length - 1}, counting);
    BOOST_TEST(over.error() == errc::malformed_record);
    BOOST_TEST(over.error().message().find("its header would be " + std::to_string(header_length) +
                                           " bytes, over the limit of " +
                                           std::to_string(header_length - 1)) != std::string::npos);
    BOOST_TEST(counting.calls == 0);
    BOOST_REQUIRE(ruda::save_checkpoint_file(path, sample_checkpoint(),
                                             {.max_header_bytes = header_length}));
    expect_load_error(path, errc::malformed_record, "exceeds the limit",
                      {.max_header_bytes = header_length - 1}); // the load's own check agrees

    // 64 dimensions are the most a load takes, and they save.
    BOOST_CHECK(ruda::save_checkpoint_file(
        path, ruda::checkpoint{ruda::gradients_params_record{
                       {{ruda::param_id{6}, f32, ruda::test::patterned(4, ruda::shape(64, 1), f32)}}}}));
    BOOST_CHECK(ruda::load_checkpoint_file(path));
}

BOOST_AUTO_TEST_CASE(a_sound_frame_with_an_invalid_record_fails_restore_validation)
{
    const temp_dir dir;
    const auto path = saved_sample(dir);
    const auto whole = ruda::test::read_bytes(path);
    ruda::test::rewrite(path, [](auto& i) { i.entries[1].id = i.entries[0].id; });
    expect_load_error(path, errc::duplicate_param_id, "Duplicate gradient parameter ID 1");
    ruda::test::write_bytes(path, whole);
    ruda::test::rewrite(path, [](auto& i) { i.entries[0].shape = {2, 4}; }); // 48 bytes, not 64
    expect_load_error(path, errc::byte_count_mismatch,
                      "Invalid gradient byte count for parameter 1: expected 64, got 48");
    ruda::test::write_bytes(path, whole);
    ruda::test::rewrite(path, [](auto& i) { i.entries[0].stored = ruda::dtype::i32(); });
    expect_load_error(path, errc::invalid_dtype, "Invalid gradient dtype for parameter 1");
}

BOOST_AUTO_TEST_SUITE_END()
