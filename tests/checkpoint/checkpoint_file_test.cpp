// Checkpoint files: bit-exact round trips with sections; a newer format version; every kind of
// corrupt, truncated, foreign or inconsistent frame rejected with its own code before anything
// is deserialized; payload checksums; partial loads; and a failed or short write.
#include "checkpoint_test_support.hpp"

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
using ruda::test::temp_dir;

struct optimizer_state {
    std::uint64_t step = 0;
    std::vector<double> moments;
    std::map<std::string, float> hyper;

    template <class Archive>
    void serialize(Archive& ar)
    {
        ar(step, moments, hyper);
    }
    friend bool operator==(const optimizer_state&, const optimizer_state&) = default;
};

ruda::checkpoint sample_checkpoint()
{
    ruda::checkpoint c{ruda::test::valid_sample()};
    c.put("step", std::uint64_t{1234}).value();
    c.put("optimizer", optimizer_state{7, {0.5, -1e-300, 3.0}, {{"lr", 0.01F}, {"beta", 0.9F}}})
        .value();
    c.put("rng", std::string("mt19937 state ...")).value();
    return c;
}

// Saves the sample and returns its path.
std::filesystem::path saved_sample(const temp_dir& dir)
{
    const auto path = dir / "sample.ruda";
    BOOST_REQUIRE(ruda::save_checkpoint_file(path, sample_checkpoint()));
    return path;
}

void expect_load_error(const std::filesystem::path& path, errc code, const std::string& text,
                       const ruda::checkpoint_load_options& options = {})
{
    const auto loaded = ruda::load_checkpoint_file(path, options);
    BOOST_REQUIRE(!loaded);
    BOOST_TEST(loaded.error() == code);
    BOOST_TEST(loaded.error().message().find(text) != std::string::npos,
               "\"" << loaded.error().message() << "\" should contain \"" << text << "\"");
}

// A one-line file edit: `edit` changes the bytes.
void edit_file(const std::filesystem::path& path,
               const std::function<void(std::vector<std::uint8_t>&)>& edit)
{
    auto bytes = ruda::test::read_bytes(path);
    edit(bytes);
    ruda::test::write_bytes(path, bytes);
}

// Stands for a full disk, a failing fsync or rename...: fails call number `fail_at` (counting
// every operation from 1), and may write at most `chunk` bytes per write call.
class faulty_ops : public ruda::file_ops {
public:
    int fail_at = 0;
    std::size_t chunk = 0;
    int calls = 0;

    ruda::result<int> create(const std::filesystem::path& p) override
    {
        return fail() ? injected() : ruda::file_ops::create(p);
    }
    ruda::result<std::size_t> write(int fd, const void* data, std::size_t size) override
    {
        if (fail()) {
            return injected();
        }
        return ruda::file_ops::write(fd, data, chunk != 0 ? std::min(size, chunk) : size);
    }
    ruda::result<void> pwrite(int fd, const void* data, std::size_t size,
                              std::uint64_t offset) override
    {
        return fail() ? injected() : ruda::file_ops::pwrite(fd, data, size, offset);
    }
    ruda::result<void> fsync(int fd) override
    {
        return fail() ? injected() : ruda::file_ops::fsync(fd);
    }
    ruda::result<void> close(int fd) override
    {
        if (fail()) {
            (void)ruda::file_ops::close(fd); // a failed close still releases the descriptor
            return injected();
        }
        return ruda::file_ops::close(fd);
    }
    ruda::result<void> rename(const std::filesystem::path& from,
                              const std::filesystem::path& to) override
    {
        return fail() ? injected() : ruda::file_ops::rename(from, to);
    }
    ruda::result<void> sync_directory(const std::filesystem::path& dir) override
    {
        return fail() ? injected() : ruda::file_ops::sync_directory(dir);
    }

private:
    bool fail() { return ++calls == fail_at; }
    static ruda::error injected() { return {errc::io_error, "injected: no space left on device"}; }
};

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
