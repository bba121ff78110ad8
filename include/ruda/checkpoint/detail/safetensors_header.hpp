// The safetensors header: the JSON that names every tensor, its dtype, shape and byte range,
// read by the format's own grammar and checked in full before anything is allocated. Its
// own unit, so that it is tested and fuzzed alone.
#pragma once

#include <ruda/error.hpp>
#include <ruda/tensor/dtype.hpp>
#include <ruda/tensor/tensor_data.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ruda::detail {

/// Metadata key "ruda.original_dtype.<tensor name>": the dtype the gradient had before it was
/// stored (flex32 stored as F32).
inline constexpr std::string_view safetensors_original_dtype_key = "ruda.original_dtype.";
/// Metadata key "ruda.id.<tensor name>": the parameter id of a named tensor, where the name
/// alone does not give it.
inline constexpr std::string_view safetensors_id_key = "ruda.id.";

/// One tensor of a header that checked out.
struct safetensors_tensor_plan {
    std::string name;           // the tensor's, in the file
    std::string parameter_name; // the entry's: the tensor's unless it is a decimal id
    std::uint64_t id;
    dtype stored;
    dtype original;
    shape dims;
    std::uint64_t begin; // byte range in the data area
    std::uint64_t end;
};

/// The safetensors name for data of `type` ("F32"); nothing for a type that is no gradient's.
[[nodiscard]] std::optional<std::string_view> safetensors_dtype_name(dtype type);

/// The dtype a safetensors name ("BF16") stands for, or nothing.
[[nodiscard]] std::optional<dtype> safetensors_dtype_from_name(std::string_view name);

/// A canonical decimal u64 ("0", "17"; no sign, no leading zero), or nothing.
[[nodiscard]] std::optional<std::uint64_t> decimal_id(std::string_view text);

/// Reads the header `json` of `source` (named in messages) whose data area holds `data_size`
/// bytes: every tensor a float dtype with a shape whose bytes its range holds, the ranges
/// tiling the data area exactly, names unique and UTF-8, the metadata's ids and original
/// dtypes valid and naming tensors that exist, the parameter ids distinct. Sorted by id.
/// `errc::malformed_record` (saying what was expected where), `errc::invalid_dtype`,
/// `errc::shape_overflow` or `errc::duplicate_param_id`.
[[nodiscard]] result<std::vector<safetensors_tensor_plan>>
parse_safetensors_header(std::string_view json, const std::string& source,
                         std::uint64_t data_size);

} // namespace ruda::detail
