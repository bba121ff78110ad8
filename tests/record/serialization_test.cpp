// cereal round trips of records through binary, portable binary, JSON and XML, bit-exact:
// every float dtype, quantized schemes of every store and level, empty and rank-0 tensors, a
// record inside a user's own archive; bad input throws; precision settings on save.
#include <ruda/optim/record_serialization.hpp>

#include <cereal/archives/binary.hpp>
#include <cereal/archives/json.hpp>
#include <cereal/archives/portable_binary.hpp>
#include <cereal/archives/xml.hpp>
#include <cereal/types/string.hpp>
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <sstream>

namespace {

using ruda::quant_level;
using ruda::quant_param;
using ruda::quant_store;
using ruda::quant_value;

ruda::tensor_data sequence_bytes(std::size_t n, ruda::shape dims, ruda::dtype type)
{
    std::vector<std::uint8_t> bytes(n);
    for (std::size_t i = 0; i < n; ++i) {
        bytes[i] = static_cast<std::uint8_t>(i * 37 + 11);
    }
    return {std::move(bytes), std::move(dims), type};
}

ruda::gradients_params_record sample_record()
{
    std::vector<ruda::gradient_entry> entries;
    const auto floats = ruda::tensor_data::from_values(
                            std::vector<float>{1.0F, -0.0F, std::numeric_limits<float>::infinity(),
                                               std::nanf("0x7"), 1e-40F, 3.14159F},
                            {2, 3})
                            .value();
    std::uint64_t id = 1;
    for (const auto type : {ruda::dtype::f64(), ruda::dtype::f32(), ruda::dtype::f16(),
                            ruda::dtype::bf16()}) {
        entries.push_back({ruda::param_id{id++}, type, floats.convert(type).value()});
    }
    entries.push_back({ruda::param_id{id++}, ruda::dtype::flex32(), {floats.bytes(), {2, 3}, ruda::dtype::flex32()}});
    entries.push_back({ruda::param_id{id++}, ruda::dtype::f32(), ruda::tensor_data{{}, {0}, ruda::dtype::f32()}});
    entries.push_back({ruda::param_id{id++}, ruda::dtype::f32(), ruda::tensor_data{{}, {3, 0, 2}, ruda::dtype::f32()}});
    entries.push_back({ruda::param_id{id++}, ruda::dtype::f64(),
                       ruda::tensor_data::from_values(std::vector<double>{-2.5}, {}).value()});
    const quant_store stores[] = {quant_store::native(), quant_store::packed_u32(0),
                                  quant_store::packed_u32(1), quant_store::packed_native(0)};
    const quant_level levels[] = {quant_level::tensor(), quant_level::block(ruda::block_size{32}),
                                  quant_level::block(ruda::block_size{2, 4, 8})};
    const quant_param params[] = {quant_param::f32, quant_param::f16, quant_param::bf16,
                                  quant_param::ue8m0, quant_param::ue4m3};
    std::size_t k = 0;
    for (const auto& store : stores) {
        for (const auto& level : levels) {
            const auto value = store.get_kind() == quant_store::kind::packed_native
                                   ? quant_value::e2m1
                                   : static_cast<quant_value>(k % 9);
            const auto type = ruda::dtype::qfloat(
                {value, params[k % 5], store, level, ruda::quant_mode::symmetric});
            entries.push_back({ruda::param_id{id++}, type, sequence_bytes(13 + k, {4, 8}, type)});
            ++k;
        }
    }
    // A large id and a malformed entry survive too: serialization does not validate.
    entries.push_back({ruda::param_id{~std::uint64_t{0}}, ruda::dtype::f32(),
                       sequence_bytes(5, {7}, ruda::dtype::f16())});
    return ruda::gradients_params_record{std::move(entries)};
}

// Exact equality, NaN payloads included: compare the bytes, not the values.
void check_identical(const ruda::gradients_params_record& a, const ruda::gradients_params_record& b)
{
    BOOST_REQUIRE_EQUAL(a.entries().size(), b.entries().size());
    for (std::size_t i = 0; i < a.entries().size(); ++i) {
        const auto& x = a.entries()[i];
        const auto& y = b.entries()[i];
        BOOST_TEST_CONTEXT("entry " << i)
        {
            BOOST_TEST(x.id == y.id);
            BOOST_TEST(x.dtype == y.dtype);
            BOOST_TEST(x.data.dtype() == y.data.dtype());
            BOOST_TEST(x.data.shape() == y.data.shape());
            BOOST_TEST(x.data.bytes() == y.data.bytes());
        }
    }
}

template <class Out, class In>
void round_trip()
{
    const auto record = sample_record();
    std::stringstream stream;
    {
        Out out{stream};
        out(cereal::make_nvp("gradients", record));
    }
    ruda::gradients_params_record loaded;
    {
        In in{stream};
        in(cereal::make_nvp("gradients", loaded));
    }
    check_identical(record, loaded);
}

} // namespace

BOOST_AUTO_TEST_SUITE(record_cereal)

BOOST_AUTO_TEST_CASE(binary_round_trip)
{
    round_trip<cereal::BinaryOutputArchive, cereal::BinaryInputArchive>();
}

BOOST_AUTO_TEST_CASE(portable_binary_round_trip)
{
    round_trip<cereal::PortableBinaryOutputArchive, cereal::PortableBinaryInputArchive>();
}

BOOST_AUTO_TEST_CASE(json_round_trip)
{
    round_trip<cereal::JSONOutputArchive, cereal::JSONInputArchive>();
}

BOOST_AUTO_TEST_CASE(xml_round_trip)
{
    round_trip<cereal::XMLOutputArchive, cereal::XMLInputArchive>();
}

BOOST_AUTO_TEST_CASE(json_writes_bytes_as_base64)
{
    const ruda::gradients_params_record record{
        {{ruda::param_id{5}, ruda::dtype::f32(), ruda::tensor_data::from_values(std::vector<float>{1.0F}, {1}).value()}}};
    std::stringstream stream;
    {
        cereal::JSONOutputArchive out{stream};
        out(cereal::make_nvp("gradients", record));
    }
    // 1.0f is 00 00 80 3f: base64 "AACAPw==".
    BOOST_TEST(stream.str().find("\"AACAPw==\"") != std::string::npos);
    BOOST_TEST(stream.str().find("cereal_class_version") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_record_embeds_in_a_users_archive)
{
    const auto record = sample_record();
    const std::vector<double> weights{0.25, -1.5, 3.0};
    const std::uint64_t step = 1234;
    std::stringstream stream;
    {
        cereal::BinaryOutputArchive out{stream};
        out(weights, record, step, std::string{"adam"});
    }
    std::vector<double> weights_in;
    ruda::gradients_params_record record_in;
    std::uint64_t step_in = 0;
    std::string optimizer;
    {
        cereal::BinaryInputArchive in{stream};
        in(weights_in, record_in, step_in, optimizer);
    }
    BOOST_TEST(weights_in == weights);
    BOOST_TEST(step_in == step);
    BOOST_TEST(optimizer == "adam");
    check_identical(record, record_in);
}

BOOST_AUTO_TEST_CASE(truncated_and_corrupt_input_throws)
{
    std::stringstream stream;
    {
        cereal::BinaryOutputArchive out{stream};
        out(sample_record());
    }
    const std::string bytes = stream.str();
    {
        std::stringstream truncated{bytes.substr(0, bytes.size() / 2)};
        cereal::BinaryInputArchive in{truncated};
        ruda::gradients_params_record loaded;
        BOOST_CHECK_THROW(in(loaded), cereal::Exception);
    }
    {
        // The first entry's dtype kind sits after the record's version (4 bytes), the entry
        // count (8), the entry's version (4), its id (8) and the dtype's version (4).
        std::string corrupt = bytes;
        corrupt[4 + 8 + 4 + 8 + 4] = static_cast<char>(200);
        std::stringstream in_stream{corrupt};
        cereal::BinaryInputArchive in{in_stream};
        ruda::gradients_params_record loaded;
        BOOST_CHECK_THROW(in(loaded), cereal::Exception);
    }
}

BOOST_AUTO_TEST_CASE(precision_settings_convert_floats_and_keep_the_rest)
{
    const auto record = sample_record();
    const auto full = record.into_item<ruda::full_precision>();
    BOOST_REQUIRE(!full); // the malformed last entry cannot be converted
    BOOST_TEST(full.error().message().find("parameter 18446744073709551615") != std::string::npos);

    auto entries = record.entries();
    entries.pop_back();
    const ruda::gradients_params_record valid{entries};
    for (const auto target : {ruda::dtype::f32(), ruda::dtype::f16(), ruda::dtype::f64()}) {
        const auto item = target == ruda::dtype::f32()   ? valid.into_item<ruda::full_precision>()
                          : target == ruda::dtype::f16() ? valid.into_item<ruda::half_precision>()
                                                         : valid.into_item<ruda::double_precision>();
        BOOST_REQUIRE(item);
        for (std::size_t i = 0; i < entries.size(); ++i) {
            const auto& before = entries[i];
            const auto& after = item.value().entries()[i];
            BOOST_TEST(after.id == before.id);
            BOOST_TEST(after.dtype == before.dtype); // the original dtype is kept
            if (before.data.dtype().is_quantized()) {
                BOOST_TEST(after.data == before.data);
            } else {
                BOOST_TEST(after.data.dtype() == target);
                BOOST_TEST(after.data.shape() == before.data.shape());
            }
        }
    }
    // Double precision is lossless: converting back gives the original bytes.
    const auto wide = valid.into_item<ruda::double_precision>().value();
    for (std::size_t i = 0; i < entries.size(); ++i) {
        if (!entries[i].data.dtype().is_quantized() && entries[i].dtype != ruda::dtype::flex32()) {
            BOOST_TEST(wide.entries()[i].data.convert(entries[i].dtype).value().bytes() ==
                       entries[i].data.bytes());
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()
