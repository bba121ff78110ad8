// The safetensors header reader alone: what a header that checks out gives (ids from names,
// decimal names and metadata; original dtypes; sorted by id), and each refusal, with where the
// JSON went wrong.
#include "../support/error_text.hpp"

#include <ruda/checkpoint/detail/safetensors_header.hpp>
#include <ruda/optim/param_id.hpp>

#include <boost/test/unit_test.hpp>

#include <string>

namespace {

using ruda::test::says;
using ruda::errc;

ruda::result<std::vector<ruda::detail::safetensors_tensor_plan>> parse(const std::string& json,
                                                                       std::uint64_t data_size = 0)
{
    return ruda::detail::parse_safetensors_header(json, "h.safetensors", data_size);
}

} // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_safetensors_header)

BOOST_AUTO_TEST_CASE(gives_each_tensor_its_id_name_dtypes_and_range_sorted_by_id)
{
    const auto plans = parse(R"({"__metadata__":{"ruda.original_dtype.fc.bias":"flex32",)"
                             R"("ruda.id.renamed":"5"},)"
                             R"("fc.bias":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("17":{"dtype":"BF16","shape":[],"data_offsets":[8,10]},)"
                             R"("renamed":{"dtype":"F64","shape":[1,1],"data_offsets":[10,18]}})",
                             18);
    BOOST_REQUIRE(plans);
    const auto& p = plans.value();
    BOOST_REQUIRE_EQUAL(p.size(), 3U);
    BOOST_TEST(p[0].id == 5U); // from the metadata
    BOOST_TEST(p[0].parameter_name == "renamed");
    BOOST_TEST((p[0].dims == ruda::shape{1, 1}));
    BOOST_TEST(p[1].id == 17U); // a decimal name is the id, and no parameter name
    BOOST_TEST(p[1].parameter_name.empty());
    BOOST_TEST((p[1].stored == ruda::dtype::bf16()));
    const auto bias = ruda::param_id::from_name("fc.bias").val();
    const auto& fc = p[2].id == bias ? p[2] : p[0];
    BOOST_TEST(fc.id == bias);
    BOOST_TEST((fc.stored == ruda::dtype::f32()));
    BOOST_TEST((fc.original == ruda::dtype::flex32()));
    BOOST_TEST(fc.begin == 0U);
    BOOST_TEST(fc.end == 8U);
    BOOST_TEST(parse("{}").value().empty());
}

BOOST_AUTO_TEST_CASE(refuses_what_the_grammar_or_the_schema_does_not_allow)
{
    for (const std::string& bad : {
             std::string{"{"}, std::string{"[]"}, std::string{"{} {}"}, std::string{"{\"a\":1}"},
             std::string{R"({"a":{"dtype":"F32","shape":[1]}})"},
             std::string{R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})"},
             std::string{R"({"a":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})"},
             std::string{R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})"},
             std::string{R"({"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})"},
             std::string{R"({"a":{"dtype":"F32","shape":[01],"data_offsets":[0,4]}})"},
             std::string{R"({"a":{"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,4]}})"},
             std::string{R"({"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})"},
             std::string{R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},})"},
             std::string{R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4]}})"},
             std::string{R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})"},
             std::string{R"({"__metadata__":[],"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})"},
             std::string{R"({"__metadata__":{"k":1},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})"},
             std::string{R"({"__metadata__":{"ruda.original_dtype.a":"i32"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})"},
             std::string{R"({"__metadata__":{"ruda.original_dtype.b":"f64"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})"},
         }) {
        const auto result = parse(bad, 4);
        BOOST_TEST((!result && result.error() == errc::malformed_record), bad);
    }
    const auto nested = parse(std::string(100000, '[') + std::string(100000, ']'));
    BOOST_TEST(nested.error() == errc::malformed_record); // parsed iteratively: no stack overflow
    const auto trailing = parse("{} {}");
    BOOST_TEST(says(trailing.error(), "h.safetensors"), trailing.error().message());
    BOOST_TEST(says(trailing.error(), "the end of the header"), trailing.error().message());
    const auto twice = parse(R"({"7":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("__metadata__":{"ruda.id.x":"7"},)"
                             R"("x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                             8);
    BOOST_TEST(twice.error() == errc::duplicate_param_id, twice.error().message());
}

BOOST_AUTO_TEST_CASE(refuses_ranges_that_do_not_tile_the_data)
{
    const std::string two = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                            R"("b":{"dtype":"F32","shape":[1],"data_offsets":[%s]}})";
    const auto with = [&](const std::string& offsets) {
        std::string header = two;
        header.replace(header.find("%s"), 2, offsets);
        return header;
    };
    BOOST_TEST(parse(with("4,8"), 8).has_value());
    const auto gap = parse(with("5,9"), 9);
    BOOST_TEST(gap.error() == errc::malformed_record);
    BOOST_TEST(says(gap.error(), "gap or an overlap"));
    BOOST_TEST(parse(with("2,6"), 8).error() == errc::malformed_record);   // overlap
    BOOST_TEST(parse(with("4,8"), 12).error() == errc::malformed_record);  // trailing bytes
    BOOST_TEST(parse(with("4,8"), 6).error() == errc::malformed_record);   // past the end
}

BOOST_AUTO_TEST_SUITE_END()
