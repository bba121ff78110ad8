// dtype: Burn's variant order, sizes (QFloat storage sizes included), float-ness and names.
#include <ruda/tensor/dtype.hpp>

#include <boost/test/unit_test.hpp>

#include <vector>

using ruda::quant_scheme;
using ruda::quant_store;
using ruda::quant_value;

namespace {

quant_scheme scheme(quant_value v, quant_store s)
{
    quant_scheme q;
    q.value = v;
    q.store = s;
    return q;
}

const std::vector<quant_value> all_values = {
    quant_value::q8f, quant_value::e5m2, quant_value::e4m3, quant_value::q4f, quant_value::e2m1,
    quant_value::q2f, quant_value::q8s,  quant_value::q4s,  quant_value::q2s};

} // namespace

BOOST_AUTO_TEST_SUITE(tensor_dtype)

BOOST_AUTO_TEST_CASE(kinds_follow_burns_variant_order)
{
    const std::vector<ruda::dtype> in_order = {
        ruda::dtype::f64(), ruda::dtype::f32(), ruda::dtype::flex32(), ruda::dtype::f16(), ruda::dtype::bf16(),
        ruda::dtype::i64(), ruda::dtype::i32(), ruda::dtype::i16(),    ruda::dtype::i8(),  ruda::dtype::u64(),
        ruda::dtype::u32(), ruda::dtype::u16(), ruda::dtype::u8(),     ruda::dtype::boolean(ruda::bool_store::native),
        ruda::dtype::qfloat(quant_scheme{})};
    for (std::size_t i = 0; i < in_order.size(); ++i) {
        BOOST_TEST(static_cast<std::size_t>(in_order[i].get_kind()) == i);
    }
}

BOOST_AUTO_TEST_CASE(sizes_and_float_ness_of_plain_dtypes)
{
    struct row {
        ruda::dtype d;
        std::size_t size;
        bool is_float;
    };
    const std::vector<row> rows = {
        {ruda::dtype::f64(), 8, true},  {ruda::dtype::f32(), 4, true},  {ruda::dtype::flex32(), 4, true},
        {ruda::dtype::f16(), 2, true},  {ruda::dtype::bf16(), 2, true}, {ruda::dtype::i64(), 8, false},
        {ruda::dtype::i32(), 4, false}, {ruda::dtype::i16(), 2, false}, {ruda::dtype::i8(), 1, false},
        {ruda::dtype::u64(), 8, false}, {ruda::dtype::u32(), 4, false}, {ruda::dtype::u16(), 2, false},
        {ruda::dtype::u8(), 1, false},
        {ruda::dtype::boolean(ruda::bool_store::native), 1, false},
        {ruda::dtype::boolean(ruda::bool_store::u8), 1, false},
        {ruda::dtype::boolean(ruda::bool_store::u32), 4, false},
    };
    for (const auto& r : rows) {
        BOOST_TEST(r.d.size() == r.size, to_string(r.d));
        BOOST_TEST(r.d.is_float() == r.is_float, to_string(r.d));
        BOOST_TEST(!r.d.is_quantized(), to_string(r.d));
    }
    BOOST_TEST(ruda::dtype::i8().is_int());
    BOOST_TEST(!ruda::dtype::u8().is_int());
    BOOST_TEST(ruda::dtype::u8().is_uint());
    BOOST_TEST(ruda::dtype::boolean().is_bool());
}

BOOST_AUTO_TEST_CASE(qfloat_size_is_the_storage_element_size)
{
    for (quant_value v : all_values) {
        const bool eight_bit = v == quant_value::q8f || v == quant_value::q8s ||
                               v == quant_value::e4m3 || v == quant_value::e5m2;
        const bool e2m1 = v == quant_value::e2m1;
        const ruda::dtype native = ruda::dtype::qfloat(scheme(v, quant_store::native()));
        BOOST_TEST(native.size() == (eight_bit || e2m1 ? 1U : 0U), to_string(native));
        for (std::size_t dim : {0U, 1U, 3U}) {
            const ruda::dtype packed = ruda::dtype::qfloat(scheme(v, quant_store::packed_u32(dim)));
            BOOST_TEST(packed.size() == 4U, to_string(packed));
            const ruda::dtype packed_native = ruda::dtype::qfloat(scheme(v, quant_store::packed_native(dim)));
            BOOST_TEST(packed_native.size() == (e2m1 ? 1U : 0U), to_string(packed_native));
        }
        BOOST_TEST(!native.is_float());
        BOOST_TEST(native.is_quantized());
    }
}

BOOST_AUTO_TEST_CASE(equality_compares_bool_store_and_scheme)
{
    BOOST_TEST((ruda::dtype::f32() == ruda::dtype::f32()));
    BOOST_TEST(!(ruda::dtype::f32() == ruda::dtype::flex32()));
    BOOST_TEST(!(ruda::dtype::boolean(ruda::bool_store::u8) == ruda::dtype::boolean(ruda::bool_store::u32)));
    BOOST_TEST((ruda::dtype::boolean(ruda::bool_store::u8) == ruda::dtype::boolean(ruda::bool_store::u8)));
    quant_scheme a;
    quant_scheme b;
    b.param = ruda::quant_param::f16;
    BOOST_TEST((ruda::dtype::qfloat(a) == ruda::dtype::qfloat(a)));
    BOOST_TEST(!(ruda::dtype::qfloat(a) == ruda::dtype::qfloat(b)));
    BOOST_TEST(ruda::dtype::qfloat(a).scheme() != nullptr);
    BOOST_TEST(ruda::dtype::f32().scheme() == nullptr);
}

BOOST_AUTO_TEST_CASE(names_are_readable)
{
    BOOST_TEST(to_string(ruda::dtype::f64()) == "f64");
    BOOST_TEST(to_string(ruda::dtype::flex32()) == "flex32");
    BOOST_TEST(to_string(ruda::dtype::bf16()) == "bf16");
    BOOST_TEST(to_string(ruda::dtype::u16()) == "u16");
    BOOST_TEST(to_string(ruda::dtype::boolean(ruda::bool_store::u32)) == "bool(u32)");
    quant_scheme q;
    q.value = quant_value::q4s;
    q.store = quant_store::packed_u32(1);
    q.level = ruda::quant_level::block({2, 16});
    BOOST_TEST(to_string(ruda::dtype::qfloat(q)) ==
               "qfloat(q4s, param f32, store packed_u32(1), level block[2,16], symmetric)");
}

BOOST_AUTO_TEST_CASE(from_kind_builds_plain_dtypes_only)
{
    BOOST_TEST((ruda::dtype::from_kind(ruda::dtype::kind::bf16) == ruda::dtype::bf16()));
    BOOST_TEST((ruda::dtype::from_kind(ruda::dtype::kind::boolean) == ruda::dtype::boolean()));
    BOOST_TEST(!ruda::dtype::from_kind(ruda::dtype::kind::qfloat).has_value());
    BOOST_TEST(!ruda::dtype::from_kind(static_cast<ruda::dtype::kind>(200)).has_value());
}

BOOST_AUTO_TEST_SUITE_END()
