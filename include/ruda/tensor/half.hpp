// IEEE binary16 (`float16`) and bfloat16 element types and their conversions, rounding and NaN
// rules exactly as Burn's `half` crate: round to nearest even, overflow to infinity, NaN kept
// with its quiet bit forced. Bulk conversions pick an F16C/AVX2 path at run time.
#pragma once

#include <cstdint>
#include <span>

namespace ruda {

/// An IEEE 754 binary16 value, held as its bits.
struct float16 {
    std::uint16_t bits = 0;
    friend bool operator==(float16, float16) = default;
};

/// A bfloat16 value (the upper half of an f32), held as its bits.
struct bfloat16 {
    std::uint16_t bits = 0;
    friend bool operator==(bfloat16, bfloat16) = default;
};

static_assert(sizeof(float16) == 2 && sizeof(bfloat16) == 2);

/// Exact widening. A NaN keeps its sign and payload and gets the f32 quiet bit.
float to_f32(float16 h) noexcept;
float to_f32(bfloat16 h) noexcept;

/// Narrowing, ties to even. A NaN keeps its sign and upper payload and gets the quiet bit
/// (f16 `0x0200`, bf16 `0x0040`).
float16 f16_from_f32(float f) noexcept;
bfloat16 bf16_from_f32(float f) noexcept;
/// Through f32 first (Burn's double rounding), not a direct rounding of `d`.
float16 f16_from_f64(double d) noexcept;
bfloat16 bf16_from_f64(double d) noexcept;

/// Bulk conversions of `in` into `out`, which must have the same length (checked by the caller;
/// only `min(in.size(), out.size())` elements are converted). Same results as the scalar calls.
void convert(std::span<const float> in, std::span<float16> out) noexcept;
void convert(std::span<const float> in, std::span<bfloat16> out) noexcept;
void convert(std::span<const float16> in, std::span<float> out) noexcept;
void convert(std::span<const bfloat16> in, std::span<float> out) noexcept;

/// Which bulk path this machine runs: "avx2+f16c" or "scalar".
const char* half_conversion_path() noexcept;

} // namespace ruda
