// Quantization schemes: Burn's default, num_quants for every value and store, block dims.
#include <ruda/tensor/dtype.hpp>
#include <ruda/tensor/quant_scheme.hpp>

#include <boost/test/unit_test.hpp>

#include <vector>

using namespace ruda;

namespace {

const std::vector<quant_value> every_quant_value = {
    quant_value::q8f, quant_value::e5m2, quant_value::e4m3, quant_value::q4f, quant_value::e2m1,
    quant_value::q2f, quant_value::q8s,  quant_value::q4s,  quant_value::q2s};

std::size_t quants(quant_value v, quant_store s)
{
    quant_scheme q;
    q.value = v;
    q.store = s;
    return q.num_quants();
}

} // namespace

BOOST_AUTO_TEST_SUITE(tensor_quant_scheme)

BOOST_AUTO_TEST_CASE(default_is_burns)
{
    const ruda::quant_scheme q;
    BOOST_TEST((q.value == quant_value::q8f));
    BOOST_TEST((q.param == quant_param::f32));
    BOOST_TEST((q.store == quant_store::packed_u32(0)));
    BOOST_TEST((q.level == quant_level::tensor()));
    BOOST_TEST((q.mode == quant_mode::symmetric));
}

BOOST_AUTO_TEST_CASE(enum_order_is_the_serialized_index)
{
    for (std::size_t i = 0; i < every_quant_value.size(); ++i) {
        BOOST_TEST(static_cast<std::size_t>(every_quant_value[i]) == i);
    }
    BOOST_TEST(static_cast<int>(quant_param::ue4m3) == 4);
    BOOST_TEST(static_cast<int>(quant_store::kind::packed_u32) == 2);
    BOOST_TEST(static_cast<int>(quant_level::kind::block) == 1);
}

BOOST_AUTO_TEST_CASE(value_bits_packing_and_param_sizes)
{
    const std::vector<std::size_t> bits = {8, 8, 8, 4, 4, 2, 8, 4, 2};
    for (std::size_t i = 0; i < every_quant_value.size(); ++i) {
        BOOST_TEST(size_bits(every_quant_value[i]) == bits[i]);
        BOOST_TEST(native_packing(every_quant_value[i]) == (every_quant_value[i] == quant_value::e2m1 ? 2U : 1U));
    }
    BOOST_TEST(size_bytes(quant_param::f32) == 4U);
    BOOST_TEST(size_bytes(quant_param::f16) == 2U);
    BOOST_TEST(size_bytes(quant_param::bf16) == 2U);
    BOOST_TEST(size_bytes(quant_param::ue8m0) == 1U);
    BOOST_TEST(size_bytes(quant_param::ue4m3) == 1U);
}

BOOST_AUTO_TEST_CASE(num_quants_for_every_value_and_store)
{
    for (quant_value v : every_quant_value) {
        const std::size_t b = size_bits(v);
        BOOST_TEST(quants(v, quant_store::native()) == 1U, to_string(v));
        BOOST_TEST(quants(v, quant_store::packed_u32(0)) == (b == 8 ? 4U : b == 4 ? 8U : 16U),
                   to_string(v));
        BOOST_TEST(quants(v, quant_store::packed_native(1)) == (v == quant_value::e2m1 ? 2U : 1U),
                   to_string(v));
    }
    BOOST_TEST(quant_store::native().size_bits(quant_value::q4s) == 4U);
    BOOST_TEST(quant_store::packed_native(0).size_bits(quant_value::e2m1) == 8U);
    BOOST_TEST(quant_store::packed_u32(2).size_bits(quant_value::q2f) == 32U);
}

BOOST_AUTO_TEST_CASE(to_dim_vec_right_aligns_for_ranks_0_to_6_and_lengths_0_to_5)
{
    const std::vector<std::uint8_t> stored = {2, 3, 4, 5, 6};
    for (std::size_t len = 0; len <= 5; ++len) {
        const block_size b(std::span<const std::uint8_t>(stored.data(), len));
        BOOST_TEST(b.len() == len);
        for (std::size_t rank = 0; rank <= 6; ++rank) {
            const std::size_t n = std::min(rank, len);
            std::vector<std::size_t> expected(rank - n, 1);
            expected.insert(expected.end(), stored.begin(), stored.begin() + static_cast<long>(n));
            BOOST_TEST(b.to_dim_vec(rank) == expected, "len " << len << " rank " << rank);
        }
    }
    BOOST_TEST(block_size({2, 4, 8}).to_dim_vec(2) == (std::vector<std::size_t>{2, 4}));
    BOOST_TEST(block_size({4}).to_dim_vec(3) == (std::vector<std::size_t>{1, 1, 4}));
    BOOST_TEST(block_size({}).to_dim_vec(2) == (std::vector<std::size_t>{1, 1}));
}

BOOST_AUTO_TEST_CASE(block_size_keeps_five_dims_and_zeros)
{
    const block_size b({1, 2, 3, 4, 5, 6, 7});
    BOOST_TEST(b.len() == 5U);
    BOOST_TEST(b.valid());
    BOOST_TEST(block_size({0, 4}).as_slice()[0] == 0U);
    BOOST_TEST((block_size({7}).storage() == std::array<std::uint8_t, 5>{7, 1, 1, 1, 1}));

    const block_size corrupt = block_size::from_parts({2, 2, 2, 2, 2}, 9);
    BOOST_TEST(!corrupt.valid());
    BOOST_TEST(corrupt.as_slice().size() == 5U); // never reads past the storage
    BOOST_TEST(corrupt.to_dim_vec(6) == (std::vector<std::size_t>{1, 2, 2, 2, 2, 2}));
    BOOST_TEST(to_string(quant_level::block(corrupt)) == "block[2,2,2,2,2](len 9)");
}

BOOST_AUTO_TEST_CASE(schemes_compare_every_field)
{
    ruda::quant_scheme a;
    ruda::quant_scheme b;
    BOOST_TEST((a == b));
    b.store = quant_store::packed_u32(1);
    BOOST_TEST(!(a == b));
    b = a;
    b.level = quant_level::block({32});
    BOOST_TEST(!(a == b));
    ruda::quant_scheme c = b;
    c.level = quant_level::block({16});
    BOOST_TEST(!(b == c));
    BOOST_TEST((b < c || c < b));
    BOOST_TEST(!(quant_store::packed_native(0) == quant_store::packed_u32(0)));
}

// A dtype is 24 bytes, since every record entry holds two: the packing dimension is kept in
// 32 bits, and a larger one (no tensor has that rank) saturates, staying past any rank.
BOOST_AUTO_TEST_CASE(a_packing_dimension_past_32_bits_saturates)
{
    static_assert(sizeof(ruda::dtype) <= 24);
    BOOST_TEST(quant_store::packed_u32(std::size_t{1} << 40U).dim() == 0xFFFFFFFFU);
    BOOST_TEST(quant_store::packed_native(7).dim() == 7U);
}

BOOST_AUTO_TEST_SUITE_END()
