// libFuzzer target: tensor_data::convert on arbitrary dtypes, shapes and bytes. It must return
// data of exactly the converted size or an error, never crash, and widening then narrowing a
// float must give back the same bits (NaNs with the quiet bit set).
//
// Input: [from kind][to kind][bool stores][rank][rank x 1-byte dims][bytes...]
#include <ruda/tensor/tensor_data.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

ruda::dtype pick(std::uint8_t kind, std::uint8_t store)
{
    const auto k = static_cast<ruda::dtype::kind>(kind % 15);
    if (k == ruda::dtype::kind::boolean) {
        return ruda::dtype::boolean(static_cast<ruda::bool_store>(store % 3));
    }
    if (k == ruda::dtype::kind::qfloat) {
        return ruda::dtype::qfloat(ruda::quant_scheme{});
    }
    return *ruda::dtype::from_kind(k);
}

// The bits of a float element after a NaN's quiet bit is forced.
std::uint32_t quieted(std::uint32_t bits, ruda::dtype::kind kind)
{
    switch (kind) {
    case ruda::dtype::kind::f16:
        return (bits & 0x7C00U) == 0x7C00U && (bits & 0x3FFU) != 0 ? bits | 0x0200U : bits;
    case ruda::dtype::kind::bf16: return (bits & 0x7FFFU) > 0x7F80U ? bits | 0x0040U : bits;
    default: return (bits & 0x7FFFFFFFU) > 0x7F800000U ? bits | 0x00400000U : bits;
    }
}

void require(bool ok)
{
    if (!ok) {
        std::abort();
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    if (size < 4) {
        return 0;
    }
    const ruda::dtype from = pick(data[0], data[2]);
    const ruda::dtype to = pick(data[1], data[2] >> 2);
    const std::size_t rank = data[3] % 5;
    if (size < 4 + rank) {
        return 0;
    }
    ruda::shape dims(data + 4, data + 4 + rank);
    const std::uint8_t* payload = data + 4 + rank;
    const ruda::tensor_data t(std::vector<std::uint8_t>(payload, data + size), dims, from);

    auto converted = t.convert(to);
    if (!converted) {
        return 0;
    }
    const auto& out = converted.value();
    if (to == from) {
        require(out == t);
        return 0;
    }
    require(out.shape() == t.shape());
    require(out.bytes().size() == t.num_elements() * to.size());
    require(to.get_kind() != ruda::dtype::kind::flex32 || out.dtype() == ruda::dtype::f32());

    // Widening a half or f32 value is exact, so narrowing it back restores its bits, except that
    // a NaN comes back with its quiet bit set.
    if (from.is_float() && to.is_float() && to.size() > from.size() &&
        from.get_kind() != ruda::dtype::kind::flex32) {
        auto back = out.convert(from);
        require(back.has_value());
        const auto& b = back.value().bytes();
        require(b.size() == t.bytes().size());
        for (std::size_t i = 0; i < b.size(); i += from.size()) {
            std::uint32_t original = 0;
            std::uint32_t restored = 0;
            std::memcpy(&original, t.bytes().data() + i, from.size());
            std::memcpy(&restored, b.data() + i, from.size());
            require(restored == quieted(original, from.get_kind()));
        }
    }
    return 0;
}
