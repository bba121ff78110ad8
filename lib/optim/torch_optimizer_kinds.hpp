// The optimizers libtorch ships, each described once: the parts of a parameter's state
// (tensors like the parameter, step counts as 0-d int64 tensors), how to read and make that
// state, and the hyper-parameters of its param groups. Internal to ruda::torch.
#pragma once

#include <ruda/error.hpp>

#include <torch/optim/optimizer.h>

#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ruda::detail {

using torch::optim::Optimizer;
using torch::optim::OptimizerOptions;
using torch::optim::OptimizerParamState;

// A parameter's state as named tensors: float states, and counters as 0-d int64 tensors.
using named_tensors = std::vector<std::pair<std::string, at::Tensor>>;
using state_parts = std::map<std::string, at::Tensor, std::less<>>;

// One hyper-parameter: its name, and how to read and set it in the optimizer's options.
struct option_field {
    std::string_view name;
    double (*get)(const OptimizerOptions&);
    void (*set)(OptimizerOptions&, double);
};

// One kind of optimizer: its name, its state's parts (tensors like the parameter, counters
// that are 0-d int64), how to read and make a parameter's state, and its hyper-parameters.
struct optimizer_kind {
    std::string_view name;
    bool (*matches)(const Optimizer&);
    std::span<const std::string_view> required;
    std::span<const std::string_view> optional;
    std::span<const std::string_view> counters; // which parts are step counts
    named_tensors (*read)(const OptimizerParamState&);
    std::unique_ptr<OptimizerParamState> (*make)(const state_parts&);
    std::span<const option_field> options;
};

/// The kind of `optimizer`; `errc::unsupported_optimizer` naming its type for one ruda does not
/// know.
result<const optimizer_kind*> kind_of(const Optimizer& optimizer);

} // namespace ruda::detail
