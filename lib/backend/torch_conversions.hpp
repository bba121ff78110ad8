// Between torch's and ruda's descriptions of a tensor: dtypes, shapes, and host copies of
// tensors of any dtype both have. Shared by ruda::torch's sources; internal.
#pragma once

#include <ruda/error.hpp>
#include <ruda/tensor/dtype.hpp>
#include <ruda/tensor/tensor_data.hpp>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace ruda::detail {

inline std::optional<dtype> ruda_float_dtype(c10::ScalarType type)
{
    switch (type) {
    case c10::ScalarType::Double: return dtype::f64();
    case c10::ScalarType::Float: return dtype::f32();
    case c10::ScalarType::Half: return dtype::f16();
    case c10::ScalarType::BFloat16: return dtype::bf16();
    default: return std::nullopt;
    }
}

inline std::optional<c10::ScalarType> torch_float_type(dtype type)
{
    switch (type.get_kind()) {
    case dtype::kind::f64: return c10::ScalarType::Double;
    case dtype::kind::f32: return c10::ScalarType::Float;
    case dtype::kind::f16: return c10::ScalarType::Half;
    case dtype::kind::bf16: return c10::ScalarType::BFloat16;
    default: return std::nullopt;
    }
}

/// Every dtype both have: the float ones, the integers and bool.
inline std::optional<dtype> ruda_dtype(c10::ScalarType type)
{
    switch (type) {
    case c10::ScalarType::Long: return dtype::i64();
    case c10::ScalarType::Int: return dtype::i32();
    case c10::ScalarType::Short: return dtype::i16();
    case c10::ScalarType::Char: return dtype::i8();
    case c10::ScalarType::Byte: return dtype::u8();
    case c10::ScalarType::Bool: return dtype::boolean();
    default: return ruda_float_dtype(type);
    }
}

inline std::optional<c10::ScalarType> torch_type(dtype type)
{
    switch (type.get_kind()) {
    case dtype::kind::i64: return c10::ScalarType::Long;
    case dtype::kind::i32: return c10::ScalarType::Int;
    case dtype::kind::i16: return c10::ScalarType::Short;
    case dtype::kind::i8: return c10::ScalarType::Char;
    case dtype::kind::u8: return c10::ScalarType::Byte;
    case dtype::kind::boolean:
        if (type.get_bool_store() != bool_store::native) {
            return std::nullopt;
        }
        return c10::ScalarType::Bool;
    default: return torch_float_type(type);
    }
}

inline result<std::vector<std::int64_t>> torch_sizes(const shape& dims)
{
    std::vector<std::int64_t> sizes;
    sizes.reserve(dims.size());
    for (const std::size_t d : dims) {
        if (d > static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max())) {
            return error{errc::shape_overflow,
                         "torch backend: dimension " + std::to_string(d) + " exceeds int64"};
        }
        sizes.push_back(static_cast<std::int64_t>(d));
    }
    return sizes;
}

inline shape ruda_shape(const at::Tensor& tensor)
{
    shape dims;
    dims.reserve(static_cast<std::size_t>(tensor.dim()));
    for (const std::int64_t d : tensor.sizes()) {
        dims.push_back(static_cast<std::size_t>(d));
    }
    return dims;
}

} // namespace ruda::detail
