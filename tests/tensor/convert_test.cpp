// tensor_data::convert: every Burn rule (identity, element casts, Flex32 labelled F32, bools)
// and every error where Burn panics.
#include <ruda/tensor/tensor_data.hpp>

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>

using ruda::errc;

namespace {

template <class T>
ruda::tensor_data make(std::vector<T> v)
{
    const std::size_t n = v.size();
    return ruda::tensor_data::from_values(v, {n}).value();
}

template <class T>
std::vector<T> as(const ruda::result<ruda::tensor_data>& r)
{
    BOOST_TEST_REQUIRE(r.has_value(), (r.has_error() ? r.error().message() : ""));
    auto v = r.value().values<T>();
    BOOST_TEST_REQUIRE(v.has_value(), (v.has_error() ? v.error().message() : ""));
    return {v.value().begin(), v.value().end()};
}

std::vector<std::uint8_t> bytes_of(const ruda::result<ruda::tensor_data>& r)
{
    BOOST_TEST_REQUIRE(r.has_value(), (r.has_error() ? r.error().message() : ""));
    return r.value().bytes().to_vector();
}

ruda::error error_of(const ruda::result<ruda::tensor_data>& r)
{
    BOOST_TEST_REQUIRE(r.has_error());
    return r.error();
}

const float nan_f = std::numeric_limits<float>::quiet_NaN();
const float inf_f = std::numeric_limits<float>::infinity();

} // namespace

BOOST_AUTO_TEST_SUITE(tensor_convert)

BOOST_AUTO_TEST_CASE(same_dtype_is_returned_unchanged_without_validation)
{
    // Bytes that match no shape, and a QFloat tensor: identity never looks at them.
    const ruda::tensor_data odd({1, 2, 3}, {5}, ruda::dtype::f32());
    BOOST_TEST((odd.convert(ruda::dtype::f32()).value() == odd));
    const ruda::tensor_data q({9, 9}, {3, 3}, ruda::dtype::qfloat({}));
    BOOST_TEST((q.convert(ruda::dtype::qfloat({})).value() == q));
    ruda::tensor_data moved = odd;
    BOOST_TEST((std::move(moved).convert(ruda::dtype::f32()).value() == odd));
    const ruda::tensor_data flex({0, 0, 128, 63}, {1}, ruda::dtype::flex32());
    BOOST_TEST((flex.convert(ruda::dtype::flex32()).value().dtype() == ruda::dtype::flex32()));
}

BOOST_AUTO_TEST_CASE(quantized_data_never_converts)
{
    const ruda::tensor_data q(std::vector<std::uint8_t>(8), {4}, ruda::dtype::qfloat({}));
    const auto e = error_of(q.convert(ruda::dtype::f32()));
    BOOST_TEST(e == errc::invalid_dtype);
    BOOST_TEST(e.message() == "Quantized data cannot be converted: qfloat(q8f, param f32, store "
                              "packed_u32(0), level tensor, symmetric) to f32");
    BOOST_TEST(error_of(make<float>({1, 2}).convert(ruda::dtype::qfloat({}))) == errc::invalid_dtype);
    ruda::quant_scheme other;
    other.value = ruda::quant_value::q4s;
    BOOST_TEST(error_of(q.convert(ruda::dtype::qfloat(other))) == errc::invalid_dtype);
}

BOOST_AUTO_TEST_CASE(floats_round_to_nearest_even)
{
    const auto f32 = make<float>({1.0f, 1.0f + std::ldexp(1.0f, -11), 65520.0f, -0.0f, 0.1f});
    const auto h = as<ruda::float16>(f32.convert(ruda::dtype::f16()));
    BOOST_TEST(h[0].bits == 0x3C00);
    BOOST_TEST(h[1].bits == 0x3C00); // a tie goes to the even neighbour
    BOOST_TEST(h[2].bits == 0x7C00); // overflow to infinity
    BOOST_TEST(h[3].bits == 0x8000);
    BOOST_TEST(h[4].bits == 0x2E66);
    const auto b = as<ruda::bfloat16>(f32.convert(ruda::dtype::bf16()));
    BOOST_TEST(b[4].bits == 0x3DCD);
    const auto d = as<double>(f32.convert(ruda::dtype::f64()));
    BOOST_TEST(d[4] == static_cast<double>(0.1f)); // widening is exact
    const auto back = as<float>(make<double>({0.1, 1e300, -1e-300}).convert(ruda::dtype::f32()));
    BOOST_TEST(back[0] == 0.1f);
    BOOST_TEST(back[1] == inf_f);
    BOOST_TEST(std::signbit(back[2]));
    BOOST_TEST(back[2] == 0.0f);
}

BOOST_AUTO_TEST_CASE(f64_to_half_rounds_twice_through_f32)
{
    const double x = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
    BOOST_TEST(as<ruda::float16>(make<double>({x}).convert(ruda::dtype::f16()))[0].bits == 0x3C00);
    const double y = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);
    BOOST_TEST(as<ruda::bfloat16>(make<double>({y}).convert(ruda::dtype::bf16()))[0].bits == 0x3F80);
}

BOOST_AUTO_TEST_CASE(nan_is_kept_and_quieted)
{
    const auto h = as<ruda::float16>(
        make<float>({std::bit_cast<float>(0xFFA00000U), nan_f}).convert(ruda::dtype::f16()));
    BOOST_TEST(h[0].bits == 0xFF00);
    BOOST_TEST(h[1].bits == 0x7E00);
    const auto f = as<float>(ruda::tensor_data({0x01, 0x7C}, {1}, ruda::dtype::f16()).convert(ruda::dtype::f32()));
    BOOST_TEST(std::bit_cast<std::uint32_t>(f[0]) == 0x7FC02000U);
    const auto d = as<double>(ruda::tensor_data({0x81, 0x7F}, {1}, ruda::dtype::bf16()).convert(ruda::dtype::f64()));
    BOOST_TEST(std::isnan(d[0]));
}

BOOST_AUTO_TEST_CASE(half_to_half_goes_through_f32)
{
    // 1 + 2^-10 is exact in f16; in bf16 it is a tie below 1 + 2^-7 and rounds to 1.
    const auto b = as<ruda::bfloat16>(ruda::tensor_data({0x01, 0x3C}, {1}, ruda::dtype::f16()).convert(ruda::dtype::bf16()));
    BOOST_TEST(b[0].bits == 0x3F80);
    const auto h = as<ruda::float16>(ruda::tensor_data({0x80, 0x47}, {1}, ruda::dtype::bf16()).convert(ruda::dtype::f16()));
    BOOST_TEST(h[0].bits == 0x7C00); // 65536 overflows f16
}

BOOST_AUTO_TEST_CASE(flex32_target_is_labelled_f32)
{
    const auto f32 = make<float>({1.5f, -2.0f});
    const auto r = f32.convert(ruda::dtype::flex32());
    BOOST_TEST_REQUIRE(r.has_value());
    BOOST_TEST((r.value().dtype() == ruda::dtype::f32()));
    BOOST_TEST(r.value().bytes() == f32.bytes());
    const auto from_f64 = make<double>({0.5}).convert(ruda::dtype::flex32());
    BOOST_TEST((from_f64.value().dtype() == ruda::dtype::f32()));

    const ruda::tensor_data flex(f32.bytes(), {2}, ruda::dtype::flex32());
    const auto h = as<ruda::float16>(flex.convert(ruda::dtype::f16()));
    BOOST_TEST(h[0].bits == 0x3E00);
    BOOST_TEST((flex.convert(ruda::dtype::f32()).value().dtype() == ruda::dtype::f32()));
}

BOOST_AUTO_TEST_CASE(float_to_int_truncates_within_range)
{
    BOOST_TEST(as<std::int32_t>(make<float>({2.9f, -2.9f, -0.5f}).convert(ruda::dtype::i32())) ==
               (std::vector<std::int32_t>{2, -2, 0}));
    BOOST_TEST(as<std::uint8_t>(make<float>({255.9f, -0.9f}).convert(ruda::dtype::u8())) ==
               (std::vector<std::uint8_t>{255, 0}));
    BOOST_TEST(as<std::int64_t>(make<double>({-9223372036854775808.0}).convert(ruda::dtype::i64()))[0] ==
               std::numeric_limits<std::int64_t>::min());
    BOOST_TEST(as<std::uint64_t>(make<double>({18446744073709549568.0}).convert(ruda::dtype::u64()))[0] ==
               18446744073709549568ULL);
    BOOST_TEST(as<std::int8_t>(ruda::tensor_data({0x00, 0xD7}, {1}, ruda::dtype::f16()).convert(ruda::dtype::i8()))[0] ==
               -112);
}

BOOST_AUTO_TEST_CASE(float_to_int_fails_on_nan_infinity_and_out_of_range)
{
    const auto e = error_of(make<float>({1.0f, nan_f}).convert(ruda::dtype::i32()));
    BOOST_TEST(e == errc::invalid_dtype);
    BOOST_TEST(e.message() == "Cannot convert element 1 (nan) from f32 to i32: value is NaN, "
                              "infinite or out of range");
    BOOST_TEST(error_of(make<float>({inf_f}).convert(ruda::dtype::i64())) == errc::invalid_dtype);
    BOOST_TEST(error_of(make<float>({256.0f}).convert(ruda::dtype::u8())) == errc::invalid_dtype);
    BOOST_TEST(error_of(make<float>({-1.0f}).convert(ruda::dtype::u32())) == errc::invalid_dtype);
    BOOST_TEST(error_of(make<float>({-129.0f}).convert(ruda::dtype::i8())) == errc::invalid_dtype);
    BOOST_TEST(error_of(make<double>({9223372036854775808.0}).convert(ruda::dtype::i64())) ==
               errc::invalid_dtype);
    BOOST_TEST(error_of(make<double>({18446744073709551616.0}).convert(ruda::dtype::u64())) ==
               errc::invalid_dtype);
    BOOST_TEST(error_of(make<double>({2147483648.0}).convert(ruda::dtype::i32())) == errc::invalid_dtype);
}

BOOST_AUTO_TEST_CASE(int_to_int_is_exact_or_fails)
{
    BOOST_TEST(as<std::int8_t>(make<std::int64_t>({-128, 127}).convert(ruda::dtype::i8())) ==
               (std::vector<std::int8_t>{-128, 127}));
    BOOST_TEST(as<std::uint16_t>(make<std::int32_t>({65535}).convert(ruda::dtype::u16()))[0] == 65535);
    BOOST_TEST(error_of(make<std::int32_t>({-1}).convert(ruda::dtype::u32())) == errc::invalid_dtype);
    BOOST_TEST(error_of(make<std::uint64_t>({1ULL << 63}).convert(ruda::dtype::i64())) ==
               errc::invalid_dtype);
    const auto e = error_of(make<std::int16_t>({1, 2, 300}).convert(ruda::dtype::u8()));
    BOOST_TEST(e.message().find("element 2 (300) from i16 to u8") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(int_to_float_rounds_to_nearest)
{
    const std::int64_t big = (std::int64_t{1} << 53) + 1;
    BOOST_TEST(as<double>(make<std::int64_t>({big}).convert(ruda::dtype::f64()))[0] ==
               static_cast<double>(big));
    BOOST_TEST(as<float>(make<std::uint64_t>({~0ULL}).convert(ruda::dtype::f32()))[0] == 18446744073709551616.0f);
    // 2049 -> f32 exactly -> f16 tie between 2048 and 2050 -> even 2048.
    BOOST_TEST(as<ruda::float16>(make<std::int32_t>({2049, 70000}).convert(ruda::dtype::f16()))[0].bits ==
               0x6800);
    BOOST_TEST(as<ruda::float16>(make<std::int32_t>({70000}).convert(ruda::dtype::f16()))[0].bits == 0x7C00);
    BOOST_TEST(as<ruda::bfloat16>(make<std::uint8_t>({255}).convert(ruda::dtype::bf16()))[0].bits == 0x437F);
    // 257 is a tie between the bf16 neighbours 256 and 258: even gives 256.
    BOOST_TEST(as<ruda::bfloat16>(make<std::uint16_t>({257}).convert(ruda::dtype::bf16()))[0].bits == 0x4380);
}

BOOST_AUTO_TEST_CASE(bool_targets_store_non_zero_as_one)
{
    const auto f = make<float>({0.0f, -0.0f, 2.5f, nan_f, -inf_f});
    BOOST_TEST(bytes_of(f.convert(ruda::dtype::boolean(ruda::bool_store::native))) ==
               (std::vector<std::uint8_t>{0, 0, 1, 1, 1}));
    const auto r = f.convert(ruda::dtype::boolean(ruda::bool_store::u32));
    BOOST_TEST((r.value().dtype() == ruda::dtype::boolean(ruda::bool_store::u32)));
    BOOST_TEST(bytes_of(r) == (std::vector<std::uint8_t>{0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0,
                                                         0, 0, 1, 0, 0, 0}));
    BOOST_TEST(bytes_of(make<std::uint8_t>({0, 7, 255}).convert(ruda::dtype::boolean(ruda::bool_store::u8))) ==
               (std::vector<std::uint8_t>{0, 1, 1}));
}

BOOST_AUTO_TEST_CASE(bool_sources_read_non_zero_as_one)
{
    const ruda::tensor_data b({0, 1, 9}, {3}, ruda::dtype::boolean(ruda::bool_store::native));
    BOOST_TEST(as<float>(b.convert(ruda::dtype::f32())) == (std::vector<float>{0, 1, 1}));
    BOOST_TEST(as<std::int64_t>(b.convert(ruda::dtype::i64())) == (std::vector<std::int64_t>{0, 1, 1}));
    const ruda::tensor_data w({0, 0, 0, 0, 0, 1, 0, 0}, {2}, ruda::dtype::boolean(ruda::bool_store::u32));
    BOOST_TEST(as<std::uint8_t>(w.convert(ruda::dtype::u8())) == (std::vector<std::uint8_t>{0, 1}));
    BOOST_TEST(bytes_of(w.convert(ruda::dtype::boolean(ruda::bool_store::native))) ==
               (std::vector<std::uint8_t>{0, 1}));
}

BOOST_AUTO_TEST_CASE(equal_sizes_convert_in_place_for_rvalues)
{
    auto t = make<std::int32_t>({1, -2, 16777217});
    const auto* before = t.bytes().data();
    auto r = std::move(t).convert(ruda::dtype::f32());
    BOOST_TEST_REQUIRE(r.has_value());
    BOOST_TEST(r.value().bytes().data() == before); // the buffer was reused
    BOOST_TEST(as<float>(r) == (std::vector<float>{1.0f, -2.0f, 16777216.0f}));
}

BOOST_AUTO_TEST_CASE(a_failing_rvalue_conversion_leaves_the_source_intact)
{
    auto t = make<float>({1.0f, nan_f});
    const auto copy = t;
    BOOST_TEST(error_of(std::move(t).convert(ruda::dtype::i32())) == errc::invalid_dtype);
    BOOST_TEST((t == copy)); // NOLINT(bugprone-use-after-move): documented to be untouched
}

BOOST_AUTO_TEST_CASE(bytes_must_hold_the_shape)
{
    const ruda::tensor_data short_bytes(std::vector<std::uint8_t>(7), {2}, ruda::dtype::f32());
    const auto e = error_of(short_bytes.convert(ruda::dtype::f16()));
    BOOST_TEST(e == errc::invalid_dtype);
    BOOST_TEST(e.message() == "Cannot convert f32 data of shape [2] to f16: 7 bytes do not hold "
                              "its element count times 4");
    // Equal sizes too: Burn panics on a length that is not a multiple of the element size.
    BOOST_TEST(error_of(short_bytes.convert(ruda::dtype::i32())) == errc::invalid_dtype);
    const ruda::tensor_data long_bytes(std::vector<std::uint8_t>(12), {2}, ruda::dtype::f32());
    BOOST_TEST(error_of(long_bytes.convert(ruda::dtype::f64())) == errc::invalid_dtype);
    BOOST_TEST(error_of(ruda::tensor_data({}, {3}, ruda::dtype::u8()).convert(ruda::dtype::f32())) == errc::invalid_dtype);
}

BOOST_AUTO_TEST_CASE(overflowing_shapes_are_rejected)
{
    const std::size_t max = std::numeric_limits<std::size_t>::max();
    const ruda::tensor_data t({}, {max, 2}, ruda::dtype::f32());
    BOOST_TEST(error_of(t.convert(ruda::dtype::f16())) == errc::shape_overflow);
    // The element count fits but its byte count wraps to exactly the 4 bytes present.
    const ruda::tensor_data wraps(std::vector<std::uint8_t>(4), {max / 4 + 2}, ruda::dtype::f32());
    BOOST_TEST(error_of(wraps.convert(ruda::dtype::f64())) == errc::invalid_dtype);
}

BOOST_AUTO_TEST_CASE(empty_and_rank_zero_tensors)
{
    const ruda::tensor_data empty({}, {0, 4}, ruda::dtype::f32());
    const auto r = empty.convert(ruda::dtype::bf16());
    BOOST_TEST(r.value().bytes().empty());
    BOOST_TEST(r.value().shape() == (ruda::shape{0, 4}));
    const auto scalar = ruda::tensor_data::from_values(std::vector<double>{-3.0}, {}).value();
    BOOST_TEST(as<std::int16_t>(scalar.convert(ruda::dtype::i16())) == (std::vector<std::int16_t>{-3}));
}

BOOST_AUTO_TEST_SUITE_END()
