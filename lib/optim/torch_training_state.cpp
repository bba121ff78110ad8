// A trainer's whole state: the float tensors read by one snapshot on torch_backend, the small
// parts copied at the call, and the restore that checks every part before it changes any.
#include <ruda/optim/torch_training_state.hpp>

#include "../backend/torch_conversions.hpp"
#include "torch_host_copy.hpp"

#include <ruda/backend/torch_backend.hpp>
#include <ruda/optim/module_gradients.hpp>
#include <ruda/runtime/try_read_sync.hpp>

#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace ruda {
namespace {

// What a snapshot captures at its call: the float tensors to read, and what was copied.
struct captured_state {
    gradients_params weights;
    gradients_params buffers; // the float ones; integer buffers are copied into `copied`
    gradients_params gradients;
    optimizer_state optimizer;
    std::vector<gradient_entry> integer_buffers;
    std::optional<gradients_params_record> generators;
    std::uint64_t step = 0;
};

result<captured_state> capture(const torch::nn::Module& model,
                               const torch::optim::Optimizer& optimizer, std::uint64_t step,
                               const training_state_options& options)
{
    captured_state out;
    out.step = step;
    BOOST_OUTCOME_TRY(out.weights, parameters_from_module(model));
    if (options.gradients) {
        BOOST_OUTCOME_TRY(out.gradients, from_module(model));
    }
    for (const auto& item : model.named_buffers(/*recurse=*/true)) {
        const at::Tensor& buffer = item.value();
        if (!buffer.defined()) {
            continue;
        }
        if (detail::ruda_float_dtype(buffer.scalar_type())) {
            auto wrapped = torch_backend::float_tensor::wrap(buffer.detach());
            if (!wrapped) {
                return error{wrapped.error().code(),
                             "Buffer " + item.key() + ": " + wrapped.error().message()};
            }
            out.buffers.insert<torch_backend>(
                param_id::from_name(item.key()),
                tensor_primitive<torch_backend>{std::move(wrapped).value()}, item.key());
        } else {
            BOOST_OUTCOME_TRY(auto copy, detail::host_copy(item.key(), buffer));
            out.integer_buffers.push_back(std::move(copy));
        }
    }
    BOOST_OUTCOME_TRY(out.optimizer, optimizer_state_of(optimizer, model));
    if (options.generators) {
        BOOST_OUTCOME_TRY(out.generators, generator_states());
    }
    return out;
}

std::vector<gradient_entry> by_id(std::vector<gradient_entry> entries)
{
    std::sort(entries.begin(), entries.end(),
              [](const gradient_entry& a, const gradient_entry& b) { return a.id < b.id; });
    return entries;
}

// The checkpoint of the captured state once its float tensors are read: a record per
// container, in the order `containers_of` lists them.
result<checkpoint> assemble(captured_state& state, std::vector<gradients_params_record> records)
{
    checkpoint out{std::move(records[2])};
    BOOST_OUTCOME_TRY(out.put_group(std::string{weights_group}, std::move(records[0])));
    auto buffers = std::move(records[1]).into_entries();
    for (gradient_entry& entry : state.integer_buffers) {
        buffers.push_back(std::move(entry));
    }
    if (!buffers.empty()) {
        BOOST_OUTCOME_TRY(out.put_group(std::string{buffers_group},
                                        gradients_params_record{by_id(std::move(buffers))}));
    }
    BOOST_OUTCOME_TRY(put_optimizer_state(out, std::move(records[3]), state.optimizer));
    if (state.generators) {
        BOOST_OUTCOME_TRY(
            out.put_group(std::string{generators_group}, std::move(*state.generators)));
    }
    BOOST_OUTCOME_TRY(out.put(std::string{step_section}, state.step));
    return out;
}

const std::vector<std::string>& container_labels()
{
    static const std::vector<std::string> labels{"weights", "buffers", "gradients", "optimizer"};
    return labels;
}

std::vector<const gradients_params*> containers_of(const captured_state& state)
{
    return {&state.weights, &state.buffers, &state.gradients, &state.optimizer.tensors};
}

boost::asio::awaitable<result<checkpoint>>
finish(std::shared_ptr<captured_state> state,
       boost::asio::awaitable<result<std::vector<gradients_params_record>>> reads)
{
    auto records = co_await std::move(reads);
    if (!records) {
        co_return std::move(records).error();
    }
    co_return assemble(*state, std::move(records).value());
}

} // namespace

namespace detail {

boost::asio::awaitable<result<checkpoint>>
training_state_snapshot(const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
                        std::uint64_t step, const training_state_options& options)
{
    auto captured = capture(model, optimizer, step, options);
    if (!captured) {
        return failed_snapshot<checkpoint>(std::move(captured).error());
    }
    auto state = std::make_shared<captured_state>(std::move(captured).value());
    auto reads = gradients_params::to_records_async<torch_backend>(
        containers_of(*state), container_labels(), options.snapshot);
    return finish(std::move(state), std::move(reads));
}

} // namespace detail

result<checkpoint> snapshot_training_state(const torch::nn::Module& model,
                                           const torch::optim::Optimizer& optimizer,
                                           std::uint64_t step,
                                           const training_state_options& options)
{
    sync_read_options sync;
    sync.refuse_if = options.snapshot.refuse_if;
    sync.deadline = options.snapshot.deadline;
    sync.what = "training state snapshot";
    sync.instead = "async_snapshot_training_state";
    return try_read_sync(
        [&] { return detail::training_state_snapshot(model, optimizer, step, options); }, sync);
}

namespace {

// The buffers of `model` set to `saved`'s values, in place: checked first, every buffer
// needing a value of its dtype and shape. Returns the copies to make.
result<std::vector<std::pair<at::Tensor, at::Tensor>>>
plan_buffers(const checkpoint& saved, const torch::nn::Module& model)
{
    std::unordered_map<std::string, at::Tensor> buffers;
    for (const auto& item : model.named_buffers(/*recurse=*/true)) {
        if (item.value().defined()) {
            buffers.emplace(item.key(), item.value());
        }
    }
    const gradients_params_record* values = saved.group(buffers_group);
    if (values == nullptr) {
        if (!buffers.empty()) {
            return error{errc::not_found, "The checkpoint has no group buffers, and the model "
                                          "has buffers (" +
                                              buffers.begin()->first + ")"};
        }
        return std::vector<std::pair<at::Tensor, at::Tensor>>{};
    }
    std::vector<std::pair<at::Tensor, at::Tensor>> plan;
    for (const gradient_entry& entry : values->entries()) {
        const auto found = buffers.find(entry.name);
        if (found == buffers.end()) {
            return error{errc::unknown_parameter,
                         "Buffer " + (entry.name.empty() ? to_string(entry.id) : entry.name) +
                             " is none of the model's buffers"};
        }
        const at::Tensor& buffer = found->second;
        if (entry.dtype != detail::ruda_dtype(buffer.scalar_type())) {
            return error{errc::invalid_dtype, "Buffer " + entry.name + ": dtype " +
                                                  to_string(entry.dtype) + ", the model's " +
                                                  std::string{c10::toString(buffer.scalar_type())}};
        }
        if (entry.data.shape() != detail::ruda_shape(buffer)) {
            return error{errc::shape_mismatch, "Buffer " + entry.name + ": shape " +
                                                   to_string(entry.data.shape()) + ", the model's " +
                                                   c10::str(buffer.sizes())};
        }
        BOOST_OUTCOME_TRY(auto value, detail::tensor_of(entry, buffer.device()));
        plan.emplace_back(buffer, std::move(value));
        buffers.erase(found);
    }
    if (!buffers.empty()) {
        return error{errc::not_found, "Missing value for buffer " + buffers.begin()->first};
    }
    return plan;
}

result<gradients_params> restored_on_cpu(const checkpoint& saved, std::string_view group,
                                         bool required)
{
    const gradients_params_record* record = saved.group(group);
    if (record == nullptr) {
        if (required) {
            return error{errc::not_found, "The checkpoint has no group " + std::string{group}};
        }
        return gradients_params{};
    }
    return gradients_params::from_record<torch_backend>(*record, {});
}

} // namespace

result<std::uint64_t> restore_training_state(const checkpoint& saved, torch::nn::Module& model,
                                             torch::optim::Optimizer& optimizer,
                                             const training_restore_options& options)
{
    // Every part read and checked against the model before anything changes. The optimizer's
    // own restore checks everything before it changes the optimizer, and goes last but one.
    std::uint64_t step = 0;
    BOOST_OUTCOME_TRY(saved.get(step_section, step));
    BOOST_OUTCOME_TRY(auto weights, restored_on_cpu(saved, weights_group, true));
    BOOST_OUTCOME_TRY(auto gradients, restored_on_cpu(saved, checkpoint::gradients_group, false));
    BOOST_OUTCOME_TRY(check_parameters(weights, model));
    BOOST_OUTCOME_TRY(check_gradients(gradients, model));
    BOOST_OUTCOME_TRY(auto buffers, plan_buffers(saved, model));
    const gradients_params_record* generators = saved.group(generators_group);
    if (options.generators && generators != nullptr) {
        BOOST_OUTCOME_TRY(check_generator_states(*generators));
    }
    BOOST_OUTCOME_TRY(
        restore_optimizer_state(saved, optimizer, model, options.optimizer_options));

    BOOST_OUTCOME_TRY(restore_parameters(weights, model));
    BOOST_OUTCOME_TRY(restore_gradients(gradients, model));
    {
        const torch::NoGradGuard no_grad;
        for (auto& [buffer, value] : buffers) {
            buffer.copy_(value);
        }
    }
    if (options.generators && generators != nullptr) {
        BOOST_OUTCOME_TRY(restore_generator_states(*generators));
    }
    return step;
}

} // namespace ruda
