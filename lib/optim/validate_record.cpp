// The restore checks of the reference implementation, with checked arithmetic throughout.
#include <ruda/optim/validate_record.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <algorithm>
#include <unordered_set>

namespace ruda {
namespace {

constexpr std::size_t max_allocation =
    static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max());

std::optional<std::size_t> checked_mul(std::size_t a, std::size_t b)
{
    std::size_t product = 0;
    if (__builtin_mul_overflow(a, b, &product)) {
        return std::nullopt;
    }
    return product;
}

std::size_t div_ceil(std::size_t a, std::size_t b) { return a / b + (a % b != 0 ? 1 : 0); }

error invalid_quantization(param_id id, const std::string& reason)
{
    return {errc::invalid_quantization,
            "Invalid quantized gradient for parameter " + to_string(id) + ": " + reason};
}

// `exact_other`: whether a dtype that is neither float nor quantized (an integer or bool)
// may be stored as itself, as tensor groups other than the gradients may.
bool compatible(const dtype& original, const dtype& stored, bool exact_other)
{
    if (original.is_quantized() || stored.is_quantized()) {
        return original.is_quantized() && stored.is_quantized() &&
               *original.scheme() == *stored.scheme();
    }
    if (exact_other && !original.is_float() && !stored.is_float()) {
        return original == stored;
    }
    return original.is_float() && stored.is_float();
}

// How many storage values the packed or native layout needs, and their size.
result<std::size_t> values_bytes(param_id id, const tensor_data& data,
                                 const quant_scheme& scheme, std::size_t num_elements)
{
    if (scheme.store.get_kind() == quant_store::kind::native) {
        return num_elements;
    }
    const std::size_t rank = data.shape().size();
    if (scheme.store.dim() >= rank) {
        return invalid_quantization(id, "packing dimension exceeds tensor rank");
    }
    const std::size_t axis = rank - scheme.store.dim() - 1;
    std::size_t value_size = 4;
    if (scheme.store.get_kind() == quant_store::kind::packed_native) {
        if (scheme.value != quant_value::e2m1) {
            return invalid_quantization(id, "value type does not support native packing");
        }
        value_size = 1;
    }
    const std::size_t num_quants = scheme.num_quants();
    if (num_quants == 0) {
        return invalid_quantization(id, "value type does not fit its storage");
    }
    std::optional<std::size_t> count = 1;
    for (std::size_t d = 0; d < rank && count; ++d) {
        const std::size_t size = data.shape()[d];
        count = checked_mul(*count, d == axis ? div_ceil(size, num_quants) : size);
    }
    if (!count) {
        return invalid_quantization(id, "packed value count overflows");
    }
    const auto bytes = checked_mul(*count, value_size);
    if (!bytes) {
        return invalid_quantization(id, "packed value byte count overflows");
    }
    return *bytes;
}

result<void> validate_quantized(param_id id, const tensor_data& data,
                                const quant_scheme& scheme, std::size_t num_elements)
{
    const std::string name = to_string(id);
    const bool blocked = scheme.level.get_kind() == quant_level::kind::block;
    if (blocked && !scheme.level.blocks().valid()) {
        return invalid_quantization(id, "quantization block size has more than " +
                       std::to_string(block_size::max_dims) + " dimensions");
    }
    BOOST_OUTCOME_TRY(const std::size_t value_bytes, values_bytes(id, data, scheme, num_elements));

    std::optional<std::size_t> params_count = 1;
    if (blocked) {
        const std::size_t rank = data.shape().size();
        const auto block_dims = scheme.level.blocks().to_dim_vec(rank);
        for (const std::size_t block : block_dims) {
            if (block == 0) {
                return invalid_quantization(id, "quantization block dimension is zero");
            }
        }
        for (std::size_t d = 0; d < rank && params_count; ++d) {
            params_count = checked_mul(*params_count, div_ceil(data.shape()[d], block_dims[d]));
        }
        if (!params_count) {
            return invalid_quantization(id, "scale count overflows");
        }
    }
    const auto params_bytes = checked_mul(*params_count, size_bytes(scheme.param));
    std::size_t required = 0;
    if (!params_bytes || __builtin_add_overflow(value_bytes, *params_bytes, &required)) {
        return invalid_quantization(id, "value and scale byte count overflows");
    }
    if (required > max_allocation) {
        return error{errc::allocation_too_large,
                     "Invalid quantized gradient for parameter " + name +
                         ": value and scale allocation exceeds addressable size"};
    }
    const bool exact = scheme.param == quant_param::f32;
    const std::size_t got = data.bytes().size();
    if (got < required || (exact && got != required)) {
        return error{errc::byte_count_mismatch,
                     "Invalid quantized gradient byte count for parameter " + name +
                         ": expected " + (exact ? "" : "at least ") + std::to_string(required) +
                         ", got " + std::to_string(got)};
    }
    return success();
}

result<void> validate_float(param_id id, const gradient_entry& entry,
                            std::size_t num_elements)
{
    const auto name = [id] { return to_string(id); };
    const auto stored = checked_mul(num_elements, entry.data.dtype().size());
    if (!stored) {
        return error{errc::shape_overflow,
                     "Stored gradient byte count overflows for parameter " + name()};
    }
    if (entry.data.bytes().size() != *stored) {
        return error{errc::byte_count_mismatch,
                     "Invalid gradient byte count for parameter " + name() + ": expected " +
                         std::to_string(*stored) + ", got " +
                         std::to_string(entry.data.bytes().size())};
    }
    const auto restored = checked_mul(num_elements, entry.dtype.size());
    if (!restored) {
        return error{errc::shape_overflow,
                     "Restored gradient byte count overflows for parameter " + name()};
    }
    if (*restored > max_allocation) {
        return error{errc::allocation_too_large,
                     "Restored gradient allocation exceeds addressable size for parameter " +
                         name()};
    }
    return success();
}

result<void> validate_record(const gradients_params_record& record, bool exact_other)
{
    // Snapshots and checkpoint files list ids in ascending order, which has no duplicate;
    // only another order needs the set.
    const auto& entries = record.entries();
    const bool ascending = std::adjacent_find(entries.begin(), entries.end(),
                                              [](const gradient_entry& a, const gradient_entry& b) {
                                                  return a.id >= b.id;
                                              }) == entries.end();
    std::unordered_set<param_id> seen;
    if (!ascending) {
        seen.reserve(entries.size());
    }
    for (const gradient_entry& entry : entries) {
        const param_id id = entry.id;
        if (!ascending && !seen.insert(id).second) {
            return error{errc::duplicate_param_id,
                         "Duplicate gradient parameter ID " + to_string(id)};
        }
        const auto name = [id] { return to_string(id); };
        if (!compatible(entry.dtype, entry.data.dtype(), exact_other)) {
            return error{errc::invalid_dtype, "Invalid gradient dtype for parameter " + name() +
                                                  ": " + to_string(entry.dtype) + ", stored " +
                                                  to_string(entry.data.dtype())};
        }
        const auto num_elements = entry.data.checked_num_elements();
        if (!num_elements) {
            return error{errc::shape_overflow, "Gradient shape overflows for parameter " + name() +
                                                   ": " + to_string(entry.data.shape())};
        }
        const dtype stored = entry.data.dtype(); // a copy: scheme() points into it
        if (const quant_scheme* scheme = stored.scheme()) {
            BOOST_OUTCOME_TRY(validate_quantized(id, entry.data, *scheme, num_elements.value()));
        }
        if (!stored.is_quantized()) {
            BOOST_OUTCOME_TRY(validate_float(id, entry, num_elements.value()));
        }
    }
    return success();
}

} // namespace

result<void> validate_gradients_record(const gradients_params_record& record)
{
    return validate_record(record, false);
}

result<void> validate_tensor_group(const gradients_params_record& record)
{
    return validate_record(record, true);
}

} // namespace ruda
