// A torch optimizer's state as tensors keyed by parameter and state name, and its param
// groups' hyper-parameters, read for a snapshot and checked and restored into a fresh optimizer
// (the optimizers themselves are described in torch_optimizer_kinds.cpp).
#include <ruda/optim/torch_optimizer_state.hpp>

#include "../backend/torch_conversions.hpp"
#include "torch_optimizer_kinds.hpp"
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

using detail::kind_of;
using detail::named_tensors;
using detail::option_field;
using detail::optimizer_kind;
using detail::state_parts;
using torch::optim::Optimizer;
using torch::optim::OptimizerOptions;
using torch::optim::OptimizerParamState;

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
