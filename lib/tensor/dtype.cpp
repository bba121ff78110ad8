// Sizes and names of dtypes (Burn v0.21 `DType`).
#include <ruda/tensor/dtype.hpp>

#include <ostream>

namespace ruda {

std::optional<dtype> dtype::from_kind(kind k) noexcept
{
    if (k == kind::qfloat || k > kind::qfloat) {
        return std::nullopt;
    }
    return dtype{k};
}

std::size_t dtype::size() const noexcept
{
    switch (kind_) {
    case kind::f64:
    case kind::i64:
    case kind::u64: return 8;
    case kind::f32:
    case kind::flex32:
    case kind::i32:
    case kind::u32: return 4;
    case kind::f16:
    case kind::bf16:
    case kind::i16:
    case kind::u16: return 2;
    case kind::i8:
    case kind::u8: return 1;
    case kind::boolean: return bool_store_ == ruda::bool_store::u32 ? 4 : 1;
    case kind::qfloat:
        switch (scheme_.store.get_kind()) {
        case quant_store::kind::packed_u32: return 4;
        case quant_store::kind::packed_native: return scheme_.value == quant_value::e2m1 ? 1 : 0;
        case quant_store::kind::native: return size_bits(scheme_.value) == 8 ||
                                                       scheme_.value == quant_value::e2m1
                                                   ? 1
                                                   : 0;
        }
    }
    return 0;
}

std::string to_string(dtype::kind k)
{
    switch (k) {
    case dtype::kind::f64: return "f64";
    case dtype::kind::f32: return "f32";
    case dtype::kind::flex32: return "flex32";
    case dtype::kind::f16: return "f16";
    case dtype::kind::bf16: return "bf16";
    case dtype::kind::i64: return "i64";
    case dtype::kind::i32: return "i32";
    case dtype::kind::i16: return "i16";
    case dtype::kind::i8: return "i8";
    case dtype::kind::u64: return "u64";
    case dtype::kind::u32: return "u32";
    case dtype::kind::u16: return "u16";
    case dtype::kind::u8: return "u8";
    case dtype::kind::boolean: return "bool";
    case dtype::kind::qfloat: return "qfloat";
    }
    return "dtype(" + std::to_string(static_cast<int>(k)) + ")";
}

std::string to_string(const dtype& d)
{
    switch (d.get_kind()) {
    case dtype::kind::boolean:
        switch (d.get_bool_store()) {
        case bool_store::native: return "bool(native)";
        case bool_store::u8: return "bool(u8)";
        case bool_store::u32: return "bool(u32)";
        }
        return "bool(?)";
    case dtype::kind::qfloat: return "qfloat(" + to_string(*d.scheme()) + ")";
    default: return to_string(d.get_kind());
    }
}

std::ostream& operator<<(std::ostream& os, const dtype& d) { return os << to_string(d); }

} // namespace ruda
