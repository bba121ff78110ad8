// A trainer's whole state: the float tensors read by one snapshot on torch_backend, the small
// parts copied at the call, and the restore that checks every part before it changes any.
#include <ruda/optim/torch_training_state.hpp>

#include "../backend/torch_conversions.hpp"
#include "cuda_module_tensors.hpp"
#include "torch_host_copy.hpp"

#include <ruda/backend/torch_backend.hpp>
#include <ruda/optim/module_gradients.hpp>
#include <ruda/runtime/try_read_sync.hpp>

#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
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

// A float buffer in the container a snapshot reads: torch_backend's, or borrowed by
// cuda_backend for a model on a GPU.
result<void> add_buffer(gradients_params& buffers, const std::string& name,
                        const at::Tensor& buffer, const cuda_module_device* on)
{
    if (on != nullptr) {
        BOOST_OUTCOME_TRY(const cuda_stream producer, detail::stream_of(*on));
        BOOST_OUTCOME_TRY(auto borrowed, detail::borrow(buffer.detach(), *on, producer));
        buffers.insert<cuda_backend>(param_id::from_name(name), std::move(borrowed), name);
        return success();
    }
    BOOST_OUTCOME_TRY(auto wrapped, torch_backend::float_tensor::wrap(buffer.detach()));
    buffers.insert<torch_backend>(param_id::from_name(name),
                                  tensor_primitive<torch_backend>{std::move(wrapped)}, name);
    return success();
}

// The state of `model` and `optimizer`: on the CPU when `on` is null, else on that GPU.
result<captured_state> capture(const torch::nn::Module& model,
                               const torch::optim::Optimizer& optimizer, std::uint64_t step,
                               const training_state_options& options,
                               const cuda_module_device* on)
{
    captured_state out;
    out.step = step;
    BOOST_OUTCOME_TRY(out.weights, on != nullptr ? parameters_from_module(model, *on)
                                                 : parameters_from_module(model));
    if (options.gradients) {
        BOOST_OUTCOME_TRY(out.gradients,
                          on != nullptr ? from_module(model, *on) : from_module(model));
    }
    for (const auto& item : model.named_buffers(/*recurse=*/true)) {
        const at::Tensor& buffer = item.value();
        if (!buffer.defined()) {
            continue;
        }
        if (detail::ruda_float_dtype(buffer.scalar_type())) {
            if (auto added = add_buffer(out.buffers, item.key(), buffer, on); !added) {
                return error{added.error().code(),
                             "Buffer " + item.key() + ": " + added.error().message()};
            }
        } else {
            BOOST_OUTCOME_TRY(auto copy, detail::host_copy(item.key(), buffer));
            out.integer_buffers.push_back(std::move(copy));
        }
    }
    BOOST_OUTCOME_TRY(out.optimizer, on != nullptr ? optimizer_state_of(optimizer, model, *on)
                                                   : optimizer_state_of(optimizer, model));
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
                        std::uint64_t step, const training_state_options& options,
                        const cuda_module_device* on)
{
    auto captured = capture(model, optimizer, step, options, on);
    if (!captured) {
        return failed_snapshot<checkpoint>(std::move(captured).error());
    }
    auto state = std::make_shared<captured_state>(std::move(captured).value());
    auto reads = on != nullptr ? gradients_params::to_records_async<cuda_backend>(
                                     containers_of(*state), container_labels(), options.snapshot)
                               : gradients_params::to_records_async<torch_backend>(
                                     containers_of(*state), container_labels(), options.snapshot);
    return finish(std::move(state), std::move(reads));
}

} // namespace detail

namespace {

result<checkpoint> snapshot_now(const torch::nn::Module& model,
                                const torch::optim::Optimizer& optimizer, std::uint64_t step,
                                const training_state_options& options,
                                const cuda_module_device* on)
{
    sync_read_options sync;
    sync.refuse_if = options.snapshot.refuse_if;
    sync.deadline = options.snapshot.deadline;
    sync.what = "training state snapshot";
    sync.instead = "async_snapshot_training_state";
    return try_read_sync(
        [&] { return detail::training_state_snapshot(model, optimizer, step, options, on); },
        sync);
}

} // namespace

result<checkpoint> snapshot_training_state(const torch::nn::Module& model,
                                           const torch::optim::Optimizer& optimizer,
                                           std::uint64_t step,
                                           const training_state_options& options)
{
    return snapshot_now(model, optimizer, step, options, nullptr);
}

result<checkpoint> snapshot_training_state(const torch::nn::Module& model,
                                           const torch::optim::Optimizer& optimizer,
                                           std::uint64_t step, const cuda_module_device& on,
                                           const training_state_options& options)
{
    return snapshot_now(model, optimizer, step, options, &on);
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
            return error{errc::shape_mismatch,
                         "Buffer " + entry.name + ": shape " + to_string(entry.data.shape()) +
                             ", the model's " + c10::str(buffer.sizes())};
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

// Group `group` of the checkpoint, or an empty record where it may be absent.
result<gradients_params_record> group_of(const checkpoint& saved, std::string_view group,
                                         bool required)
{
    const gradients_params_record* record = saved.group(group);
    if (record == nullptr) {
        if (required) {
            return error{errc::not_found, "The checkpoint has no group " + std::string{group}};
        }
        return gradients_params_record{};
    }
    return *record;
}

// How one kind of model takes its parameters, gradients and optimizer state back: checks that
// change nothing, then the restores.
struct restorer {
    std::function<result<void>(const gradients_params_record&)> check_parameters;
    std::function<result<void>(const gradients_params_record&)> check_gradients;
    std::function<result<void>()> restore_optimizer;
    std::function<result<void>(const gradients_params_record&)> restore_parameters;
    std::function<result<void>(const gradients_params_record&)> restore_gradients;
};

result<std::uint64_t> restore_with(const checkpoint& saved, torch::nn::Module& model,
                                   const training_restore_options& options,
                                   const restorer& to)
{
    // Every part read and checked against the model before anything changes. The optimizer's
    // own restore checks everything before it changes the optimizer, and goes last but one.
    std::uint64_t step = 0;
    BOOST_OUTCOME_TRY(saved.get(step_section, step));
    BOOST_OUTCOME_TRY(const auto weights, group_of(saved, weights_group, true));
    BOOST_OUTCOME_TRY(const auto gradients,
                      group_of(saved, checkpoint::gradients_group, false));
    BOOST_OUTCOME_TRY(to.check_parameters(weights));
    BOOST_OUTCOME_TRY(to.check_gradients(gradients));
    BOOST_OUTCOME_TRY(auto buffers, plan_buffers(saved, model));
    const gradients_params_record* generators = saved.group(generators_group);
    if (options.generators && generators != nullptr) {
        BOOST_OUTCOME_TRY(check_generator_states(*generators));
    }
    BOOST_OUTCOME_TRY(to.restore_optimizer());

    BOOST_OUTCOME_TRY(to.restore_parameters(weights));
    BOOST_OUTCOME_TRY(to.restore_gradients(gradients));
    try {
        const torch::NoGradGuard no_grad;
        for (auto& [buffer, value] : buffers) {
            buffer.copy_(value);
        }
    } catch (const std::exception& e) {
        return error{errc::read_failed, std::string{"Restoring a buffer: "} + e.what()};
    }
    if (options.generators && generators != nullptr) {
        BOOST_OUTCOME_TRY(restore_generator_states(*generators));
    }
    return step;
}

} // namespace

result<std::uint64_t> restore_training_state(const checkpoint& saved, torch::nn::Module& model,
                                             torch::optim::Optimizer& optimizer,
                                             const training_restore_options& options)
{
    // On the CPU the records become torch tensors first: from_record's own checks, once.
    std::optional<gradients_params> weights;
    std::optional<gradients_params> gradients;
    const auto on_cpu = [](const gradients_params_record& record,
                           std::optional<gradients_params>& made) -> result<void> {
        BOOST_OUTCOME_TRY(made, gradients_params::from_record<torch_backend>(record, {}));
        return success();
    };
    return restore_with(
        saved, model, options,
        {[&](const auto& record) -> result<void> {
             BOOST_OUTCOME_TRY(on_cpu(record, weights));
             return check_parameters(*weights, model);
         },
         [&](const auto& record) -> result<void> {
             BOOST_OUTCOME_TRY(on_cpu(record, gradients));
             return check_gradients(*gradients, model);
         },
         [&] {
             return restore_optimizer_state(saved, optimizer, model, options.optimizer_options);
         },
         [&](const auto&) { return restore_parameters(*weights, model); },
         [&](const auto&) { return restore_gradients(*gradients, model); }});
}

result<std::uint64_t> restore_training_state(const checkpoint& saved, torch::nn::Module& model,
                                             torch::optim::Optimizer& optimizer,
                                             const cuda_module_device& on,
                                             const training_restore_options& options)
{
    return restore_with(
        saved, model, options,
        {[&](const auto& record) { return check_parameters(record, model, on); },
         [&](const auto& record) { return check_gradients(record, model, on); },
         [&] {
             return restore_optimizer_state(saved, optimizer, model, on,
                                            options.optimizer_options);
         },
         [&](const auto& record) { return restore_parameters(record, model, on); },
         [&](const auto& record) { return restore_gradients(record, model, on); }});
}

} // namespace ruda
