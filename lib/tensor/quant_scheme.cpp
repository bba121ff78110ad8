// Sizes and layout rules of quantization schemes (cubecl 0.10 `QuantScheme`).
#include <ruda/tensor/quant_scheme.hpp>

#include <algorithm>

namespace ruda {

std::size_t size_bits(quant_value v) noexcept
{
    switch (v) {
    case quant_value::q8f:
    case quant_value::e5m2:
    case quant_value::e4m3:
    case quant_value::q8s: return 8;
    case quant_value::q4f:
    case quant_value::e2m1:
    case quant_value::q4s: return 4;
    case quant_value::q2f:
    case quant_value::q2s: return 2;
    }
    return 8;
}

std::size_t native_packing(quant_value v) noexcept { return v == quant_value::e2m1 ? 2 : 1; }

std::size_t size_bytes(quant_param p) noexcept
{
    switch (p) {
    case quant_param::f32: return 4;
    case quant_param::f16:
    case quant_param::bf16: return 2;
    case quant_param::ue8m0:
    case quant_param::ue4m3: return 1;
    }
    return 4;
}

std::size_t quant_store::size_bits(quant_value v) const noexcept
{
    switch (kind_) {
    case kind::native: return ruda::size_bits(v);
    case kind::packed_native: return ruda::size_bits(v) * native_packing(v);
    case kind::packed_u32: return 32;
    }
    return 32;
}

block_size::block_size(std::initializer_list<std::uint8_t> dims) noexcept
    : block_size(std::span<const std::uint8_t>(dims.begin(), dims.size()))
{
}

block_size::block_size(std::span<const std::uint8_t> dims) noexcept
{
    len_ = static_cast<std::uint8_t>(std::min(dims.size(), max_dims));
    std::copy_n(dims.begin(), len_, storage_.begin());
}

block_size block_size::from_parts(std::array<std::uint8_t, max_dims> storage,
                                  std::uint8_t len) noexcept
{
    block_size b;
    b.storage_ = storage;
    b.len_ = len;
    return b;
}

std::span<const std::uint8_t> block_size::as_slice() const noexcept
{
    return {storage_.data(), std::min<std::size_t>(len_, max_dims)};
}

std::vector<std::size_t> block_size::to_dim_vec(std::size_t rank) const
{
    const auto stored = as_slice();
    const std::size_t n = std::min(rank, stored.size());
    std::vector<std::size_t> dims(rank, 1);
    std::copy_n(stored.begin(), n, dims.begin() + static_cast<std::ptrdiff_t>(rank - n));
    return dims;
}

std::size_t quant_scheme::num_quants() const noexcept
{
    return store.size_bits(value) / size_bits(value);
}

std::string to_string(quant_value v)
{
    switch (v) {
    case quant_value::q8f: return "q8f";
    case quant_value::e5m2: return "e5m2";
    case quant_value::e4m3: return "e4m3";
    case quant_value::q4f: return "q4f";
    case quant_value::e2m1: return "e2m1";
    case quant_value::q2f: return "q2f";
    case quant_value::q8s: return "q8s";
    case quant_value::q4s: return "q4s";
    case quant_value::q2s: return "q2s";
    }
    return "quant_value(" + std::to_string(static_cast<int>(v)) + ")";
}

std::string to_string(quant_param p)
{
    switch (p) {
    case quant_param::f32: return "f32";
    case quant_param::f16: return "f16";
    case quant_param::bf16: return "bf16";
    case quant_param::ue8m0: return "ue8m0";
    case quant_param::ue4m3: return "ue4m3";
    }
    return "quant_param(" + std::to_string(static_cast<int>(p)) + ")";
}

std::string to_string(const quant_store& s)
{
    switch (s.get_kind()) {
    case quant_store::kind::native: return "native";
    case quant_store::kind::packed_native: return "packed_native(" + std::to_string(s.dim()) + ")";
    case quant_store::kind::packed_u32: return "packed_u32(" + std::to_string(s.dim()) + ")";
    }
    return "quant_store(?)";
}

std::string to_string(const quant_level& l)
{
    if (l.get_kind() == quant_level::kind::tensor) {
        return "tensor";
    }
    std::string out = "block[";
    const auto& b = l.blocks();
    for (std::size_t i = 0; i < b.as_slice().size(); ++i) {
        if (i != 0) {
            out += ',';
        }
        out += std::to_string(b.as_slice()[i]);
    }
    out += "]";
    if (!b.valid()) {
        out += "(len " + std::to_string(b.len()) + ")";
    }
    return out;
}

std::string to_string(const quant_scheme& s)
{
    return to_string(s.value) + ", param " + to_string(s.param) + ", store " +
           to_string(s.store) + ", level " + to_string(s.level) + ", symmetric";
}

} // namespace ruda
