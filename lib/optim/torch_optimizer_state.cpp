// The optimizers libtorch ships, each described once: its state's parts and its
// hyper-parameters, read from and written into torch's own state and options classes.
#include <ruda/optim/torch_optimizer_state.hpp>

#include "../backend/torch_conversions.hpp"
#include "cuda_module_tensors.hpp"
#include "torch_host_copy.hpp"

#include <ruda/backend/torch_backend.hpp>
#include <ruda/optim/validate_record.hpp>

#include <ATen/ops/scalar_tensor.h>
#include <c10/util/Type.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <sstream>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <unordered_map>

namespace ruda {
namespace {

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

bool contains(std::span<const std::string_view> names, std::string_view name)
{
    return std::find(names.begin(), names.end(), name) != names.end();
}

using detail::optimizer_state_key;

// The model's parameter names by their TensorImpl.
std::unordered_map<const c10::TensorImpl*, std::string> names_of(const torch::nn::Module& model)
{
    std::unordered_map<const c10::TensorImpl*, std::string> names;
    for (const auto& item : model.named_parameters(/*recurse=*/true)) {
        names.emplace(item.value().unsafeGetTensorImpl(), item.key());
    }
    return names;
}

// Every optimizer parameter's name, group by group; `errc::unknown_parameter` for one that is
// none of the model's.
result<std::vector<std::vector<std::string>>> parameter_names(const Optimizer& optimizer,
                                                              const torch::nn::Module& model)
{
    const auto names = names_of(model);
    std::vector<std::vector<std::string>> groups;
    for (std::size_t g = 0; g < optimizer.param_groups().size(); ++g) {
        std::vector<std::string> group;
        const auto& params = optimizer.param_groups()[g].params();
        for (std::size_t k = 0; k < params.size(); ++k) {
            const auto found = names.find(params[k].unsafeGetTensorImpl());
            if (found == names.end()) {
                return error{errc::unknown_parameter,
                             "The optimizer's parameter " + std::to_string(k) + " of param group " +
                                 std::to_string(g) + " (shape " + c10::str(params[k].sizes()) +
                                 ") is none of the model's parameters"};
            }
            group.push_back(found->second);
        }
        groups.push_back(std::move(group));
    }
    return groups;
}

std::vector<std::pair<std::string, double>> options_of(const optimizer_kind& kind,
                                                       const OptimizerOptions& options)
{
    std::vector<std::pair<std::string, double>> out;
    for (const option_field& field : kind.options) {
        out.emplace_back(std::string{field.name}, field.get(options));
    }
    return out;
}

error mismatch(const std::string& why)
{
    return error{errc::optimizer_mismatch, "Optimizer state: " + why};
}

// Puts one float state tensor, named, into the container a snapshot reads.
using add_tensor = std::function<result<void>(gradients_params&, const std::string&, at::Tensor)>;

result<optimizer_state> state_of(const Optimizer& optimizer, const torch::nn::Module& model,
                                 const add_tensor& add)
{
    BOOST_OUTCOME_TRY(const optimizer_kind* kind, kind_of(optimizer));
    BOOST_OUTCOME_TRY(auto names, parameter_names(optimizer, model));
    optimizer_state out;
    out.description.type = std::string{kind->name};
    std::vector<gradient_entry> counters;
    const auto& states = optimizer.state();
    for (std::size_t g = 0; g < names.size(); ++g) {
        const auto& group = optimizer.param_groups()[g];
        const auto& params = group.params();
        for (std::size_t k = 0; k < params.size(); ++k) {
            const auto found = states.find(optimizer_state_key(states, params[k]));
            if (found == states.end() || !found->second) {
                continue;
            }
            for (auto& [part_name, tensor] : kind->read(*found->second)) {
                const std::string name = names[g][k] + "." + part_name;
                if (contains(kind->counters, part_name)) {
                    BOOST_OUTCOME_TRY(auto entry, detail::host_copy(name, tensor));
                    counters.push_back(std::move(entry));
                    continue;
                }
                if (auto added = add(out.tensors, name, tensor); !added) {
                    return error{added.error().code(),
                                 "Optimizer state " + name + ": " + added.error().message()};
                }
            }
        }
        out.description.groups.push_back(
            {std::move(names[g]), group.has_options() ? options_of(*kind, group.options())
                                                      : options_of(*kind, optimizer.defaults())});
    }
    std::sort(counters.begin(), counters.end(),
              [](const gradient_entry& a, const gradient_entry& b) { return a.id < b.id; });
    out.counters = gradients_params_record{std::move(counters)};
    return out;
}

} // namespace

result<optimizer_state> optimizer_state_of(const Optimizer& optimizer,
                                           const torch::nn::Module& model)
{
    return state_of(optimizer, model,
                    [](gradients_params& tensors, const std::string& name,
                       at::Tensor tensor) -> result<void> {
                        BOOST_OUTCOME_TRY(auto wrapped,
                                          torch_backend::float_tensor::wrap(std::move(tensor)));
                        tensors.insert<torch_backend>(
                            param_id::from_name(name),
                            tensor_primitive<torch_backend>{std::move(wrapped)}, name);
                        return success();
                    });
}

result<optimizer_state> optimizer_state_of(const Optimizer& optimizer,
                                           const torch::nn::Module& model,
                                           const cuda_module_device& on)
{
    std::optional<cuda_stream> producer;
    return state_of(optimizer, model,
                    [&](gradients_params& tensors, const std::string& name,
                        at::Tensor tensor) -> result<void> {
                        if (!producer) {
                            BOOST_OUTCOME_TRY(producer, detail::stream_of(on));
                        }
                        BOOST_OUTCOME_TRY(auto borrowed,
                                          detail::borrow(std::move(tensor), on, *producer));
                        tensors.insert<cuda_backend>(param_id::from_name(name),
                                                     std::move(borrowed), name);
                        return success();
                    });
}

result<void> put_optimizer_state(checkpoint& contents, gradients_params_record snapshot,
                                 const optimizer_state& state)
{
    std::vector<gradient_entry> entries = std::move(snapshot).into_entries();
    const auto& counters = state.counters.entries();
    entries.insert(entries.end(), counters.begin(), counters.end());
    std::sort(entries.begin(), entries.end(),
              [](const gradient_entry& a, const gradient_entry& b) { return a.id < b.id; });
    BOOST_OUTCOME_TRY(contents.put_group(std::string{optimizer_group},
                                         gradients_params_record{std::move(entries)}));
    return contents.put(std::string{optimizer_section}, state.description);
}

namespace {

// One parameter's state to be made: the parameter and its parts, on its device.
struct planned_state {
    at::Tensor parameter;
    state_parts parts;
};

// The checkpoint's hyper-parameters against the optimizer's kind: each field once, every one
// the kind has.
result<void> check_fields(const optimizer_kind& kind, const optimizer_param_group& saved,
                          std::size_t g)
{
    for (const option_field& field : kind.options) {
        const auto count = std::count_if(saved.options.begin(), saved.options.end(),
                                         [&](const auto& o) { return o.first == field.name; });
        if (count != 1) {
            return mismatch("param group " + std::to_string(g) + " of the checkpoint has " +
                            (count == 0 ? "no " : "several ") + std::string{field.name});
        }
    }
    if (saved.options.size() != kind.options.size()) {
        return mismatch("param group " + std::to_string(g) + " of the checkpoint has options " +
                        std::string{kind.name} + " lacks");
    }
    return success();
}

double saved_value(const optimizer_param_group& saved, std::string_view name)
{
    return std::find_if(saved.options.begin(), saved.options.end(),
                        [&](const auto& o) { return o.first == name; })
        ->second;
}

std::string joined(const std::vector<std::string>& names)
{
    std::string out;
    for (const std::string& name : names) {
        out += (out.empty() ? "" : ", ") + name;
    }
    return "[" + out + "]";
}

// Makes a state tensor for a parameter from an entry: on the parameter's device.
using make_tensor = std::function<result<at::Tensor>(const gradient_entry&, const at::Tensor&)>;

result<void> restore_state(const checkpoint& contents, Optimizer& optimizer,
                           const torch::nn::Module& model, hyperparameters mode,
                           const make_tensor& make)
{
    BOOST_OUTCOME_TRY(const optimizer_kind* kind, kind_of(optimizer));
    optimizer_description saved;
    BOOST_OUTCOME_TRY(contents.get(optimizer_section, saved));
    if (saved.type != kind->name) {
        return mismatch("the checkpoint holds the state of " + saved.type +
                        ", the optimizer is " + std::string{kind->name});
    }
    BOOST_OUTCOME_TRY(const auto names, parameter_names(optimizer, model));
    if (saved.groups.size() != names.size()) {
        return mismatch("the checkpoint has " + std::to_string(saved.groups.size()) +
                        " param groups, the optimizer " + std::to_string(names.size()));
    }
    // Each param group: the same parameters, in order, and the hyper-parameters.
    std::unordered_map<std::string, at::Tensor> by_name;
    for (std::size_t g = 0; g < names.size(); ++g) {
        if (saved.groups[g].parameters != names[g]) {
            return mismatch("param group " + std::to_string(g) + " holds " + joined(names[g]) +
                            ", the checkpoint's " + joined(saved.groups[g].parameters));
        }
        BOOST_OUTCOME_TRY(check_fields(*kind, saved.groups[g], g));
        const auto& group = optimizer.param_groups()[g];
        const OptimizerOptions& options =
            group.has_options() ? group.options() : optimizer.defaults();
        for (const option_field& field : kind->options) {
            const double want = saved_value(saved.groups[g], field.name);
            if (mode == hyperparameters::check && field.get(options) != want) {
                return mismatch("param group " + std::to_string(g) + " has " +
                                std::string{field.name} + " " +
                                c10::str(field.get(options)) + ", the checkpoint " +
                                c10::str(want));
            }
        }
        for (std::size_t k = 0; k < names[g].size(); ++k) {
            by_name.emplace(names[g][k], group.params()[k]);
        }
    }
    // Every entry to its parameter and part, checked and made into a tensor on its device.
    std::map<std::string, planned_state> plan;
    if (const gradients_params_record* tensors = contents.group(optimizer_group)) {
        if (auto valid = validate_tensor_group(*tensors); !valid) {
            return error{valid.error().code(), "Optimizer state: " + valid.error().message()};
        }
        for (const gradient_entry& entry : tensors->entries()) {
            const auto dot = entry.name.rfind('.');
            const std::string parameter = entry.name.substr(0, dot == std::string::npos ? 0 : dot);
            const std::string part_name =
                dot == std::string::npos ? entry.name : entry.name.substr(dot + 1);
            const auto found = by_name.find(parameter);
            if (found == by_name.end()) {
                return error{errc::unknown_parameter,
                             "Optimizer state " + entry.name + ": " +
                                 (parameter.empty() ? std::string{"no parameter"}
                                                    : parameter) +
                                 " is none of the optimizer's parameters"};
            }
            if (!contains(kind->required, part_name) && !contains(kind->optional, part_name)) {
                return mismatch(entry.name + ": " + std::string{kind->name} + " has no state " +
                                part_name);
            }
            const at::Tensor& param = found->second;
            const bool is_counter = contains(kind->counters, part_name);
            const auto want_type = is_counter ? std::optional{dtype::i64()}
                                              : detail::ruda_dtype(param.scalar_type());
            if (!want_type || entry.dtype != *want_type) {
                return error{errc::invalid_dtype,
                             "Optimizer state " + entry.name + ": dtype " +
                                 to_string(entry.dtype) + ", not " +
                                 (want_type ? to_string(*want_type) : std::string{"known"})};
            }
            const shape want_shape = is_counter ? shape{} : detail::ruda_shape(param);
            if (entry.data.shape() != want_shape) {
                return error{errc::shape_mismatch,
                             "Optimizer state " + entry.name + ": shape " +
                                 to_string(entry.data.shape()) + ", not " + to_string(want_shape)};
            }
            auto tensor = is_counter ? detail::tensor_of(entry, c10::Device{c10::kCPU})
                                     : make(entry, param);
            if (!tensor) {
                return error{tensor.error().code(),
                             "Optimizer state " + entry.name + ": " + tensor.error().message()};
            }
            auto& planned = plan[parameter];
            planned.parameter = param;
            planned.parts.emplace(part_name, std::move(tensor).value());
        }
    }
    for (const auto& [parameter, planned] : plan) {
        for (const std::string_view required : kind->required) {
            if (!planned.parts.contains(required)) {
                return error{errc::malformed_record, "Optimizer state of " + parameter +
                                                         " has no " + std::string{required}};
            }
        }
    }

    // Checked: now the optimizer changes.
    if (mode == hyperparameters::restore) {
        for (std::size_t g = 0; g < names.size(); ++g) {
            auto& group = optimizer.param_groups()[g];
            OptimizerOptions& options =
                group.has_options() ? group.options() : optimizer.defaults();
            for (const option_field& field : kind->options) {
                field.set(options, saved_value(saved.groups[g], field.name));
            }
        }
    }
    auto& states = optimizer.state();
    for (const auto& [name, parameter] : by_name) {
        states.erase(optimizer_state_key(states, parameter));
    }
    for (auto& [name, planned] : plan) {
        states[optimizer_state_key(states, planned.parameter)] = kind->make(planned.parts);
    }
    return success();
}

} // namespace

result<void> restore_optimizer_state(const checkpoint& contents, Optimizer& optimizer,
                                     const torch::nn::Module& model, hyperparameters mode)
{
    return restore_state(contents, optimizer, model, mode,
                         [](const gradient_entry& entry, const at::Tensor& parameter) {
                             return detail::tensor_of(entry, parameter.device());
                         });
}

result<void> restore_optimizer_state(const checkpoint& contents, Optimizer& optimizer,
                                     const torch::nn::Module& model, const cuda_module_device& on,
                                     hyperparameters mode)
{
    BOOST_OUTCOME_TRY(const cuda_stream consumer, detail::stream_of(on));
    bool filled_on_upload_stream = false;
    BOOST_OUTCOME_TRY(restore_state(
        contents, optimizer, model, mode,
        [&](const gradient_entry& entry, const at::Tensor& parameter) -> result<at::Tensor> {
            BOOST_OUTCOME_TRY(auto values, entry.data.convert(entry.dtype));
            return detail::new_device_tensor(std::move(values), parameter, on, consumer,
                                             filled_on_upload_stream);
        }));
    if (filled_on_upload_stream) {
        BOOST_OUTCOME_TRY(on.device.order_after_uploads(consumer));
    }
    return success();
}

} // namespace ruda
