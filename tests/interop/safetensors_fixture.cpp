// Writes the checkpoint the numpy test exports with ruda-inspect: one gradient per float dtype
// (and a flex32 one, one stored narrower than it was, an empty one, a scalar), whose element i
// of parameter k is -0 (i = 0), +inf (i = 1), the quiet NaN (i = 2) or (i - 7) * 0.375 + k / 4,
// a value every float dtype holds exactly. safetensors_numpy.py computes the same values.
// Three are named, as a module's parameters are: the export names their tensors so and keeps
// their ids in the metadata.
//
//   safetensors_fixture OUT.ruda
#include <ruda/ruda.hpp>

#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

namespace {

double value(std::size_t i, std::uint64_t k)
{
    switch (i) {
    case 0: return -0.0;
    case 1: return std::numeric_limits<double>::infinity();
    case 2: return std::numeric_limits<double>::quiet_NaN();
    default: return (static_cast<double>(i) - 7) * 0.375 + static_cast<double>(k) / 4;
    }
}

template <class T, class Convert>
ruda::tensor_data values(std::uint64_t k, ruda::shape dims, Convert convert)
{
    std::size_t count = 1;
    for (const std::size_t d : dims) {
        count *= d;
    }
    std::vector<T> out;
    for (std::size_t i = 0; i < count; ++i) {
        out.push_back(convert(value(i, k)));
    }
    return ruda::tensor_data::from_values(out, std::move(dims)).value();
}

ruda::tensor_data f64(std::uint64_t k, ruda::shape dims)
{
    return values<double>(k, std::move(dims), [](double v) { return v; });
}
ruda::tensor_data f32(std::uint64_t k, ruda::shape dims)
{
    return values<float>(k, std::move(dims), [](double v) { return static_cast<float>(v); });
}
ruda::tensor_data f16(std::uint64_t k, ruda::shape dims)
{
    return values<ruda::float16>(k, std::move(dims), [](double v) { return ruda::f16_from_f64(v); });
}
ruda::tensor_data bf16(std::uint64_t k, ruda::shape dims)
{
    return values<ruda::bfloat16>(k, std::move(dims), [](double v) { return ruda::bf16_from_f64(v); });
}

} // namespace

int main(int argc, char** argv)
{
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s OUT.ruda\n", argv[0]);
        return 2;
    }
    auto flex = f32(15, {3, 8});
    std::vector<ruda::gradient_entry> entries{
        {ruda::param_id{11}, ruda::dtype::f64(), f64(11, {4, 6}), "fc1.weight"},
        {ruda::param_id{12}, ruda::dtype::f32(), f32(12, {24})},
        {ruda::param_id{13}, ruda::dtype::f16(), f16(13, {2, 3, 4})},
        {ruda::param_id{14}, ruda::dtype::bf16(), bf16(14, {24})},
        {ruda::param_id{15}, ruda::dtype::flex32(),
         ruda::tensor_data{flex.bytes(), flex.shape(), ruda::dtype::flex32()}, "fc2.weight"},
        {ruda::param_id{16}, ruda::dtype::f32(), f16(16, {24}), "fc2.bias"}, // an f32 gradient stored as f16
        {ruda::param_id{17}, ruda::dtype::f32(), f32(17, {0})},
        {ruda::param_id{18}, ruda::dtype::f32(), f32(18, {})},
    };
    const auto saved = ruda::save_checkpoint_file(
        argv[1], ruda::checkpoint{ruda::gradients_params_record{std::move(entries)}});
    if (!saved) {
        std::fprintf(stderr, "%s: %s\n", argv[1], saved.error().message().c_str());
        return 1;
    }
    return 0;
}
