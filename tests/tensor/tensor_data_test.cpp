// tensor_data: unchecked and typed construction, checked element counts and typed views.
#include <ruda/tensor/tensor_data.hpp>

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <limits>

using ruda::errc;

BOOST_AUTO_TEST_SUITE(tensor_data)

BOOST_AUTO_TEST_CASE(unchecked_construction_keeps_everything)
{
    const ruda::tensor_data t({1, 2, 3}, {7, 9}, ruda::dtype::f64()); // 3 bytes cannot hold 63 f64
    BOOST_TEST(t.bytes().size() == 3U);
    BOOST_TEST(t.shape() == (ruda::shape{7, 9}));
    BOOST_TEST((t.dtype() == ruda::dtype::f64()));
    BOOST_TEST(t.rank() == 2U);
    BOOST_TEST(t.num_elements() == 63U);
}

BOOST_AUTO_TEST_CASE(from_values_stores_little_endian_bytes)
{
    auto t = ruda::tensor_data::from_values(std::vector<std::uint32_t>{0x04030201U, 0x08070605U}, {2});
    BOOST_TEST_REQUIRE(t.has_value());
    BOOST_TEST(t.value().bytes() == (std::vector<std::uint8_t>{1, 2, 3, 4, 5, 6, 7, 8}));
    BOOST_TEST((t.value().dtype() == ruda::dtype::u32()));

    auto h = ruda::tensor_data::from_values(std::vector<ruda::bfloat16>{{0x3F80}}, {});
    BOOST_TEST_REQUIRE(h.has_value());
    BOOST_TEST((h.value().dtype() == ruda::dtype::bf16()));
    BOOST_TEST(h.value().num_elements() == 1U); // rank 0 holds one element
}

BOOST_AUTO_TEST_CASE(from_values_rejects_a_count_that_does_not_fill_the_shape)
{
    auto t = ruda::tensor_data::from_values(std::vector<float>{1, 2, 3}, {2, 2});
    BOOST_TEST_REQUIRE(t.has_error());
    BOOST_TEST(t.error() == errc::byte_count_mismatch);
    BOOST_TEST(t.error().message() == "3 values do not fill shape [2, 2] of 4 elements");

    const std::size_t big = std::numeric_limits<std::size_t>::max() / 2;
    auto o = ruda::tensor_data::from_values(std::vector<float>{}, {big, 3});
    BOOST_TEST(o.error() == errc::shape_overflow);
}

BOOST_AUTO_TEST_CASE(element_counts_are_checked_or_wrap_like_burn)
{
    const std::size_t half = std::size_t{1} << 32;
    const ruda::tensor_data t({}, {half, half, 2}, ruda::dtype::f32());
    BOOST_TEST(t.num_elements() == 0U); // 2^65 wraps to 0, as Burn's unchecked product
    auto checked = t.checked_num_elements();
    BOOST_TEST_REQUIRE(checked.has_error());
    BOOST_TEST(checked.error() == errc::shape_overflow);
    BOOST_TEST(checked.error().message().find("[4294967296, 4294967296, 2]") != std::string::npos);

    // Like the reference's checked fold, the product fails at the first overflow even when a
    // later dimension is zero; a zero before the huge dims is fine.
    BOOST_TEST(ruda::tensor_data({}, {half, half, 0, half}, ruda::dtype::f32()).checked_num_elements().error() ==
               errc::shape_overflow);
    BOOST_TEST(ruda::tensor_data({}, {0, half, half, half}, ruda::dtype::f32()).checked_num_elements().value() ==
               0U);
    BOOST_TEST(ruda::tensor_data({}, {}, ruda::dtype::f32()).checked_num_elements().value() == 1U);
    BOOST_TEST(ruda::checked_num_elements(std::vector<std::size_t>{3, 5}).value() == 15U);
}

BOOST_AUTO_TEST_CASE(values_gives_a_typed_view)
{
    auto t = ruda::tensor_data::from_values(std::vector<double>{1.5, -2.0, 3.25}, {3}).value();
    auto v = t.values<double>();
    BOOST_TEST_REQUIRE(v.has_value());
    BOOST_TEST(v.value().size() == 3U);
    BOOST_TEST(v.value()[2] == 3.25);

    const ruda::tensor_data flex({0, 0, 128, 63}, {1}, ruda::dtype::flex32());
    BOOST_TEST(flex.values<float>().value()[0] == 1.0f); // Flex32 is stored as f32
}

BOOST_AUTO_TEST_CASE(values_rejects_another_dtype_or_a_bad_length)
{
    auto t = ruda::tensor_data::from_values(std::vector<float>{1, 2}, {2}).value();
    auto wrong = t.values<std::int32_t>();
    BOOST_TEST_REQUIRE(wrong.has_error());
    BOOST_TEST(wrong.error() == errc::invalid_dtype);
    BOOST_TEST(wrong.error().message() == "Data of dtype f32 cannot be read as i32");

    const ruda::tensor_data short_bytes({0, 0, 128, 63, 0}, {2}, ruda::dtype::f32());
    BOOST_TEST(short_bytes.values<float>().error() == errc::byte_count_mismatch);
    const ruda::tensor_data long_bytes(std::vector<std::uint8_t>(12), {2}, ruda::dtype::f32());
    BOOST_TEST(long_bytes.values<float>().error() == errc::byte_count_mismatch);
    const ruda::tensor_data q(std::vector<std::uint8_t>(8), {2}, ruda::dtype::qfloat({}));
    BOOST_TEST(q.values<std::uint8_t>().error() == errc::invalid_dtype);
    const ruda::tensor_data overflow({}, {std::numeric_limits<std::size_t>::max(), 2}, ruda::dtype::f32());
    BOOST_TEST(overflow.values<float>().error() == errc::shape_overflow);
    // (max/4 + 2) * 4 wraps to 4: the 4 bytes present must not pass for that many floats.
    const ruda::tensor_data wraps(std::vector<std::uint8_t>(4), {std::numeric_limits<std::size_t>::max() / 4 + 2},
                            ruda::dtype::f32());
    BOOST_TEST(wraps.values<float>().error() == errc::byte_count_mismatch);
}

BOOST_AUTO_TEST_CASE(equality_and_moving_bytes_out)
{
    auto a = ruda::tensor_data::from_values(std::vector<std::int16_t>{1, -1}, {2}).value();
    auto b = a;
    BOOST_TEST((a == b));
    BOOST_TEST(!(a == ruda::tensor_data(a.bytes(), {1, 2}, ruda::dtype::i16())));
    BOOST_TEST(!(a == ruda::tensor_data(a.bytes(), {2}, ruda::dtype::u16())));
    auto bytes = std::move(b).into_bytes();
    BOOST_TEST(bytes == (std::vector<std::uint8_t>{1, 0, 0xFF, 0xFF}));
}

// Copies share the bytes; a conversion in place (equal element sizes) writes only bytes that no
// other tensor_data shares, and copies otherwise.
BOOST_AUTO_TEST_CASE(copies_share_bytes_and_an_in_place_conversion_never_touches_a_sharer)
{
    const auto original = ruda::tensor_data::from_values(std::vector<std::int16_t>{1, -1}, {2}).value();
    auto copy = original;
    BOOST_TEST(copy.bytes().shares_memory_with(original.bytes()));
    const auto converted = std::move(copy).convert(ruda::dtype::f16()).value();
    BOOST_TEST(!converted.bytes().shares_memory_with(original.bytes()));
    BOOST_TEST(original.values<std::int16_t>().value()[1] == -1);

    auto alone = ruda::tensor_data::from_values(std::vector<std::int16_t>{1, -1}, {2}).value();
    const auto* memory = alone.bytes().data();
    const auto in_place = std::move(alone).convert(ruda::dtype::f16()).value();
    BOOST_TEST(in_place.bytes().data() == memory);
    BOOST_TEST((in_place == converted));
    BOOST_TEST(ruda::to_f32(in_place.values<ruda::float16>().value()[1]) == -1.0F);
}

BOOST_AUTO_TEST_SUITE_END()
