// safetensors export and import: the exact layout, round trips of every float dtype (original
// dtypes kept in the metadata), foreign names, and every refusal of a bad file.
#include "../support/error_text.hpp"
#include "checkpoint_test_support.hpp"

#include <ruda/checkpoint/safetensors.hpp>
#include <ruda/optim/param_id.hpp>

#include <boost/test/unit_test.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <string>

namespace {

using ruda::test::says;
using ruda::errc;
using ruda::test::temp_dir;

// Every float entry of the checkpoint tests' sample: each float dtype (NaN payloads,
// infinities, subnormals), empty and rank-0 tensors, an entry stored narrower than it was.
ruda::gradients_params_record exportable_sample()
{
    std::vector<ruda::gradient_entry> entries;
    const auto sample = ruda::test::valid_sample();
    for (const auto& entry : sample.entries()) {
        if (!entry.dtype.is_quantized()) {
            entries.push_back(entry);
        }
    }
    return ruda::gradients_params_record{std::move(entries)};
}

// A safetensors file from a header and `data_size` bytes of data.
std::vector<std::uint8_t> file_of(const std::string& header, std::size_t data_size = 0)
{
    std::vector<std::uint8_t> bytes;
    bytes.reserve(8 + header.size() + data_size);
    for (std::size_t i = 0; i < 8; ++i) {
        bytes.push_back(static_cast<std::uint8_t>(header.size() >> (8 * i)));
    }
    for (const char c : header) {
        bytes.push_back(static_cast<std::uint8_t>(c));
    }
    bytes.resize(bytes.size() + data_size, 0x3c);
    return bytes;
}

ruda::result<ruda::gradients_params_record> import(const std::string& header,
                                                   std::size_t data_size = 0)
{
    return ruda::import_safetensors_bytes(file_of(header, data_size));
}

} // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_safetensors)

BOOST_AUTO_TEST_CASE(export_writes_the_documented_layout)
{
    const temp_dir dir;
    const std::vector<ruda::gradient_entry> entries{
        {ruda::param_id{9}, ruda::dtype::f32(), ruda::tensor_data::from_values(std::vector<float>{1, 2, 3}, {3}).value()},
        {ruda::param_id{4}, ruda::dtype::bf16(), ruda::test::patterned(4, {2}, ruda::dtype::bf16())}};
    const auto path = dir / "g.safetensors";
    const auto size = ruda::export_safetensors(ruda::gradients_params_record{entries}, path);
    BOOST_REQUIRE(size.has_value());
    const auto bytes = ruda::test::read_bytes(path);
    BOOST_TEST(bytes.size() == size.value());
    const std::uint64_t header_size = ruda::test::le64(bytes, 0);
    BOOST_TEST(header_size % 8 == 0U); // the data starts 8-byte aligned
    const std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(header_size));
    BOOST_TEST(header.rfind(R"({"__metadata__":{"producer":"ruda"},)"
                            R"("4":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},)"
                            R"("9":{"dtype":"F32","shape":[3],"data_offsets":[4,16]}})",
                            0) == 0U);
    BOOST_TEST(header.find_first_not_of(' ', header.find("}}") + 2) == std::string::npos);
    BOOST_TEST(bytes.size() == 8 + header_size + 16);
    float last = 0;
    std::memcpy(&last, bytes.data() + bytes.size() - 4, 4);
    BOOST_TEST(last == 3.0F);
    BOOST_TEST(!std::filesystem::exists(dir / "g.safetensors.tmp"));
}

BOOST_AUTO_TEST_CASE(round_trips_every_dtype_bit_exact_with_original_dtypes)
{
    const temp_dir dir;
    const auto record = exportable_sample();
    const auto path = dir / "all.safetensors";
    BOOST_REQUIRE(ruda::export_safetensors(record, path).has_value());
    const auto back = ruda::import_safetensors(path);
    BOOST_REQUIRE_MESSAGE(back.has_value(), (back ? "" : back.error().message()));
    auto expected = record.entries();
    std::sort(expected.begin(), expected.end(),
              [](const auto& a, const auto& b) { return a.id < b.id; });
    BOOST_REQUIRE(back.value().entries().size() == expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) {
        const auto& got = back.value().entries()[i];
        BOOST_TEST(got.id == expected[i].id);
        BOOST_TEST(got.dtype == expected[i].dtype, "parameter " << got.id);
        BOOST_TEST(got.data.shape() == expected[i].data.shape());
        BOOST_TEST(got.data.bytes() == expected[i].data.bytes(), "parameter " << got.id);
        // flex32 data is stored as F32, with the same bytes.
        const bool flex = expected[i].data.dtype() == ruda::dtype::flex32();
        BOOST_TEST((got.data.dtype() == (flex ? ruda::dtype::f32() : expected[i].data.dtype())));
    }
    const auto bytes = ruda::test::read_bytes(path);
    const std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(ruda::test::le64(bytes, 0)));
    BOOST_TEST(header.find(R"("ruda.original_dtype.3":"flex32")") != std::string::npos);
    BOOST_TEST(header.find(R"("ruda.original_dtype.9":"bf16")") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(export_refuses_what_safetensors_cannot_hold_and_writes_nothing)
{
    const temp_dir dir;
    const auto path = dir / "q.safetensors";
    const auto quantized = ruda::export_safetensors(ruda::test::valid_sample(), path);
    BOOST_TEST(quantized.error() == errc::invalid_dtype);
    BOOST_TEST(says(quantized.error(), "parameter 10"));
    BOOST_TEST(says(quantized.error(), "qfloat"));
    const auto words = ruda::dtype::boolean(ruda::bool_store::u32); // no safetensors dtype
    const auto bools = ruda::export_safetensors(
        ruda::gradients_params_record{{{ruda::param_id{1}, words, ruda::test::patterned(4, {1}, words)}}}, path);
    BOOST_TEST(bools.error() == errc::invalid_dtype);
    BOOST_TEST(says(bools.error(), "not bool"));
    const auto ints = ruda::dtype::i32(); // stored as another dtype: never converted
    const auto mixed = ruda::export_safetensors(
        ruda::gradients_params_record{{{ruda::param_id{1}, ints, ruda::test::patterned(8, {1}, ruda::dtype::i64())}}}, path);
    BOOST_TEST(mixed.error() == errc::invalid_dtype);
    BOOST_TEST(!std::filesystem::exists(path));
    BOOST_TEST(!std::filesystem::exists(dir / "q.safetensors.tmp"));
    const auto unwritable = ruda::export_safetensors(exportable_sample(), dir / "no" / "x.safetensors");
    BOOST_TEST(unwritable.error() == errc::io_error);

    // What an import would refuse is not written either: two tensors of one id (one name),
    // bytes that do not match the shape, 65 dimensions.
    const auto f32 = ruda::dtype::f32();
    const auto twice = ruda::export_safetensors(
        ruda::gradients_params_record{{{ruda::param_id{5}, f32, ruda::test::patterned(4, {1}, f32)},
                                       {ruda::param_id{5}, f32, ruda::test::patterned(4, {1}, f32)}}},
        path);
    BOOST_TEST(twice.error() == errc::duplicate_param_id);
    const auto short_bytes = ruda::export_safetensors(
        ruda::gradients_params_record{{{ruda::param_id{5}, f32, ruda::test::patterned(6, {2}, f32)}}}, path);
    BOOST_TEST(short_bytes.error() == errc::byte_count_mismatch);
    const auto deep = ruda::export_safetensors(
        ruda::gradients_params_record{{{ruda::param_id{5}, f32, ruda::test::patterned(4, ruda::shape(65, 1), f32)}}},
        path);
    BOOST_TEST(deep.error() == errc::malformed_record);
    BOOST_TEST(says(deep.error(), "65 dimensions"));
    const auto over = ruda::export_safetensors(exportable_sample(), path, {.max_header_bytes = 64});
    BOOST_TEST(over.error() == errc::allocation_too_large);
    BOOST_TEST(says(over.error(), "over the limit of 64 an import accepts"));
    BOOST_TEST(!std::filesystem::exists(path));
    BOOST_TEST(!std::filesystem::exists(dir / "q.safetensors.tmp"));
}

BOOST_AUTO_TEST_CASE(import_names_other_than_ids_get_the_id_of_the_name)
{
    const auto record = import(R"({"fc1.weight":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                               R"("17":{"dtype":"F16","shape":[],"data_offsets":[4,6]}})",
                               6);
    BOOST_REQUIRE_MESSAGE(record.has_value(), (record ? "" : record.error().message()));
    std::set<std::uint64_t> ids;
    for (const auto& entry : record.value().entries()) {
        ids.insert(entry.id.val());
    }
    BOOST_TEST(ids == (std::set<std::uint64_t>{17, ruda::param_id::from_name("fc1.weight").val()}));
    // "017" and "-1" are names, not ids.
    const auto padded = import(R"({"017":{"dtype":"BF16","shape":[0],"data_offsets":[0,0]}})");
    BOOST_REQUIRE(padded.has_value());
    BOOST_TEST(padded.value().entries()[0].id == ruda::param_id::from_name("017"));
    // Escapes decode to UTF-8 before the id is taken; whitespace may go anywhere.
    const auto escaped = import(" {\n \"caf\\u00e9.\\ud83d\\ude00\\\"w\" : { \"dtype\" : \"F32\", "
                                "\"shape\" : [ ] , \"data_offsets\" : [ 0 , 4 ] } }\t", 4);
    BOOST_REQUIRE(escaped.has_value());
    BOOST_TEST(escaped.value().entries()[0].id ==
               ruda::param_id::from_name("caf\xc3\xa9.\xf0\x9f\x98\x80\"w"));
    for (const std::string bad_name : {"\\ud83d", "\\ude00", "\\u12", "\\x", "tab\there"}) {
        const auto refused = import("{\"" + bad_name + R"(":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})", 4);
        BOOST_TEST(refused.error() == errc::malformed_record, bad_name);
    }
}

BOOST_AUTO_TEST_CASE(import_refuses_a_broken_frame_or_header)
{
    BOOST_TEST(ruda::import_safetensors_bytes(std::vector<std::uint8_t>(7)).error() ==
               errc::malformed_record);
    auto too_long = file_of("{}");
    too_long[0] = 200; // claims more header than the file holds
    const auto claims = ruda::import_safetensors_bytes(too_long);
    BOOST_TEST(claims.error() == errc::malformed_record);
    BOOST_TEST(says(claims.error(), "claims 200 bytes"));
    const auto over_limit =
        ruda::import_safetensors_bytes(file_of("{}    "), ruda::safetensors_limits{.max_header_bytes = 4});
    BOOST_TEST(over_limit.error() == errc::allocation_too_large);

    BOOST_TEST(import("{}").has_value()); // no tensors: an empty record
}

BOOST_AUTO_TEST_CASE(integer_and_bool_tensors_round_trip_as_themselves)
{
    // What tensor groups other than the gradients hold: step counts, generator states, masks.
    const temp_dir dir;
    const auto path = dir / "ints.safetensors";
    std::vector<ruda::gradient_entry> entries;
    const auto add = [&](const std::string& name, ruda::dtype type, std::size_t bytes,
                         ruda::shape dims) {
        entries.push_back({ruda::param_id::from_name(name), type,
                           ruda::test::patterned(bytes, std::move(dims), type), name});
    };
    add("fc1.weight.step", ruda::dtype::i64(), 8, {});
    add("rng", ruda::dtype::u8(), 16, {16});
    add("counts", ruda::dtype::i16(), 6, {3});
    add("mask", ruda::dtype::boolean(), 4, {2, 2});
    std::vector<std::uint8_t> zero_one{0, 1, 1, 0};
    entries.back().data = ruda::tensor_data{zero_one, {2, 2}, ruda::dtype::boolean()};
    ruda::gradients_params_record record{std::move(entries)};
    BOOST_REQUIRE(ruda::export_safetensors(record, path));
    const auto bytes = ruda::test::read_bytes(path);
    const std::string header(bytes.begin() + 8,
                             bytes.begin() + 8 + static_cast<long>(ruda::test::le64(bytes, 0)));
    for (const std::string type : {"I64", "U8", "I16", "BOOL"}) {
        BOOST_TEST(header.find("\"dtype\":\"" + type + "\"") != std::string::npos, header);
    }
    auto imported = ruda::import_safetensors(path).value().into_entries();
    auto expected = std::move(record).into_entries();
    const auto by_id = [](const auto& a, const auto& b) { return a.id < b.id; };
    std::sort(expected.begin(), expected.end(), by_id);
    BOOST_TEST((imported == expected));
}

BOOST_AUTO_TEST_CASE(import_refuses_bad_tensors_with_their_own_codes)
{
    for (const std::string type : {"F8_E4M3", "C64", "F8_E5M2"}) {
        const auto unknown = import(R"({"w":{"dtype":")" + type +
                                    R"(","shape":[1],"data_offsets":[0,1]}})", 1);
        BOOST_TEST(unknown.error() == errc::invalid_dtype);
        BOOST_TEST(says(unknown.error(), "has dtype " + type));
        BOOST_TEST(says(unknown.error(), "\"w\""));
    }
    const auto count = import(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4);
    BOOST_TEST(count.error() == errc::byte_count_mismatch);
    BOOST_TEST(says(count.error(), "4 bytes for 2 F32 values"));
    const auto huge = import(
        R"({"w":{"dtype":"F64","shape":[4294967296,4294967296,2],"data_offsets":[0,8]}})", 8);
    BOOST_TEST(huge.error() == errc::shape_overflow);
    const auto wraps = import(
        R"({"w":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}})");
    BOOST_TEST(wraps.error() == errc::byte_count_mismatch); // 2^61 * 8 wraps to 0
    const auto twice = import(R"({"w":{"dtype":"F16","shape":[1],"data_offsets":[0,2]},)"
                              R"("w":{"dtype":"F16","shape":[1],"data_offsets":[2,4]}})",
                              4);
    BOOST_TEST(twice.error() == errc::malformed_record);
    const std::string id_of_a = std::to_string(ruda::param_id::from_name("a").val());
    const auto same_id = import(R"({"a":{"dtype":"F16","shape":[1],"data_offsets":[0,2]},")" +
                                    id_of_a + R"(":{"dtype":"F16","shape":[1],"data_offsets":[2,4]}})",
                                4);
    BOOST_TEST(same_id.error() == errc::duplicate_param_id);
    BOOST_TEST(says(same_id.error(), id_of_a));
}

BOOST_AUTO_TEST_CASE(import_bounds_shapes_and_names_and_stays_linear)
{
    // A shape of 10^7 dimensions once took 175 MiB from a 19 MiB file; 64 is the most a
    // gradient can have.
    std::string dims = "1";
    for (int k = 1; k < 65; ++k) {
        dims += ",1";
    }
    const auto deep = import(R"({"w":{"dtype":"F32","shape":[)" + dims + R"(],"data_offsets":[0,4]}})", 4);
    BOOST_TEST(deep.error() == errc::malformed_record);
    BOOST_TEST(says(deep.error(), "expected at most 64 integers"));
    const auto three = import(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,4]}})", 4);
    BOOST_TEST(three.error() == errc::malformed_record);

    // Names are UTF-8 text, raw or escaped.
    for (const std::string bad : {"caf\xe9", "\xc0\xaf", "\xed\xa0\x80"}) {
        const auto refused = import("{\"" + bad + R"(":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4);
        BOOST_TEST(refused.error() == errc::malformed_record);
        BOOST_TEST(says(refused.error(), "expected UTF-8 text"));
    }
    BOOST_CHECK(import(R"({"caf\u00e9 \ud83d\ude00":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4));

    // 50,000 tensors, each with its original dtype in the metadata: once a search of every
    // tensor per key (quadratic: 300,000 keys took 222 s), now a map.
    constexpr std::size_t count = 50000;
    std::string metadata = R"({"__metadata__":{)";
    std::string tensors;
    for (std::size_t k = 0; k < count; ++k) {
        std::string name = "t";
        name += std::to_string(k);
        metadata.append(k == 0 ? "\"" : ",\"").append("ruda.original_dtype.").append(name);
        metadata.append(R"(":"f64")");
        tensors.append(",\"").append(name).append(R"(":{"dtype":"F32","shape":[1],"data_offsets":[)");
        tensors.append(std::to_string(4 * k)).append(",").append(std::to_string(4 * k + 4)).append("]}");
    }
    const auto many = import(metadata + "}" + tensors + "}", 4 * count);
    BOOST_REQUIRE(many);
    BOOST_TEST(many.value().entries().size() == count);
    BOOST_TEST(std::all_of(many.value().entries().begin(), many.value().entries().end(),
                           [](const ruda::gradient_entry& e) { return e.dtype == ruda::dtype::f64(); }));
}

BOOST_AUTO_TEST_CASE(import_names_a_missing_file)
{
    const temp_dir dir;
    const auto missing = ruda::import_safetensors(dir / "none.safetensors");
    BOOST_TEST(missing.error() == errc::io_error);
    BOOST_TEST(says(missing.error(), "none.safetensors"));

    // A FIFO without a writer is refused at once, never waited on; a directory too.
    const auto fifo = dir / "pipe.safetensors";
    BOOST_REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    for (const auto& path : {fifo, dir.path()}) {
        const auto refused = ruda::import_safetensors(path);
        BOOST_TEST(refused.error() == errc::malformed_record, refused.error().message());
        BOOST_TEST(says(refused.error(), "not a regular file"), refused.error().message());
    }
}

BOOST_AUTO_TEST_CASE(named_gradients_export_under_their_names_and_import_back_equal)
{
    const temp_dir dir;
    auto entries = exportable_sample().into_entries();
    entries[0].id = ruda::param_id::from_name("fc1.weight"); // as from_module keys it
    entries[0].name = "fc1.weight";
    entries[1].name = "custom";         // an id of the user's own: kept in the metadata
    entries[2].name = "42";             // a name that reads as an id: so is this one's
    entries[3].name = "caf\xc3\xa9 \"q\""; // escaped in the header
    const auto path = dir / "named.safetensors";
    ruda::export_safetensors(ruda::gradients_params_record{entries}, path).value();
    const auto bytes = ruda::test::read_bytes(path);
    const std::string header(bytes.begin() + 8,
                             bytes.begin() + 8 + static_cast<long>(ruda::test::le64(bytes, 0)));
    BOOST_TEST(header.find(R"("fc1.weight":{"dtype":)") != std::string::npos);
    BOOST_TEST(header.find(R"("caf)" "\xc3\xa9" R"( \"q\"":{"dtype":)") != std::string::npos);
    BOOST_TEST(header.find(R"("ruda.id.custom":"2")") != std::string::npos);
    BOOST_TEST(header.find(R"("ruda.id.42":"3")") != std::string::npos);
    BOOST_TEST(header.find("ruda.id.fc1.weight") == std::string::npos);
    BOOST_TEST(header.find(R"("5":{"dtype":)") != std::string::npos); // unnamed: its id

    const auto back = ruda::import_safetensors(path);
    BOOST_REQUIRE_MESSAGE(back.has_value(), (back ? "" : back.error().message()));
    std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
    BOOST_REQUIRE_EQUAL(back.value().entries().size(), entries.size());
    for (std::size_t i = 0; i < entries.size(); ++i) {
        const auto& a = entries[i];
        const auto& b = back.value().entries()[i];
        BOOST_TEST(b.id == a.id);
        BOOST_TEST(b.name == a.name);
        BOOST_TEST(b.dtype == a.dtype); // flex32 comes back as F32 data of a flex32 gradient
        BOOST_TEST((b.data.bytes() == a.data.bytes()));
    }

    // The export refuses two entries of one name, before writing a byte.
    entries[1].name = entries[2].name = "twice";
    const auto twice = ruda::export_safetensors(ruda::gradients_params_record{entries}, dir / "t.safetensors");
    BOOST_TEST(twice.error() == errc::malformed_record);
    BOOST_TEST(says(twice.error(), "have the same name twice"));
    BOOST_TEST(!std::filesystem::exists(dir / "t.safetensors"));
}

BOOST_AUTO_TEST_CASE(import_refuses_id_metadata_that_names_no_tensor_or_no_id)
{
    const std::string tensor = R"("w":{"dtype":"F32","shape":[],"data_offsets":[0,4]})";
    const auto with = [&](const std::string& metadata) {
        return import(R"({"__metadata__":{)" + metadata + "}," + tensor + "}", 4);
    };
    const auto kept = with(R"("ruda.id.w":"77")");
    BOOST_REQUIRE(kept.has_value());
    BOOST_TEST(kept.value().entries()[0].id.val() == 77U);
    BOOST_TEST(kept.value().entries()[0].name == "w");
    for (const std::string bad : {R"("ruda.id.v":"77")", R"("ruda.id.w":"x")", R"("ruda.id.w":"-1")"}) {
        const auto refused = with(bad);
        BOOST_TEST(refused.error() == errc::malformed_record, bad);
        BOOST_TEST(says(refused.error(), "names no tensor or no id"), bad);
    }
    const auto clash = import(R"({"__metadata__":{"ruda.id.a":"5"},"a":{"dtype":"F32","shape":[],)"
                              R"("data_offsets":[0,4]},"5":{"dtype":"F32","shape":[],"data_offsets":[4,8]}})",
                              8);
    BOOST_TEST(clash.error() == errc::duplicate_param_id);
}

BOOST_AUTO_TEST_SUITE_END()
