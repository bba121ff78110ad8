// The optimizers libtorch ships, each described once: its state's parts and its
// hyper-parameters, read from and written into torch's own state and options classes.
#include "torch_optimizer_kinds.hpp"

#include <ATen/ops/scalar_tensor.h>
#include <c10/util/Type.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <array>
#include <tuple>
#include <type_traits>
#include <typeinfo>

namespace ruda::detail {
namespace {

template <class T>
bool is(const Optimizer& optimizer)
{
    return typeid(optimizer) == typeid(T);
}

at::Tensor counter(std::int64_t value) { return at::scalar_tensor(value, at::kLong); }

std::int64_t counter_of(const state_parts& parts, std::string_view name)
{
    return parts.find(name)->second.item<std::int64_t>();
}

// A tensor part, or an undefined tensor when the state has none (an optional part).
at::Tensor part(const state_parts& parts, std::string_view name)
{
    const auto found = parts.find(name);
    return found == parts.end() ? at::Tensor{} : found->second;
}

void add_defined(named_tensors& out, std::string name, const at::Tensor& tensor)
{
    if (tensor.defined()) {
        out.emplace_back(std::move(name), tensor);
    }
}

// The betas of Adam and AdamW, a tuple in their options: one field each.
template <class Options, std::size_t I>
double get_beta(const OptimizerOptions& options)
{
    return std::get<I>(static_cast<const Options&>(options).betas());
}

template <class Options, std::size_t I>
void set_beta(OptimizerOptions& options, double value)
{
    std::get<I>(static_cast<Options&>(options).betas()) = value;
}

// A number or bool field of `Options`, which TORCH_ARG gives a getter returning a reference.
#define RUDA_OPTION(Options, member)                                                          \
    option_field                                                                              \
    {                                                                                         \
        #member,                                                                              \
            [](const OptimizerOptions& o) {                                                   \
                return static_cast<double>(static_cast<const Options&>(o).member());          \
            },                                                                                \
            [](OptimizerOptions& o, double v) {                                               \
                auto& field = static_cast<Options&>(o).member();                              \
                field = static_cast<std::remove_reference_t<decltype(field)>>(v);             \
            }                                                                                 \
    }

// SGD: a momentum buffer once momentum is used.
constexpr std::array<std::string_view, 1> sgd_parts{"momentum_buffer"};
const std::array<option_field, 5> sgd_options{
    RUDA_OPTION(torch::optim::SGDOptions, lr), RUDA_OPTION(torch::optim::SGDOptions, momentum),
    RUDA_OPTION(torch::optim::SGDOptions, dampening),
    RUDA_OPTION(torch::optim::SGDOptions, weight_decay),
    RUDA_OPTION(torch::optim::SGDOptions, nesterov)};

named_tensors read_sgd(const OptimizerParamState& state)
{
    named_tensors out;
    const auto& s = static_cast<const torch::optim::SGDParamState&>(state);
    add_defined(out, "momentum_buffer", s.momentum_buffer());
    return out;
}

std::unique_ptr<OptimizerParamState> make_sgd(const state_parts& parts)
{
    auto state = std::make_unique<torch::optim::SGDParamState>();
    state->momentum_buffer(part(parts, "momentum_buffer"));
    return state;
}

// Adam and AdamW: a step count and two moving averages, and the maximum with amsgrad.
constexpr std::array<std::string_view, 3> adam_required{"step", "exp_avg", "exp_avg_sq"};
constexpr std::array<std::string_view, 1> adam_optional{"max_exp_avg_sq"};
constexpr std::array<std::string_view, 1> step_counter{"step"};

template <class State>
named_tensors read_adam(const OptimizerParamState& state)
{
    named_tensors out;
    const auto& s = static_cast<const State&>(state);
    out.emplace_back("step", counter(s.step()));
    add_defined(out, "exp_avg", s.exp_avg());
    add_defined(out, "exp_avg_sq", s.exp_avg_sq());
    add_defined(out, "max_exp_avg_sq", s.max_exp_avg_sq());
    return out;
}

template <class State>
std::unique_ptr<OptimizerParamState> make_adam(const state_parts& parts)
{
    auto state = std::make_unique<State>();
    state->step(counter_of(parts, "step"));
    state->exp_avg(part(parts, "exp_avg"));
    state->exp_avg_sq(part(parts, "exp_avg_sq"));
    state->max_exp_avg_sq(part(parts, "max_exp_avg_sq"));
    return state;
}

template <class Options>
const std::array<option_field, 6> adam_options{
    RUDA_OPTION(Options, lr),
    option_field{"beta1", &get_beta<Options, 0>, &set_beta<Options, 0>},
    option_field{"beta2", &get_beta<Options, 1>, &set_beta<Options, 1>},
    RUDA_OPTION(Options, eps),
    RUDA_OPTION(Options, weight_decay),
    RUDA_OPTION(Options, amsgrad)};

// RMSprop: a step count and a squared average, a momentum buffer and a mean with their options.
constexpr std::array<std::string_view, 2> rmsprop_required{"step", "square_avg"};
constexpr std::array<std::string_view, 2> rmsprop_optional{"momentum_buffer", "grad_avg"};
const std::array<option_field, 6> rmsprop_options{
    RUDA_OPTION(torch::optim::RMSpropOptions, lr),
    RUDA_OPTION(torch::optim::RMSpropOptions, alpha),
    RUDA_OPTION(torch::optim::RMSpropOptions, eps),
    RUDA_OPTION(torch::optim::RMSpropOptions, weight_decay),
    RUDA_OPTION(torch::optim::RMSpropOptions, momentum),
    RUDA_OPTION(torch::optim::RMSpropOptions, centered)};

named_tensors read_rmsprop(const OptimizerParamState& state)
{
    named_tensors out;
    const auto& s = static_cast<const torch::optim::RMSpropParamState&>(state);
    out.emplace_back("step", counter(s.step()));
    add_defined(out, "square_avg", s.square_avg());
    add_defined(out, "momentum_buffer", s.momentum_buffer());
    add_defined(out, "grad_avg", s.grad_avg());
    return out;
}

std::unique_ptr<OptimizerParamState> make_rmsprop(const state_parts& parts)
{
    auto state = std::make_unique<torch::optim::RMSpropParamState>();
    state->step(counter_of(parts, "step"));
    state->square_avg(part(parts, "square_avg"));
    state->momentum_buffer(part(parts, "momentum_buffer"));
    state->grad_avg(part(parts, "grad_avg"));
    return state;
}

// Adagrad: a step count and a sum, made for every parameter when the optimizer is.
constexpr std::array<std::string_view, 2> adagrad_required{"step", "sum"};
const std::array<option_field, 5> adagrad_options{
    RUDA_OPTION(torch::optim::AdagradOptions, lr),
    RUDA_OPTION(torch::optim::AdagradOptions, lr_decay),
    RUDA_OPTION(torch::optim::AdagradOptions, weight_decay),
    RUDA_OPTION(torch::optim::AdagradOptions, initial_accumulator_value),
    RUDA_OPTION(torch::optim::AdagradOptions, eps)};

named_tensors read_adagrad(const OptimizerParamState& state)
{
    named_tensors out;
    const auto& s = static_cast<const torch::optim::AdagradParamState&>(state);
    out.emplace_back("step", counter(s.step()));
    add_defined(out, "sum", s.sum());
    return out;
}

std::unique_ptr<OptimizerParamState> make_adagrad(const state_parts& parts)
{
    auto state = std::make_unique<torch::optim::AdagradParamState>();
    state->step(counter_of(parts, "step"));
    state->sum(part(parts, "sum"));
    return state;
}

#undef RUDA_OPTION

const std::array<optimizer_kind, 5> kinds{{
    {"SGD", &is<torch::optim::SGD>, {}, sgd_parts, {}, &read_sgd, &make_sgd, sgd_options},
    {"Adam", &is<torch::optim::Adam>, adam_required, adam_optional, step_counter,
     &read_adam<torch::optim::AdamParamState>, &make_adam<torch::optim::AdamParamState>,
     adam_options<torch::optim::AdamOptions>},
    {"AdamW", &is<torch::optim::AdamW>, adam_required, adam_optional, step_counter,
     &read_adam<torch::optim::AdamWParamState>, &make_adam<torch::optim::AdamWParamState>,
     adam_options<torch::optim::AdamWOptions>},
    {"RMSprop", &is<torch::optim::RMSprop>, rmsprop_required, rmsprop_optional, step_counter,
     &read_rmsprop, &make_rmsprop, rmsprop_options},
    {"Adagrad", &is<torch::optim::Adagrad>, adagrad_required, {}, step_counter, &read_adagrad,
     &make_adagrad, adagrad_options},
}};

} // namespace

result<const optimizer_kind*> kind_of(const Optimizer& optimizer)
{
    for (const optimizer_kind& kind : kinds) {
        if (kind.matches(optimizer)) {
            return &kind;
        }
    }
    return error{errc::unsupported_optimizer,
                 "ruda reads the state of SGD, Adam, AdamW, RMSprop and Adagrad, not of " +
                     c10::demangle(typeid(optimizer).name())};
}

} // namespace ruda::detail
