// f16/bf16: every bit pattern widens exactly and round-trips, f32/f64 rounding matches values
// computed independently by numpy and torch (tests/tensor/data), and the bulk paths agree.
#include <ruda/tensor/half.hpp>

#include <boost/test/unit_test.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using ruda::bfloat16;
using ruda::float16;

namespace {

std::uint32_t bits(float f) { return std::bit_cast<std::uint32_t>(f); }

bool f16_is_nan(std::uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x03FF) != 0; }
bool bf16_is_nan(std::uint16_t h) { return (h & 0x7FFF) > 0x7F80; }

// The f16 value from its fields, computed in double without the library.
float decode_f16(std::uint16_t h)
{
    const int exp = (h >> 10) & 0x1F;
    const int man = h & 0x3FF;
    double v = 0;
    if (exp == 0) {
        v = std::ldexp(man, -24);
    } else if (exp == 31) {
        v = INFINITY;
    } else {
        v = std::ldexp(1024 + man, exp - 25);
    }
    return static_cast<float>((h & 0x8000) ? -v : v);
}

std::vector<std::vector<std::uint64_t>> read_table(const std::string& name)
{
    std::ifstream in(std::string(RUDA_TEST_DATA_DIR) + "/" + name);
    BOOST_TEST_REQUIRE(in.good(), "cannot open " << name);
    std::vector<std::vector<std::uint64_t>> rows;
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') {
            continue;
        }
        std::istringstream fields(line);
        std::vector<std::uint64_t> row;
        std::string field;
        while (fields >> field) {
            row.push_back(std::stoull(field, nullptr, 16));
        }
        rows.push_back(row);
    }
    return rows;
}

std::vector<float16> all_f16()
{
    std::vector<float16> v(65536);
    for (std::uint32_t i = 0; i < v.size(); ++i) {
        v[i].bits = static_cast<std::uint16_t>(i);
    }
    return v;
}

std::vector<bfloat16> all_bf16()
{
    std::vector<bfloat16> v(65536);
    for (std::uint32_t i = 0; i < v.size(); ++i) {
        v[i].bits = static_cast<std::uint16_t>(i);
    }
    return v;
}

} // namespace

BOOST_AUTO_TEST_SUITE(tensor_half)

BOOST_AUTO_TEST_CASE(every_f16_widens_exactly_and_round_trips)
{
    std::size_t nans = 0;
    for (std::uint32_t i = 0; i < 65536; ++i) {
        const auto h = static_cast<std::uint16_t>(i);
        const float f = ruda::to_f32(float16{h});
        if (f16_is_nan(h)) {
            ++nans;
            const std::uint32_t expected =
                (std::uint32_t(h & 0x8000) << 16) | 0x7FC00000U | (std::uint32_t(h & 0x3FF) << 13);
            BOOST_TEST(bits(f) == expected, "f16 " << std::hex << h);
            BOOST_TEST(ruda::f16_from_f32(f).bits == (h | 0x0200), "f16 " << std::hex << h);
        } else {
            BOOST_TEST(bits(f) == bits(decode_f16(h)), "f16 " << std::hex << h);
            BOOST_TEST(ruda::f16_from_f32(f).bits == h, "f16 " << std::hex << h);
            BOOST_TEST(ruda::f16_from_f64(static_cast<double>(f)).bits == h);
        }
    }
    BOOST_TEST(nans == 2U * 1023U);
}

BOOST_AUTO_TEST_CASE(every_bf16_widens_exactly_and_round_trips)
{
    for (std::uint32_t i = 0; i < 65536; ++i) {
        const auto h = static_cast<std::uint16_t>(i);
        const float f = ruda::to_f32(bfloat16{h});
        const std::uint16_t quiet = bf16_is_nan(h) ? static_cast<std::uint16_t>(h | 0x0040) : h;
        BOOST_TEST(bits(f) == std::uint32_t(quiet) << 16, "bf16 " << std::hex << h);
        BOOST_TEST(ruda::bf16_from_f32(f).bits == quiet, "bf16 " << std::hex << h);
        if (!bf16_is_nan(h)) {
            BOOST_TEST(ruda::bf16_from_f64(static_cast<double>(f)).bits == h);
        }
    }
}

BOOST_AUTO_TEST_CASE(bulk_paths_agree_with_scalar_on_every_pattern)
{
    BOOST_TEST_MESSAGE("bulk path: " << ruda::half_conversion_path());
    const std::string path = ruda::half_conversion_path();
    BOOST_TEST((path == "avx2+f16c" || path == "scalar"));
#if defined(__x86_64__)
    // /proc/cpuinfo is the kernel's independent word on what this CPU and OS support.
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string line;
    while (std::getline(cpuinfo, line) && line.rfind("flags", 0) != 0) {
    }
    const auto has = [&](const char* flag) { return line.find(std::string(" ") + flag + " ") != std::string::npos || line.ends_with(std::string(" ") + flag); };
    if (!line.empty()) {
        BOOST_TEST(path == (has("avx2") && has("f16c") ? "avx2+f16c" : "scalar"));
    }
#endif
    const auto h16 = all_f16();
    const auto b16 = all_bf16();
    // Offsets and odd lengths exercise unaligned starts and the scalar tails.
    for (std::size_t offset : {0U, 3U}) {
        const std::size_t n = h16.size() - offset - (offset ? 2 : 0);
        std::vector<float> wide(n);
        ruda::convert(std::span(h16).subspan(offset, n), std::span(wide));
        std::vector<float16> back(n);
        ruda::convert(std::span<const float>(wide), std::span(back));
        for (std::size_t i = 0; i < n; ++i) {
            const float16 h = h16[offset + i];
            BOOST_TEST(bits(wide[i]) == bits(ruda::to_f32(h)), "f16 " << std::hex << h.bits);
            BOOST_TEST(back[i].bits == ruda::f16_from_f32(wide[i]).bits);
        }
        ruda::convert(std::span(b16).subspan(offset, n), std::span(wide));
        std::vector<bfloat16> bback(n);
        ruda::convert(std::span<const float>(wide), std::span(bback));
        for (std::size_t i = 0; i < n; ++i) {
            const bfloat16 h = b16[offset + i];
            BOOST_TEST(bits(wide[i]) == bits(ruda::to_f32(h)), "bf16 " << std::hex << h.bits);
            BOOST_TEST(bback[i].bits == ruda::bf16_from_f32(wide[i]).bits);
        }
    }
}

BOOST_AUTO_TEST_CASE(f32_rounding_matches_numpy_and_torch)
{
    const auto rows = read_table("rounding_f32.txt");
    BOOST_TEST_REQUIRE(rows.size() > 16000U);
    std::vector<float> in;
    for (const auto& r : rows) {
        BOOST_TEST_REQUIRE(r.size() == 3U);
        const float f = std::bit_cast<float>(static_cast<std::uint32_t>(r[0]));
        in.push_back(f);
        BOOST_TEST(ruda::f16_from_f32(f).bits == r[1], "f32 " << std::hex << r[0]);
        BOOST_TEST(ruda::bf16_from_f32(f).bits == r[2], "f32 " << std::hex << r[0]);
    }
    std::vector<float16> h(in.size());
    std::vector<bfloat16> b(in.size());
    ruda::convert(std::span<const float>(in), std::span(h));
    ruda::convert(std::span<const float>(in), std::span(b));
    for (std::size_t i = 0; i < rows.size(); ++i) {
        BOOST_TEST(h[i].bits == rows[i][1], "bulk f32 " << std::hex << rows[i][0]);
        BOOST_TEST(b[i].bits == rows[i][2], "bulk f32 " << std::hex << rows[i][0]);
    }
}

BOOST_AUTO_TEST_CASE(f64_narrows_through_f32_with_double_rounding)
{
    const auto rows = read_table("rounding_f64.txt");
    BOOST_TEST_REQUIRE(rows.size() > 3000U);
    std::size_t double_rounded = 0;
    for (const auto& r : rows) {
        BOOST_TEST_REQUIRE(r.size() == 4U);
        const double d = std::bit_cast<double>(r[0]);
        BOOST_TEST(ruda::f16_from_f64(d).bits == r[1], "f64 " << std::hex << r[0]);
        BOOST_TEST(ruda::bf16_from_f64(d).bits == r[2], "f64 " << std::hex << r[0]);
        if (r[1] != r[3]) {
            ++double_rounded; // a direct rounding would have given r[3]
        }
    }
    BOOST_TEST(double_rounded >= 2U);
    // 1 + 2^-11 + 2^-40 rounds to the f16 tie 1 + 2^-11 in f32, then to even: 1.0.
    BOOST_TEST(ruda::f16_from_f64(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)).bits == 0x3C00);
}

BOOST_AUTO_TEST_CASE(nan_narrowing_forces_the_quiet_bit_and_keeps_payload)
{
    struct row {
        std::uint32_t f32;
        std::uint16_t f16;
        std::uint16_t bf16;
    };
    const row rows[] = {
        {0x7F800001U, 0x7E00, 0x7FC0}, // signalling, lowest payload bit only
        {0xFFA00000U, 0xFF00, 0xFFE0}, // negative signalling with an upper payload bit
        {0x7FC00000U, 0x7E00, 0x7FC0}, // canonical quiet NaN
        {0x7FFFFFFFU, 0x7FFF, 0x7FFF}, // every payload bit
        {0x7F802000U, 0x7E01, 0x7FC0}, // payload bit 13 survives in f16 only
    };
    std::vector<float> in;
    for (const row& r : rows) {
        const float f = std::bit_cast<float>(r.f32);
        in.push_back(f);
        BOOST_TEST(ruda::f16_from_f32(f).bits == r.f16, std::hex << r.f32);
        BOOST_TEST(ruda::bf16_from_f32(f).bits == r.bf16, std::hex << r.f32);
        BOOST_TEST(ruda::f16_from_f64(static_cast<double>(f)).bits == r.f16);
    }
    in.resize(16, std::bit_cast<float>(0x7F800001U)); // fill a whole vector lane
    std::vector<float16> h(in.size());
    std::vector<bfloat16> b(in.size());
    ruda::convert(std::span<const float>(in), std::span(h));
    ruda::convert(std::span<const float>(in), std::span(b));
    for (std::size_t i = 0; i < in.size(); ++i) {
        BOOST_TEST(h[i].bits == ruda::f16_from_f32(in[i]).bits);
        BOOST_TEST(b[i].bits == ruda::bf16_from_f32(in[i]).bits);
    }
}

BOOST_AUTO_TEST_CASE(overflow_goes_to_infinity_and_underflow_to_signed_zero)
{
    BOOST_TEST(ruda::f16_from_f32(65504.0f).bits == 0x7BFF);
    BOOST_TEST(ruda::f16_from_f32(65520.0f).bits == 0x7C00);
    BOOST_TEST(ruda::f16_from_f32(-1e10f).bits == 0xFC00);
    BOOST_TEST(ruda::f16_from_f32(std::ldexp(1.0f, -25)).bits == 0x0000); // tie to even: 0
    BOOST_TEST(ruda::f16_from_f32(-std::ldexp(1.0f, -26)).bits == 0x8000);
    BOOST_TEST(ruda::bf16_from_f32(std::bit_cast<float>(0x7F7FFFFFU)).bits == 0x7F80);
    BOOST_TEST(ruda::bf16_from_f32(std::bit_cast<float>(0x80000001U)).bits == 0x8000);
    BOOST_TEST(ruda::bf16_from_f64(1e300).bits == 0x7F80);
    BOOST_TEST(ruda::f16_from_f64(-1e300).bits == 0xFC00);
}

BOOST_AUTO_TEST_SUITE_END()
