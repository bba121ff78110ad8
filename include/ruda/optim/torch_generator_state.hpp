// The states of torch's default random generators (the CPU's, and each CUDA device's where
// libtorch has CUDA) as tensors, and back: what makes dropout, shuffling and sampling after a
// resume the same as in the uninterrupted run. Part of `ruda::torch`.
#pragma once

#include <ruda/error.hpp>
#include <ruda/optim/gradients_params_record.hpp>

#include <string_view>

namespace ruda {

/// The checkpoint group that holds the generators' states.
inline constexpr std::string_view generators_group = "rng";

/// Each default generator's state, copied now: "cpu", then "cuda:0", "cuda:1"... where
/// libtorch has CUDA, as u8 tensors of the sizes this libtorch uses (5056 bytes for the CPU's
/// in libtorch 1.13), each named so and keyed by `param_id::from_name` of that name.
[[nodiscard]] result<gradients_params_record> generator_states();

/// Sets each generator `states` names to its state; every entry is checked first: a name that
/// is no generator of this process (`errc::unknown_parameter`: "cuda:3" on a machine with two
/// GPUs, or without CUDA), a dtype other than u8 (`errc::invalid_dtype`), a size other than
/// this libtorch's state (`errc::byte_count_mismatch`, naming both sizes).
[[nodiscard]] result<void> restore_generator_states(const gradients_params_record& states);
/// Every check `restore_generator_states` makes, changing nothing.
[[nodiscard]] result<void> check_generator_states(const gradients_params_record& states);

} // namespace ruda
