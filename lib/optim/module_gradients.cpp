// Between a torch module's named parameters and gradients_params keyed by their names' ids.
#include <ruda/optim/module_gradients.hpp>

#include "module_parameters.hpp"

#include <torch/csrc/autograd/grad_mode.h>

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ruda {
namespace detail {

std::string label(const std::string& name, param_id id)
{
    return "parameter " + name + " (" + to_string(id) + ")";
}

error about(const named_parameter& parameter, param_id id, const error& why)
{
    return error{why.code(), label(parameter.name, id) + ": " + why.message()};
}

result<std::unordered_map<param_id, named_parameter>>
parameters_by_id(const torch::nn::Module& module)
{
    std::unordered_map<param_id, named_parameter> parameters;
    for (const auto& item : module.named_parameters(/*recurse=*/true)) {
        const param_id id = param_id::from_name(item.key());
        const auto [at, inserted] =
            parameters.try_emplace(id, named_parameter{item.key(), item.value()});
        if (!inserted) {
            return error{errc::duplicate_param_id, "Parameters " + at->second.name + " and " +
                                                       item.key() + " have the same id " +
                                                       to_string(id)};
        }
    }
    return parameters;
}

} // namespace detail

namespace {

using detail::about;
using detail::label;
using detail::named_parameter;
using detail::parameters_by_id;

// The module's tensors chosen by `pick` (a gradient or the value), wrapped for torch_backend.
template <class Pick>
result<gradients_params> collect(const torch::nn::Module& module, Pick pick)
{
    BOOST_OUTCOME_TRY(auto parameters, parameters_by_id(module));
    gradients_params out;
    for (auto& [id, parameter] : parameters) {
        at::Tensor tensor = pick(parameter.tensor);
        if (!tensor.defined()) {
            continue;
        }
        auto wrapped = torch_backend::float_tensor::wrap(std::move(tensor));
        if (!wrapped) {
            return about(parameter, id, wrapped.error());
        }
        out.insert<torch_backend>(id, tensor_primitive<torch_backend>{std::move(wrapped).value()},
                                  parameter.name);
    }
    return out;
}

// Each entry of `tensors` matched to its parameter and checked against it; nothing changes.
result<std::vector<std::pair<at::Tensor*, at::Tensor>>>
match(const gradients_params& tensors, std::unordered_map<param_id, named_parameter>& parameters)
{
    std::vector<std::pair<at::Tensor*, at::Tensor>> matched;
    for (const param_id id : tensors.ids()) {
        const auto found = parameters.find(id);
        if (found == parameters.end()) {
            return error{errc::unknown_parameter,
                         "Parameter " + to_string(id) + " is none of the module's parameters"};
        }
        const named_parameter& parameter = found->second;
        const auto entry = tensors.get<torch_backend>(id);
        const auto* tensor =
            entry ? std::get_if<torch_backend::float_tensor>(&*entry) : nullptr;
        if (tensor == nullptr) {
            return error{errc::backend_mismatch,
                         label(parameter.name, id) +
                             ": the entry is not a float tensor of the torch backend"};
        }
        const at::Tensor& value = tensor->get();
        if (value.scalar_type() != parameter.tensor.scalar_type()) {
            return error{errc::invalid_dtype,
                         label(parameter.name, id) + ": dtype " +
                             std::string{c10::toString(value.scalar_type())} +
                             ", the parameter's " +
                             std::string{c10::toString(parameter.tensor.scalar_type())}};
        }
        if (value.sizes() != parameter.tensor.sizes()) {
            return error{errc::shape_mismatch,
                         label(parameter.name, id) + ": shape " + c10::str(value.sizes()) +
                             ", the parameter's " + c10::str(parameter.tensor.sizes())};
        }
        matched.emplace_back(&found->second.tensor, value);
    }
    return matched;
}

// The values matched to the module's parameters, and every parameter has one.
result<std::vector<std::pair<at::Tensor*, at::Tensor>>>
match_all(const gradients_params& values,
          std::unordered_map<param_id, named_parameter>& parameters)
{
    BOOST_OUTCOME_TRY(auto matched, match(values, parameters));
    if (matched.size() != parameters.size()) {
        for (const auto& [id, parameter] : parameters) {
            if (!values.get<torch_backend>(id)) {
                return error{errc::not_found, "Missing value for " + label(parameter.name, id)};
            }
        }
    }
    return matched;
}

} // namespace

result<gradients_params> from_module(const torch::nn::Module& module)
{
    return collect(module, [](const at::Tensor& parameter) { return parameter.grad(); });
}

result<gradients_params> parameters_from_module(const torch::nn::Module& module)
{
    return collect(module, [](const at::Tensor& parameter) { return parameter.detach(); });
}

result<void> check_gradients(const gradients_params& grads, const torch::nn::Module& module)
{
    BOOST_OUTCOME_TRY(auto parameters, parameters_by_id(module));
    BOOST_OUTCOME_TRY(match(grads, parameters));
    return success();
}

result<void> check_parameters(const gradients_params& values, const torch::nn::Module& module)
{
    BOOST_OUTCOME_TRY(auto parameters, parameters_by_id(module));
    BOOST_OUTCOME_TRY(match_all(values, parameters));
    return success();
}

result<void> restore_gradients(const gradients_params_record& record, torch::nn::Module& module)
{
    BOOST_OUTCOME_TRY(auto grads, gradients_params::from_record<torch_backend>(record, {}));
    return restore_gradients(grads, module);
}

result<void> restore_parameters(const gradients_params_record& record, torch::nn::Module& module)
{
    BOOST_OUTCOME_TRY(auto values, gradients_params::from_record<torch_backend>(record, {}));
    return restore_parameters(values, module);
}

result<void> restore_gradients(const gradients_params& grads, torch::nn::Module& module)
{
    BOOST_OUTCOME_TRY(auto parameters, parameters_by_id(module));
    BOOST_OUTCOME_TRY(auto matched, match(grads, parameters));
    for (auto& [id, parameter] : parameters) {
        parameter.tensor.mutable_grad() = at::Tensor{};
    }
    for (auto& [parameter, gradient] : matched) {
        parameter->mutable_grad() = gradient;
    }
    return success();
}

result<void> restore_parameters(const gradients_params& values, torch::nn::Module& module)
{
    BOOST_OUTCOME_TRY(auto parameters, parameters_by_id(module));
    BOOST_OUTCOME_TRY(auto matched, match_all(values, parameters));
    const torch::NoGradGuard no_grad;
    for (auto& [parameter, value] : matched) {
        parameter->copy_(value);
    }
    return success();
}

} // namespace ruda
