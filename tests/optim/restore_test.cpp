// from_record: every rejection of the reference, each with its own code and message, before
// any upload (a backend that counts uploads proves it); then exact restores of every float
// dtype and of quantized data, back to the original dtype.
#include <ruda/backend/cpu_backend.hpp>
#include <ruda/optim/gradients_params.hpp>

#include <boost/test/unit_test.hpp>

#include <limits>
#include <string>

namespace {

using ruda::errc;
using cpu = ruda::cpu_backend;

// The host backend, counting every upload.
struct counting_backend {
    using device = cpu::device;
    using float_tensor = cpu::float_tensor;
    using quantized_tensor = cpu::quantized_tensor;
    static inline int uploads = 0;

    static boost::asio::awaitable<ruda::result<ruda::tensor_data>> float_into_data(float_tensor t)
    {
        return cpu::float_into_data(std::move(t));
    }
    static boost::asio::awaitable<ruda::result<ruda::tensor_data>> q_into_data(quantized_tensor t)
    {
        return cpu::q_into_data(std::move(t));
    }
    static ruda::result<float_tensor> float_from_data(ruda::tensor_data data, const device& d)
    {
        ++uploads;
        return cpu::float_from_data(std::move(data), d);
    }
    static ruda::result<quantized_tensor> q_from_data(ruda::tensor_data data, const device& d)
    {
        ++uploads;
        return cpu::q_from_data(std::move(data), d);
    }
    static ruda::result<float_tensor> float_cast(const float_tensor& t, ruda::dtype target)
    {
        return cpu::float_cast(t, target);
    }
    static ruda::dtype dtype_of(const float_tensor& t) { return cpu::dtype_of(t); }
    static ruda::dtype dtype_of(const quantized_tensor& t) { return cpu::dtype_of(t); }
    static std::size_t byte_size(const float_tensor& t) { return cpu::byte_size(t); }
    static std::size_t byte_size(const quantized_tensor& t) { return cpu::byte_size(t); }
    static device float_device(const float_tensor&) { return {}; }
    static device q_device(const quantized_tensor&) { return {}; }
    static bool blocking_reads(const device&) { return true; }
    static constexpr std::string_view name() { return "counting"; }
};
static_assert(ruda::backend<counting_backend>);

constexpr std::size_t huge = std::size_t{1} << 62U;

std::vector<std::uint8_t> zeros(std::size_t n) { return std::vector<std::uint8_t>(n, 0); }

ruda::tensor_data raw(std::size_t bytes, ruda::shape dims, ruda::dtype type)
{
    return {zeros(bytes), std::move(dims), type};
}

ruda::dtype quantized(ruda::quant_value value, ruda::quant_param param, ruda::quant_store store,
                      ruda::quant_level level = ruda::quant_level::tensor())
{
    return ruda::dtype::qfloat({value, param, store, level, ruda::quant_mode::symmetric});
}

ruda::gradient_entry f32_entry(std::uint64_t id, std::size_t n)
{
    return {ruda::param_id{id}, ruda::dtype::f32(), raw(n * 4, {n}, ruda::dtype::f32())};
}

ruda::gradient_entry q_entry(std::uint64_t id, ruda::dtype type, std::size_t bytes, ruda::shape dims)
{
    return {ruda::param_id{id}, type, raw(bytes, std::move(dims), type)};
}

struct rejection {
    const char* name;
    std::vector<ruda::gradient_entry> entries;
    errc code;
    std::string message; // the message starts with this
};

std::vector<rejection> rejections()
{
    using ruda::quant_level;
    using ruda::quant_param;
    using ruda::quant_store;
    using ruda::quant_value;
    const auto q8_u32 = quantized(quant_value::q8s, quant_param::f32, quant_store::packed_u32(0));
    const auto q8_native = quantized(quant_value::q8s, quant_param::f32, quant_store::native());
    const auto f32 = ruda::dtype::f32();
    std::vector<rejection> all;
    all.push_back({"duplicate id", {f32_entry(7, 1), f32_entry(7, 1)}, errc::duplicate_param_id,
                   "Duplicate gradient parameter ID 7"});
    all.push_back({"duplicate after others", {f32_entry(1, 1), f32_entry(2, 1), f32_entry(1, 2)},
                   errc::duplicate_param_id, "Duplicate gradient parameter ID 1"});
    all.push_back({"float stored as int",
                   {{ruda::param_id{3}, f32, raw(4, {1}, ruda::dtype::i32())}},
                   errc::invalid_dtype, "Invalid gradient dtype for parameter 3: f32, stored i32"});
    all.push_back({"int original", {{ruda::param_id{3}, ruda::dtype::i32(), raw(4, {1}, f32)}}, errc::invalid_dtype,
                   "Invalid gradient dtype for parameter 3: i32"});
    all.push_back({"bool original and stored",
                   {{ruda::param_id{3}, ruda::dtype::boolean(ruda::bool_store::native),
                     raw(1, {1}, ruda::dtype::boolean(ruda::bool_store::native))}},
                   errc::invalid_dtype, "Invalid gradient dtype for parameter 3"});
    all.push_back({"f64 stored as u8", {{ruda::param_id{3}, ruda::dtype::f64(), raw(1, {1}, ruda::dtype::u8())}},
                   errc::invalid_dtype, "Invalid gradient dtype for parameter 3"});
    all.push_back({"quantized original, float stored", {{ruda::param_id{4}, q8_u32, raw(4, {1}, f32)}},
                   errc::invalid_dtype, "Invalid gradient dtype for parameter 4"});
    all.push_back({"float original, quantized stored", {{ruda::param_id{4}, f32, raw(8, {4}, q8_u32)}},
                   errc::invalid_dtype, "Invalid gradient dtype for parameter 4"});
    all.push_back({"different schemes", {{ruda::param_id{4}, q8_native, raw(8, {4}, q8_u32)}}, errc::invalid_dtype,
                   "Invalid gradient dtype for parameter 4"});
    all.push_back({"shape overflows", {{ruda::param_id{5}, f32, raw(0, {huge, huge}, f32)}}, errc::shape_overflow,
                   "Gradient shape overflows for parameter 5"});
    all.push_back({"shape overflows before a zero", {{ruda::param_id{5}, f32, raw(0, {huge, huge, 0}, f32)}},
                   errc::shape_overflow, "Gradient shape overflows for parameter 5"});
    all.push_back({"quantized shape overflows", {q_entry(5, q8_u32, 0, {huge, 8})},
                   errc::shape_overflow, "Gradient shape overflows for parameter 5"});
    all.push_back({"packing dim beyond rank",
                   {q_entry(6, quantized(quant_value::q8s, quant_param::f32, quant_store::packed_u32(1)),
                            8, {4})},
                   errc::invalid_quantization,
                   "Invalid quantized gradient for parameter 6: packing dimension exceeds tensor rank"});
    all.push_back({"packing a rank-0 tensor", {q_entry(6, q8_u32, 8, {})}, errc::invalid_quantization,
                   "Invalid quantized gradient for parameter 6: packing dimension exceeds tensor rank"});
    all.push_back({"native packing of q8",
                   {q_entry(6, quantized(quant_value::q8s, quant_param::f32, quant_store::packed_native(0)),
                            8, {4})},
                   errc::invalid_quantization,
                   "Invalid quantized gradient for parameter 6: value type does not support native "
                   "packing"});
    all.push_back({"zero block dim",
                   {q_entry(6, quantized(quant_value::q8s, quant_param::f32, quant_store::native(),
                                         quant_level::block(ruda::block_size{0})),
                            8, {4})},
                   errc::invalid_quantization,
                   "Invalid quantized gradient for parameter 6: quantization block dimension is zero"});
    all.push_back({"block size of six dims",
                   {q_entry(6, quantized(quant_value::q8s, quant_param::f32, quant_store::native(),
                                         quant_level::block(ruda::block_size::from_parts(
                                             {1, 1, 1, 1, 1}, 6))),
                            8, {4})},
                   errc::invalid_quantization,
                   "Invalid quantized gradient for parameter 6: quantization block size has more"});
    all.push_back({"values and scales overflow",
                   {q_entry(6, quantized(quant_value::q8s, quant_param::f32, quant_store::native(),
                                         quant_level::block(ruda::block_size{1})),
                            0, {huge})},
                   errc::invalid_quantization,
                   "Invalid quantized gradient for parameter 6: value and scale byte count overflows"});
    all.push_back({"values beyond the addressable size",
                   {q_entry(6, q8_native, 0, {std::size_t{1} << 63U})},
                   errc::allocation_too_large,
                   "Invalid quantized gradient for parameter 6: value and scale allocation exceeds"});
    // 4 values packed in one u32 plus one f32 scale: exactly 8 bytes.
    all.push_back({"f32 scales, too few bytes", {q_entry(8, q8_u32, 7, {4})}, errc::byte_count_mismatch,
                   "Invalid quantized gradient byte count for parameter 8: expected 8, got 7"});
    all.push_back({"f32 scales, too many bytes", {q_entry(8, q8_u32, 9, {4})},
                   errc::byte_count_mismatch,
                   "Invalid quantized gradient byte count for parameter 8: expected 8, got 9"});
    all.push_back({"f16 scales, too few bytes",
                   {q_entry(8, quantized(quant_value::q8s, quant_param::f16, quant_store::packed_u32(0)),
                            5, {4})},
                   errc::byte_count_mismatch,
                   "Invalid quantized gradient byte count for parameter 8: expected at least 6, got 5"});
    all.push_back({"per-block scales missing",
                   {q_entry(8, quantized(quant_value::q8s, quant_param::f32, quant_store::native(),
                                         quant_level::block(ruda::block_size{2})),
                            8 + 4, {8})},
                   errc::byte_count_mismatch,
                   "Invalid quantized gradient byte count for parameter 8: expected 24, got 12"});
    all.push_back({"packed e2m1 too short",
                   {q_entry(8, quantized(quant_value::e2m1, quant_param::ue8m0,
                                         quant_store::packed_native(0)),
                            2, {6})},
                   errc::byte_count_mismatch,
                   "Invalid quantized gradient byte count for parameter 8: expected at least 4, got 2"});
    all.push_back({"float byte count", {{ruda::param_id{9}, f32, raw(11, {3}, f32)}}, errc::byte_count_mismatch,
                   "Invalid gradient byte count for parameter 9: expected 12, got 11"});
    all.push_back({"half stored, wrong count",
                   {{ruda::param_id{9}, f32, raw(4, {3}, ruda::dtype::f16())}}, errc::byte_count_mismatch,
                   "Invalid gradient byte count for parameter 9: expected 6, got 4"});
    all.push_back({"float byte count overflows", {{ruda::param_id{9}, f32, raw(0, {huge}, f32)}}, errc::shape_overflow,
                   "Stored gradient byte count overflows for parameter 9"});
    all.push_back({"a bad entry after good ones", {f32_entry(1, 2), f32_entry(2, 2), {ruda::param_id{3}, f32, raw(1, {1}, f32)}},
                   errc::byte_count_mismatch, "Invalid gradient byte count for parameter 3"});
    return all;
}

} // namespace

BOOST_AUTO_TEST_SUITE(optim_restore)

BOOST_AUTO_TEST_CASE(every_rejection_has_its_code_and_uploads_nothing)
{
    const auto cases = rejections();
    BOOST_TEST(cases.size() >= 25U);
    for (const auto& c : cases) {
        BOOST_TEST_CONTEXT(c.name)
        {
            counting_backend::uploads = 0;
            auto restored = ruda::gradients_params::from_record<counting_backend>(
                ruda::gradients_params_record{c.entries}, {});
            BOOST_REQUIRE(!restored);
            BOOST_TEST(restored.error() == c.code);
            BOOST_TEST(restored.error().message().rfind(c.message, 0) == 0U,
                       "message: " << restored.error().message());
            BOOST_TEST(counting_backend::uploads == 0);
            BOOST_TEST(!ruda::validate_gradients_record(ruda::gradients_params_record{c.entries}));
        }
    }
}

BOOST_AUTO_TEST_CASE(valid_quantized_layouts_are_accepted)
{
    using ruda::quant_level;
    using ruda::quant_param;
    using ruda::quant_store;
    using ruda::quant_value;
    const std::vector<ruda::gradient_entry> entries{
        // 10 q8 values in ceil(10/4) = 3 u32, one f32 scale.
        q_entry(1, quantized(quant_value::q8s, quant_param::f32, quant_store::packed_u32(0)), 16, {10}),
        // Non-f32 scales may carry trailing bytes.
        q_entry(2, quantized(quant_value::q8s, quant_param::f16, quant_store::packed_u32(0)), 9, {4}),
        // Packing along the first axis of [3, 2]: ceil(3/4) * 2 = 2 u32, one f32 scale.
        q_entry(3, quantized(quant_value::q8s, quant_param::f32, quant_store::packed_u32(1)), 12, {3, 2}),
        // Native values, 2x2 blocks over [4, 3]: 12 bytes + 2*2 bf16 scales.
        q_entry(4, quantized(quant_value::q8s, quant_param::bf16, quant_store::native(),
                             quant_level::block(ruda::block_size{2, 2})),
                20, {4, 3}),
        // e2m1 packed two per byte: 6 values in 3 bytes, one ue8m0 scale.
        q_entry(5, quantized(quant_value::e2m1, quant_param::ue8m0, quant_store::packed_native(0)), 4, {6}),
    };
    counting_backend::uploads = 0;
    auto restored = ruda::gradients_params::from_record<counting_backend>(
        ruda::gradients_params_record{entries}, {});
    BOOST_REQUIRE(restored);
    BOOST_TEST(counting_backend::uploads == 5);
    for (const auto& entry : entries) {
        const auto tensor = restored.value().get<counting_backend>(ruda::param_id{entry.id});
        BOOST_REQUIRE(tensor.has_value());
        BOOST_TEST(std::get<cpu::quantized_tensor>(*tensor).data() == entry.data);
    }
}

BOOST_AUTO_TEST_CASE(every_float_dtype_round_trips_through_a_snapshot)
{
    ruda::gradients_params grads;
    const auto base = ruda::tensor_data::from_values(std::vector<float>{0.5F, -3.0F, 1e-3F}, {3}).value();
    const std::vector<ruda::dtype> dtypes{ruda::dtype::f64(), ruda::dtype::f32(), ruda::dtype::f16(),
                                          ruda::dtype::bf16()};
    for (std::size_t i = 0; i < dtypes.size(); ++i) {
        grads.insert<cpu>(ruda::param_id{i}, cpu::float_from_data(base.convert(dtypes[i]).value(), {}).value());
    }
    const ruda::tensor_data flex{base.bytes(), {3}, ruda::dtype::flex32()};
    grads.insert<cpu>(ruda::param_id{9}, cpu::float_from_data(flex, {}).value());
    const ruda::tensor_data scalar = ruda::tensor_data::from_values(std::vector<double>{2.0}, {}).value();
    grads.insert<cpu>(ruda::param_id{10}, cpu::float_from_data(scalar, {}).value());
    const ruda::tensor_data empty{{}, {0, 4}, ruda::dtype::f32()};
    grads.insert<cpu>(ruda::param_id{11}, cpu::float_from_data(empty, {}).value());

    const auto record = grads.try_to_record<cpu>().value();
    const auto restored = ruda::gradients_params::from_record<cpu>(record, {}).value();
    BOOST_TEST(restored.size() == grads.size());
    for (const ruda::param_id id : grads.ids()) {
        const auto before = grads.get<cpu>(id);
        const auto after = restored.get<cpu>(id);
        BOOST_REQUIRE(after.has_value());
        BOOST_TEST(std::get<cpu::float_tensor>(*after).data() ==
                       std::get<cpu::float_tensor>(*before).data(),
                   "parameter " << id.val());
    }
}

BOOST_AUTO_TEST_CASE(narrowed_data_comes_back_in_the_original_dtype)
{
    // What a half-precision setting stores: f16 data of an f32 gradient.
    const auto original = ruda::tensor_data::from_values(std::vector<float>{1.5F, -2.0F}, {2}).value();
    const ruda::gradients_params_record record{
        {{ruda::param_id{3}, ruda::dtype::f32(), original.convert(ruda::dtype::f16()).value()},
         {ruda::param_id{4}, ruda::dtype::flex32(), original.convert(ruda::dtype::f64()).value()}}};
    const auto restored = ruda::gradients_params::from_record<cpu>(record, {}).value();
    const auto f32 = std::get<cpu::float_tensor>(restored.get<cpu>(ruda::param_id{3}).value());
    BOOST_TEST(f32.data() == original); // 1.5 and -2 are exact in f16
    const auto flex = std::get<cpu::float_tensor>(restored.get<cpu>(ruda::param_id{4}).value());
    BOOST_TEST(cpu::dtype_of(flex) == ruda::dtype::flex32());
    BOOST_TEST(flex.data().bytes() == original.bytes());
}

BOOST_AUTO_TEST_SUITE_END()
