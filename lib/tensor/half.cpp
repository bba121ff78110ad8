// f16/bf16 conversions. Scalar f16 uses the FP16 library (the one PyTorch uses); NaNs are
// handled here first because that library canonicalises them, while Burn keeps the payload.
// Bulk conversions use F16C/AVX2 when the CPU has them, chosen once at run time.
#include <ruda/tensor/half.hpp>

#include <fp16.h>

#include <algorithm>
#include <bit>
#include <cstddef>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define RUDA_HAVE_X86_DISPATCH 1
#endif

namespace ruda {
namespace {

constexpr std::uint32_t f32_sign = 0x8000'0000U;
constexpr std::uint32_t f32_abs = 0x7FFF'FFFFU;
constexpr std::uint32_t f32_inf = 0x7F80'0000U;

bool is_nan_bits(std::uint32_t x) noexcept { return (x & f32_abs) > f32_inf; }

} // namespace

float to_f32(float16 h) noexcept
{
    const std::uint32_t bits = h.bits;
    if ((bits & 0x7C00U) == 0x7C00U && (bits & 0x03FFU) != 0) {
        const std::uint32_t sign = (bits & 0x8000U) << 16;
        return std::bit_cast<float>(sign | 0x7FC0'0000U | ((bits & 0x03FFU) << 13));
    }
    return fp16_ieee_to_fp32_value(h.bits);
}

float to_f32(bfloat16 h) noexcept
{
    std::uint32_t bits = h.bits;
    if ((bits & 0x7FFFU) > 0x7F80U) {
        bits |= 0x0040U;
    }
    return std::bit_cast<float>(bits << 16);
}

float16 f16_from_f32(float f) noexcept
{
    const auto x = std::bit_cast<std::uint32_t>(f);
    if (is_nan_bits(x)) {
        const std::uint32_t sign = (x & f32_sign) >> 16;
        return float16{
            static_cast<std::uint16_t>(sign | 0x7C00U | 0x0200U | ((x & 0x007F'FFFFU) >> 13))};
    }
    return float16{fp16_ieee_from_fp32_value(f)};
}

bfloat16 bf16_from_f32(float f) noexcept
{
    const auto x = std::bit_cast<std::uint32_t>(f);
    if (is_nan_bits(x)) {
        return bfloat16{static_cast<std::uint16_t>((x >> 16) | 0x0040U)};
    }
    // Round to nearest, ties to even: add just under half an ulp, plus one when the kept lsb is
    // odd. Overflow carries into the exponent and gives infinity.
    const std::uint32_t lsb = (x >> 16) & 1U;
    return bfloat16{static_cast<std::uint16_t>((x + 0x7FFFU + lsb) >> 16)};
}

float16 f16_from_f64(double d) noexcept { return f16_from_f32(static_cast<float>(d)); }
bfloat16 bf16_from_f64(double d) noexcept { return bf16_from_f32(static_cast<float>(d)); }

namespace {

template <class In, class Out, class Op>
void convert_scalar(const In* in, Out* out, std::size_t n, Op op) noexcept
{
    for (std::size_t i = 0; i < n; ++i) {
        out[i] = op(in[i]);
    }
}

void f32_to_f16_scalar(const float* in, float16* out, std::size_t n) noexcept
{
    convert_scalar(in, out, n, [](float f) { return f16_from_f32(f); });
}
void f32_to_bf16_scalar(const float* in, bfloat16* out, std::size_t n) noexcept
{
    convert_scalar(in, out, n, [](float f) { return bf16_from_f32(f); });
}
void f16_to_f32_scalar(const float16* in, float* out, std::size_t n) noexcept
{
    convert_scalar(in, out, n, [](float16 h) { return to_f32(h); });
}
void bf16_to_f32_scalar(const bfloat16* in, float* out, std::size_t n) noexcept
{
    convert_scalar(in, out, n, [](bfloat16 h) { return to_f32(h); });
}

#ifdef RUDA_HAVE_X86_DISPATCH

// F16C rounds to nearest even and quiets NaNs exactly like the scalar rules above; the
// exhaustive tests compare every bit pattern.
__attribute__((target("avx2,f16c"))) void f32_to_f16_avx2(const float* in, float16* out,
                                                             std::size_t n) noexcept
{
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(in + i);
        const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
    }
    f32_to_f16_scalar(in + i, out + i, n - i);
}

__attribute__((target("avx2,f16c"))) void f16_to_f32_avx2(const float16* in, float* out,
                                                             std::size_t n) noexcept
{
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
    }
    f16_to_f32_scalar(in + i, out + i, n - i);
}

// bf16 rounding of eight f32 lanes, as 32-bit lanes holding the bf16 bits.
__attribute__((target("avx2"))) __m256i bf16_round8(__m256i x) noexcept
{
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    const __m256i rounded =
        _mm256_add_epi32(x, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb));
    const __m256i magnitude = _mm256_and_si256(x, _mm256_set1_epi32(static_cast<int>(f32_abs)));
    const __m256i nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(static_cast<int>(f32_inf)));
    const __m256i quieted = _mm256_or_si256(x, _mm256_set1_epi32(0x0040'0000));
    return _mm256_srli_epi32(_mm256_blendv_epi8(rounded, quieted, nan), 16);
}

__attribute__((target("avx2"))) void f32_to_bf16_avx2(const float* in, bfloat16* out,
                                                        std::size_t n) noexcept
{
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256i lo =
            bf16_round8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
        const __m256i hi =
            bf16_round8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i + 8)));
        // packus interleaves 128-bit lanes; the permute restores element order.
        const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), packed);
    }
    f32_to_bf16_scalar(in + i, out + i, n - i);
}

__attribute__((target("avx2"))) void bf16_to_f32_avx2(const bfloat16* in, float* out,
                                                        std::size_t n) noexcept
{
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
        const __m256i x = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
        const __m256i magnitude = _mm256_and_si256(x, _mm256_set1_epi32(static_cast<int>(f32_abs)));
        const __m256i nan =
            _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(static_cast<int>(f32_inf)));
        const __m256i quiet = _mm256_and_si256(nan, _mm256_set1_epi32(0x0040'0000));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_or_si256(x, quiet));
    }
    bf16_to_f32_scalar(in + i, out + i, n - i);
}

#endif

struct half_paths {
    const char* name = "scalar";
    void (*f32_to_f16)(const float*, float16*, std::size_t) noexcept = f32_to_f16_scalar;
    void (*f32_to_bf16)(const float*, bfloat16*, std::size_t) noexcept = f32_to_bf16_scalar;
    void (*f16_to_f32)(const float16*, float*, std::size_t) noexcept = f16_to_f32_scalar;
    void (*bf16_to_f32)(const bfloat16*, float*, std::size_t) noexcept = bf16_to_f32_scalar;
};

#ifdef RUDA_HAVE_X86_DISPATCH
// AVX2 and F16C from CPUID, plus the OS saving the YMM registers (XCR0 bits 1 and 2); asked
// directly because not every compiler's __builtin_cpu_supports knows "f16c".
bool cpu_has_avx2_f16c() noexcept
{
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) {
        return false;
    }
    const bool f16c = (ecx & bit_F16C) != 0;
    const bool osxsave = (ecx & bit_OSXSAVE) != 0;
    const bool avx = (ecx & bit_AVX) != 0;
    if (!f16c || !osxsave || !avx) {
        return false;
    }
    unsigned xcr0_lo = 0, xcr0_hi = 0;
    __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo & 0x6U) != 0x6U) {
        return false;
    }
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
        return false;
    }
    return (ebx & bit_AVX2) != 0;
}
#endif

half_paths select_paths() noexcept
{
    half_paths p;
#ifdef RUDA_HAVE_X86_DISPATCH
    if (cpu_has_avx2_f16c()) {
        p = {"avx2+f16c", f32_to_f16_avx2, f32_to_bf16_avx2, f16_to_f32_avx2, bf16_to_f32_avx2};
    }
#endif
    return p;
}

const half_paths& paths() noexcept
{
    static const half_paths selected = select_paths();
    return selected;
}

} // namespace

void convert(std::span<const float> in, std::span<float16> out) noexcept
{
    paths().f32_to_f16(in.data(), out.data(), std::min(in.size(), out.size()));
}
void convert(std::span<const float> in, std::span<bfloat16> out) noexcept
{
    paths().f32_to_bf16(in.data(), out.data(), std::min(in.size(), out.size()));
}
void convert(std::span<const float16> in, std::span<float> out) noexcept
{
    paths().f16_to_f32(in.data(), out.data(), std::min(in.size(), out.size()));
}
void convert(std::span<const bfloat16> in, std::span<float> out) noexcept
{
    paths().bf16_to_f32(in.data(), out.data(), std::min(in.size(), out.size()));
}

const char* half_conversion_path() noexcept { return paths().name; }

} // namespace ruda
