// A torch module's parameters by id, as from_module and the restores look them up. Shared by
// ruda::torch's sources; internal.
#pragma once

#include <ruda/error.hpp>
#include <ruda/optim/param_id.hpp>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <string>
#include <unordered_map>

namespace ruda::detail {

struct named_parameter {
    std::string name;
    at::Tensor tensor;
};

/// "parameter fc1.weight (id)", as every message about one names it.
[[nodiscard]] std::string label(const std::string& name, param_id id);

/// `why`, its message prefixed with the parameter's label.
[[nodiscard]] error about(const named_parameter& parameter, param_id id, const error& why);

/// The module's parameters by `param_id::from_name` of their names; two names with one id are
/// `errc::duplicate_param_id` naming both.
[[nodiscard]] result<std::unordered_map<param_id, named_parameter>>
parameters_by_id(const torch::nn::Module& module);

} // namespace ruda::detail
