// Files written by ruda before tensor bytes moved into ruda::storage (tests/record/data, written
// by the release before that change): each loads into the same record, and ruda writes the
// checkpoint again byte for byte, so the change left the checkpoint format as it was. The
// cereal archives are of gradient_entry version 1; version 2 added the parameter's name, and
// golden-v2.* (written when it did) pin its encoding: v1 archives load with empty names, v2
// archives load with the names, and ruda writes v2 again byte for byte.
#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/optim/record_serialization.hpp>
#include <ruda/record/text_nesting.hpp>

#include <boost/test/unit_test.hpp>
#include <cereal/archives/binary.hpp>
#include <cereal/archives/json.hpp>
#include <cereal/archives/portable_binary.hpp>
#include <cereal/archives/xml.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

namespace {

const std::filesystem::path data_dir =
    std::filesystem::path(RUDA_TEST_DATA_DIR) / ".." / ".." / "record" / "data";

std::string file_text(const std::string& name)
{
    std::ifstream in{data_dir / name, std::ios::binary};
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The record in the files: f32, f16 (with -0 and the largest f16), an empty f64, and q8s.
ruda::gradients_params_record golden()
{
    std::vector<ruda::gradient_entry> e;
    e.push_back({ruda::param_id{7}, ruda::dtype::f32(),
                 ruda::tensor_data::from_values(std::vector<float>{0.5F, -1.25F, 3.0F}, {3}).value()});
    e.push_back({ruda::param_id{9}, ruda::dtype::f16(),
                 ruda::tensor_data::from_values(std::vector<float>{1.0F, 2.0F, -0.0F, 65504.0F}, {2, 2})
                     .value()
                     .convert(ruda::dtype::f16())
                     .value()});
    e.push_back({ruda::param_id{11}, ruda::dtype::f64(), ruda::tensor_data{std::vector<std::uint8_t>{}, {0}, ruda::dtype::f64()}});
    ruda::quant_scheme q{};
    q.value = ruda::quant_value::q8s;
    q.store = ruda::quant_store::native();
    e.push_back({ruda::param_id{13}, ruda::dtype::qfloat(q),
                 ruda::tensor_data{std::vector<std::uint8_t>{1, 2, 3, 4, 0, 0, 128, 63}, {4},
                                   ruda::dtype::qfloat(q)}});
    return ruda::gradients_params_record{std::move(e)};
}

// The same record with names, as version 2 of gradient_entry holds them.
ruda::gradients_params_record golden_named()
{
    auto entries = golden().into_entries();
    entries[0].name = "fc1.weight";
    entries[3].name = "caf\xc3\xa9 \"q\"";
    return ruda::gradients_params_record{std::move(entries)};
}

template <class In>
ruda::gradients_params_record load_from(const std::string& name)
{
    const std::string bytes = file_text(name);
    BOOST_REQUIRE(!bytes.empty());
    ruda::gradients_params_record loaded;
    std::istringstream in{bytes};
    In ar{in};
    ar(cereal::make_nvp("record", loaded));
    return loaded;
}

template <class In, class Out>
void round_trip(const std::string& suffix)
{
    const std::string v2 = "golden-v2." + suffix;
    std::ostringstream out;
    {
        Out ar{out};
        ar(cereal::make_nvp("record", golden_named()));
    }
    BOOST_TEST((load_from<In>("golden." + suffix) == golden()), suffix << " version 1");
    BOOST_TEST((load_from<In>(v2) == golden_named()), suffix << " version 2");
    BOOST_TEST((out.str() == file_text(v2)), v2 << " is written again byte for byte");
}

} // namespace

BOOST_AUTO_TEST_SUITE(record_golden)

BOOST_AUTO_TEST_CASE(cereal_archives_of_both_versions_load_and_version_2_is_written_identically)
{
    round_trip<cereal::BinaryInputArchive, cereal::BinaryOutputArchive>("cereal-binary");
    round_trip<cereal::PortableBinaryInputArchive, cereal::PortableBinaryOutputArchive>(
        "cereal-portable");
    round_trip<cereal::JSONInputArchive, cereal::JSONOutputArchive>("cereal-json");
    round_trip<cereal::XMLInputArchive, cereal::XMLOutputArchive>("cereal-xml");
}

BOOST_AUTO_TEST_CASE(a_checkpoint_from_before_storage_loads_and_is_saved_again_identically)
{
    const auto path = data_dir / "golden.ruda";
    for (const auto mapping : {ruda::load_mapping::when_unchangeable, ruda::load_mapping::never}) {
        const auto loaded = ruda::load_checkpoint_file(path, {.mapping = mapping});
        BOOST_REQUIRE(loaded);
        BOOST_TEST((loaded.value().gradients() == golden()));
        std::uint64_t step = 0;
        BOOST_TEST(loaded.value().get("step", step).has_value());
        BOOST_TEST(step == 1234U);
    }
    ruda::checkpoint again{golden()};
    again.put("step", std::uint64_t{1234}).value();
    const auto dir = std::filesystem::temp_directory_path() / "ruda-golden-test";
    std::filesystem::create_directories(dir);
    BOOST_REQUIRE(ruda::save_checkpoint_file(dir / "again.ruda", again));
    std::ifstream in{dir / "again.ruda", std::ios::binary};
    const std::string written{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    std::filesystem::remove_all(dir);
    // Byte for byte but the preamble's producer version (bytes 16-21) and the preamble's own
    // checksum (56-63), which change with every release.
    auto expected = file_text("golden.ruda");
    BOOST_REQUIRE(written.size() == expected.size());
    std::string mine = written;
    for (auto* bytes : {&mine, &expected}) {
        std::fill(bytes->begin() + 16, bytes->begin() + 22, '\0');
        std::fill(bytes->begin() + 56, bytes->begin() + 64, '\0');
    }
    BOOST_TEST((mine == expected));
}

BOOST_AUTO_TEST_CASE(text_archives_are_checked_for_nesting_before_cereal_parses_them)
{
    // The golden record nests 6 levels in JSON (archive, record, entry, data, dtype, scheme)
    // and 7 in XML, where each value is an element of its own.
    const std::string json = file_text("golden.cereal-json");
    const std::string xml = file_text("golden.cereal-xml");
    BOOST_CHECK(ruda::check_json_nesting(json));
    BOOST_CHECK(ruda::check_xml_nesting(xml));
    BOOST_CHECK(ruda::check_json_nesting(json, 6));
    BOOST_TEST(ruda::check_json_nesting(json, 5).error() == ruda::errc::malformed_record);
    BOOST_CHECK(ruda::check_xml_nesting(xml, 7));
    BOOST_TEST(ruda::check_xml_nesting(xml, 6).error() == ruda::errc::malformed_record);

    // A million levels, which would overflow the parser's stack, are refused at level 257.
    const std::string deep_json(1000000, '[');
    const auto json_refused = ruda::check_json_nesting(deep_json);
    BOOST_TEST(json_refused.error() == ruda::errc::malformed_record);
    BOOST_TEST(json_refused.error().message() == "JSON nests deeper than 256 levels at byte 256");
    std::string deep_xml;
    for (int k = 0; k < 1000000; ++k) {
        deep_xml += "<a>";
    }
    const auto xml_refused = ruda::check_xml_nesting(deep_xml);
    BOOST_TEST(xml_refused.error() == ruda::errc::malformed_record);
    BOOST_TEST(xml_refused.error().message() == "XML nests deeper than 256 levels at byte 768");

    // Brackets in strings, closed levels, comments, CDATA, declarations, quoted '>' and empty
    // elements do not count.
    BOOST_CHECK(ruda::check_json_nesting(R"({"a": "[[[{{{\"[[", "b": [[1], [2]], "c": {}})", 3));
    BOOST_TEST(ruda::check_json_nesting(R"({"a": [[1]]})", 2).error() == ruda::errc::malformed_record);
    BOOST_CHECK(ruda::check_xml_nesting(
        R"(<?xml version="1.0"?><!DOCTYPE r><r a="<x>" b='>'><!-- <c><c> --><![CDATA[<d><d>]]><e/><f></f></r>)",
        2));
    BOOST_TEST(ruda::check_xml_nesting("<r><s><t/></s></r>", 1).error() == ruda::errc::malformed_record);
}

BOOST_AUTO_TEST_SUITE_END()
