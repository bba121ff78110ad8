// A tour of ruda's tensor core: a gradient-like f32 tensor stored in the reduced precisions a
// checkpoint may use, the error each one costs, and the clean errors where a conversion is
// impossible. Exits non-zero if any result differs from what the tour expects.
#include <ruda/ruda.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace {

int failures = 0;

void expect(bool ok, const char* what)
{
    if (!ok) {
        std::printf("UNEXPECTED: %s\n", what);
        ++failures;
    }
}

// Largest relative error of `restored` against `original`, over non-zero values.
double max_relative_error(std::span<const float> original, std::span<const float> restored)
{
    double worst = 0;
    for (std::size_t i = 0; i < original.size(); ++i) {
        if (original[i] != 0.0f) {
            worst = std::max(worst, std::abs(double(restored[i]) - original[i]) / std::abs(original[i]));
        }
    }
    return worst;
}

} // namespace

int main()
{
    // Gradients of a layer: mostly small, normally distributed values.
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.0f, 1e-3f);
    std::vector<float> values(256 * 1024);
    for (float& v : values) {
        v = dist(rng);
    }
    auto grad = ruda::tensor_data::from_values(values, {256, 1024});
    if (!grad) {
        std::printf("cannot build the gradient: %s\n", grad.error().message().c_str());
        return 1;
    }
    std::printf("gradient: shape [256, 1024], %zu bytes of %s (bulk half path: %s)\n\n",
                grad.value().bytes().size(), to_string(grad.value().dtype()).c_str(),
                ruda::half_conversion_path());

    std::printf("| stored as | bytes | max relative error after the round trip | values lost to zero |\n");
    std::printf("|---|---:|---:|---:|\n");
    for (const ruda::dtype stored : {ruda::dtype::f64(), ruda::dtype::f32(), ruda::dtype::bf16(),
                                     ruda::dtype::f16()}) {
        auto narrowed = grad.value().convert(stored);
        expect(narrowed.has_value(), "float conversions succeed");
        if (!narrowed) {
            continue;
        }
        const std::size_t stored_bytes = narrowed.value().bytes().size();
        auto back = std::move(narrowed).value().convert(ruda::dtype::f32());
        expect(back.has_value(), "widening back to f32 succeeds");
        const auto restored = back.value().values<float>().value();
        const double err = max_relative_error(values, restored);
        const auto zeroed = std::count_if(restored.begin(), restored.end(), [](float v) { return v == 0.0f; });
        std::printf("| %s | %zu | %.3g | %td |\n", to_string(stored).c_str(), stored_bytes, err, zeroed);
        if (stored.size() >= 4) {
            expect(err == 0.0, "f32 and f64 are lossless for f32 gradients");
        } else if (stored == ruda::dtype::bf16()) {
            expect(err <= std::ldexp(1.0, -8), "bf16 keeps 8 significant bits");
        } else {
            // f16's range ends near 6e-8: the smallest gradients flush to zero, which is why
            // checkpoints of gradients should keep bf16 or wider.
            expect(zeroed > 0, "f16 flushes the tiniest gradients to zero");
        }
    }

    std::printf("\nconversions that cannot be done return errors:\n");
    auto nan = ruda::tensor_data::from_values(std::vector<float>{1.0f, NAN}, {2}).value();
    auto to_int = nan.convert(ruda::dtype::i32());
    expect(to_int.error() == ruda::errc::invalid_dtype, "NaN to i32 is invalid_dtype");
    std::printf("  f32 with NaN -> i32: %s\n", to_int.error().message().c_str());

    const ruda::tensor_data quantized(std::vector<std::uint8_t>(8), {4},
                                      ruda::dtype::qfloat(ruda::quant_scheme{}));
    auto dequant = quantized.convert(ruda::dtype::f32());
    expect(dequant.error() == ruda::errc::invalid_dtype, "QFloat conversion is invalid_dtype");
    std::printf("  qfloat -> f32: %s\n", dequant.error().message().c_str());

    const ruda::tensor_data truncated(std::vector<std::uint8_t>(6), {2}, ruda::dtype::f32());
    auto short_read = truncated.convert(ruda::dtype::bf16());
    expect(short_read.error() == ruda::errc::invalid_dtype, "short bytes are invalid_dtype");
    std::printf("  6 bytes as f32 [2] -> bf16: %s\n", short_read.error().message().c_str());

    std::printf("\n%s\n", failures == 0 ? "precision tour: all results as expected"
                                        : "precision tour: UNEXPECTED RESULTS");
    return failures == 0 ? 0 : 1;
}
