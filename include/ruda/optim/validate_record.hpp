// Every check a gradient record must pass before anything is allocated or uploaded from it:
// the reference implementation's checks, in its order, each with its own error code.
#pragma once

#include <ruda/error.hpp>
#include <ruda/optim/gradients_params_record.hpp>

namespace ruda {

/// Checks every entry, in order: a duplicate id (`duplicate_param_id`); dtype compatibility,
/// equal schemes if quantized, both float otherwise (`invalid_dtype`); the shape product
/// (`shape_overflow`); the quantized layout (`invalid_quantization`, its byte count
/// `byte_count_mismatch`); for float data the exact stored byte count
/// (`byte_count_mismatch`) and the restored byte count (`allocation_too_large` beyond the
/// addressable size). Messages name the parameter by its decimal id. Allocates nothing in
/// proportion to what the record claims.
[[nodiscard]] result<void> validate_gradients_record(const gradients_params_record& record);

/// The same checks for a checkpoint's tensor group other than the gradients (weights,
/// optimizer state, generator states), which may also hold integer and bool tensors stored as
/// they are: an entry whose original and stored dtypes are one and the same such dtype passes
/// the dtype check, and its byte count is checked like a float's.
[[nodiscard]] result<void> validate_tensor_group(const gradients_params_record& record);

} // namespace ruda
