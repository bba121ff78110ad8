// A torch module's CUDA tensors borrowed by cuda_backend, and restores into them in place.
#include <ruda/optim/cuda_module_gradients.hpp>

#include "../backend/torch_conversions.hpp"
#include "cuda_module_tensors.hpp"
#include "module_parameters.hpp"

#include <ruda/optim/validate_record.hpp>

#include <ATen/ops/empty_like.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/version.h>

#include <exception>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace ruda {
namespace {

using detail::about;
using detail::label;
using detail::named_parameter;
using detail::parameters_by_id;
using detail::ruda_float_dtype;
using detail::ruda_shape;

// The handle of a c10::Stream: libtorch 2.x names it native_handle() (later stream_handle());
// libtorch 1.x cannot give it at all.
template <class Stream>
std::optional<cuda_stream> handle_of(const Stream& stream)
{
    if constexpr (requires { stream.native_handle(); }) {
        return static_cast<cuda_stream>(stream.native_handle());
    } else if constexpr (requires { stream.stream_handle(); }) {
        return static_cast<cuda_stream>(stream.stream_handle());
    } else {
        return std::nullopt;
    }
}

result<void> check_device(const cuda_device& device)
{
    if (!device.state()) {
        return error{errc::device_unavailable, "cuda backend: the device is gone"};
    }
    return success();
}

std::string gpu_name(int ordinal) { return "cuda:" + std::to_string(ordinal); }

// The tensor's dtype when ruda can read and write its bytes in place on `device`: a dense
// float tensor on that GPU.
result<dtype> check_dense_on(const at::Tensor& tensor, const cuda_device& device)
{
    if (!tensor.is_cuda()) {
        return error{errc::unsupported_device,
                     "the tensor is on " + tensor.device().str() + ", not " +
                         gpu_name(device.ordinal()) +
                         " (from_module without a device reads CPU tensors)"};
    }
    if (tensor.device().index() != device.ordinal()) {
        return error{errc::unsupported_device, "the tensor is on " + tensor.device().str() +
                                                   ", and the device is " +
                                                   gpu_name(device.ordinal())};
    }
    if (tensor.layout() != c10::kStrided) {
        return error{errc::invalid_tensor, "the tensor has a sparse or other non-strided layout"};
    }
    if (!tensor.is_contiguous()) {
        return error{errc::invalid_tensor, "the tensor is not contiguous (strides " +
                                               c10::str(tensor.strides()) +
                                               "): ruda reads and writes its bytes in place"};
    }
    const auto type = ruda_float_dtype(tensor.scalar_type());
    if (!type) {
        return error{errc::invalid_dtype, std::string{c10::toString(tensor.scalar_type())} +
                                              " tensors are not float gradients"};
    }
    return *type;
}

// The module's tensors chosen by `pick` (a gradient or the value), borrowed by cuda_backend.
template <class Pick>
result<gradients_params> borrow_all(const torch::nn::Module& module, const cuda_module_device& on,
                                    Pick pick)
{
    BOOST_OUTCOME_TRY(check_device(on.device));
    BOOST_OUTCOME_TRY(auto parameters, parameters_by_id(module));
    gradients_params out;
    std::optional<cuda_stream> producer;
    for (auto& [id, parameter] : parameters) {
        at::Tensor tensor = pick(parameter.tensor);
        if (!tensor.defined()) {
            continue;
        }
        if (!producer) {
            BOOST_OUTCOME_TRY(producer, detail::stream_of(on));
        }
        auto borrowed = detail::borrow(std::move(tensor), on, *producer);
        if (!borrowed) {
            return about(parameter, id, borrowed.error());
        }
        out.insert<cuda_backend>(id, std::move(borrowed).value(), parameter.name);
    }
    return out;
}

// One entry of a record and the parameter it restores, checked against each other.
struct planned_upload {
    named_parameter* parameter;
    const gradient_entry* entry;
    dtype type; // the parameter's
};

// Every entry of `record` matched to its parameter and checked; nothing changes.
result<std::vector<planned_upload>>
plan_uploads(const gradients_params_record& record,
             std::unordered_map<param_id, named_parameter>& parameters, const cuda_device& device)
{
    BOOST_OUTCOME_TRY(validate_gradients_record(record));
    std::vector<planned_upload> plan;
    plan.reserve(record.entries().size());
    for (const gradient_entry& entry : record.entries()) {
        const auto found = parameters.find(entry.id);
        if (found == parameters.end()) {
            return error{errc::unknown_parameter, "Parameter " + to_string(entry.id) +
                                                      " is none of the module's parameters"};
        }
        named_parameter& parameter = found->second;
        const auto type = check_dense_on(parameter.tensor, device);
        if (!type) {
            return about(parameter, entry.id, type.error());
        }
        if (entry.dtype != type.value()) {
            return error{errc::invalid_dtype, label(parameter.name, entry.id) + ": dtype " +
                                                  to_string(entry.dtype) + ", the parameter's " +
                                                  to_string(type.value())};
        }
        const shape dims = ruda_shape(parameter.tensor);
        if (entry.data.shape() != dims) {
            return error{errc::shape_mismatch, label(parameter.name, entry.id) + ": shape " +
                                                   to_string(entry.data.shape()) +
                                                   ", the parameter's " + to_string(dims)};
        }
        plan.push_back({&parameter, &entry, type.value()});
    }
    return plan;
}

// The entry's values in the parameter's dtype: as stored, or widened on the host.
result<tensor_data> values_of(const planned_upload& upload)
{
    const tensor_data& stored = upload.entry->data;
    if (stored.dtype() == upload.type) {
        return stored;
    }
    auto widened = stored.convert(upload.type);
    if (!widened) {
        return about(*upload.parameter, upload.entry->id, widened.error());
    }
    return widened;
}

result<void> upload_in_place(const planned_upload& upload, at::Tensor& target,
                             const cuda_module_device& on, cuda_stream consumer)
{
    BOOST_OUTCOME_TRY(auto values, values_of(upload));
    const auto address = reinterpret_cast<cuda_device_ptr>(target.data_ptr());
    if (auto uploaded = on.device.upload_into(address, values.bytes().span(), consumer);
        !uploaded) {
        return about(*upload.parameter, upload.entry->id, uploaded.error());
    }
    // As torch's own in-place writes do: autograd sees that the tensor changed.
    target.unsafeGetTensorImpl()->bump_version();
    return success();
}

// A torch tensor over memory a cuda_backend tensor holds, on `like`'s device with its dtype
// and sizes: what `torch::from_blob` makes, built directly, as it needs nothing of CUDA.
at::Tensor tensor_over(const cuda_backend::float_tensor& memory, const at::Tensor& like)
{
    using holder = std::shared_ptr<const detail::cuda_tensor_desc>;
    c10::DataPtr data{reinterpret_cast<void*>(memory.address()), new holder{memory.desc()},
                      [](void* owner) { delete static_cast<holder*>(owner); }, like.device()};
    // Parentheses: the byte count is a size_t in libtorch 1.x, a SymInt in 2.x.
    c10::Storage storage(c10::Storage::use_byte_size_t{}, memory.byte_size(), std::move(data),
                         /*allocator=*/nullptr, /*resizable=*/false);
    at::Tensor tensor = at::detail::make_tensor<c10::TensorImpl>(
        std::move(storage), c10::DispatchKeySet{c10::DispatchKey::CUDA}, like.dtype());
    tensor.unsafeGetTensorImpl()->set_sizes_contiguous(like.sizes());
    return tensor;
}


// A gradient the upload can overwrite in place: a dense tensor like its parameter.
bool reusable_gradient(const at::Tensor& grad, const at::Tensor& parameter)
{
    return grad.defined() && grad.device() == parameter.device() &&
           grad.layout() == c10::kStrided && grad.is_contiguous() &&
           grad.scalar_type() == parameter.scalar_type() && grad.sizes() == parameter.sizes();
}

// Restores one gradient: in place where the parameter's gradient can take it, else into a new
// one (`detail::new_device_tensor`).
result<void> restore_gradient(const planned_upload& upload, const cuda_module_device& on,
                              cuda_stream consumer, bool& filled_on_upload_stream)
{
    at::Tensor& parameter = upload.parameter->tensor;
    if (reusable_gradient(parameter.grad(), parameter)) {
        return upload_in_place(upload, parameter.mutable_grad(), on, consumer);
    }
    BOOST_OUTCOME_TRY(auto values, values_of(upload));
    auto grad = detail::new_device_tensor(std::move(values), parameter, on, consumer,
                                          filled_on_upload_stream);
    if (!grad) {
        return about(*upload.parameter, upload.entry->id, grad.error());
    }
    parameter.mutable_grad() = std::move(grad).value();
    return success();
}

} // namespace

namespace detail {

result<cuda_stream> stream_of(const cuda_module_device& on)
{
    if (on.stream) {
        return *on.stream;
    }
    return torch_current_cuda_stream(on.device.ordinal());
}

result<tensor_primitive<cuda_backend>> borrow(at::Tensor tensor, const cuda_module_device& on,
                                              cuda_stream producer)
{
    BOOST_OUTCOME_TRY(const dtype type, check_dense_on(tensor, on.device));
    const auto address = reinterpret_cast<cuda_device_ptr>(tensor.data_ptr());
    shape dims = ruda_shape(tensor);
    BOOST_OUTCOME_TRY(auto borrowed,
                      cuda_backend::borrow(on.device, address, std::move(dims), type, producer,
                                           std::make_shared<const at::Tensor>(std::move(tensor))));
    return tensor_primitive<cuda_backend>{std::move(borrowed)};
}

result<at::Tensor> new_device_tensor(tensor_data values, const at::Tensor& like,
                                     const cuda_module_device& on, cuda_stream consumer,
                                     bool& filled_on_upload_stream)
{
    if (torch_has_cuda()) {
        at::Tensor tensor;
        try {
            tensor = at::empty_like(like, at::MemoryFormat::Contiguous);
        } catch (const std::exception& e) {
            return error{errc::allocation_too_large, e.what()};
        }
        const auto address = reinterpret_cast<cuda_device_ptr>(tensor.data_ptr());
        BOOST_OUTCOME_TRY(on.device.upload_into(address, values.bytes().span(), consumer));
        return tensor;
    }
    BOOST_OUTCOME_TRY(auto memory, cuda_backend::float_from_data(std::move(values), on.device));
    filled_on_upload_stream = true;
    return tensor_over(memory, like);
}

} // namespace detail

bool torch_has_cuda() noexcept { return c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA); }

result<cuda_stream> torch_current_cuda_stream(int ordinal)
{
    if (!torch_has_cuda()) {
        return error{errc::device_unavailable,
                     "libtorch " TORCH_VERSION " has no CUDA here (its CUDA library is not "
                     "loaded), so it has no current stream of " +
                         gpu_name(ordinal) + ": pass the trainer's stream"};
    }
    try {
        const c10::Device device{c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(ordinal)};
        const c10::Stream current =
            c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device);
        if (const auto handle = handle_of(current)) {
            return *handle;
        }
    } catch (const std::exception& e) {
        return error{errc::device_unavailable,
                     "torch's current stream of " + gpu_name(ordinal) + ": " + e.what()};
    }
    return error{errc::unsupported_device,
                 "libtorch " TORCH_VERSION " cannot give a CUDA stream's handle: pass the "
                 "trainer's stream (at::cuda::getCurrentCUDAStream().stream())"};
}

result<gradients_params> from_module(const torch::nn::Module& module, const cuda_module_device& on)
{
    return borrow_all(module, on, [](const at::Tensor& parameter) { return parameter.grad(); });
}

result<gradients_params> parameters_from_module(const torch::nn::Module& module,
                                                const cuda_module_device& on)
{
    return borrow_all(module, on, [](const at::Tensor& parameter) { return parameter.detach(); });
}

result<void> restore_gradients(const gradients_params_record& record, torch::nn::Module& module,
                               const cuda_module_device& on)
{
    BOOST_OUTCOME_TRY(check_device(on.device));
    BOOST_OUTCOME_TRY(auto parameters, parameters_by_id(module));
    BOOST_OUTCOME_TRY(const auto plan, plan_uploads(record, parameters, on.device));
    cuda_stream consumer = nullptr;
    if (!plan.empty()) {
        BOOST_OUTCOME_TRY(consumer, detail::stream_of(on));
    }
    bool filled_on_upload_stream = false;
    std::unordered_set<param_id> restored;
    for (const planned_upload& upload : plan) {
        restored.insert(upload.entry->id);
        BOOST_OUTCOME_TRY(restore_gradient(upload, on, consumer, filled_on_upload_stream));
    }
    if (filled_on_upload_stream) {
        BOOST_OUTCOME_TRY(on.device.order_after_uploads(consumer));
    }
    for (auto& [id, parameter] : parameters) {
        if (!restored.contains(id)) {
            parameter.tensor.mutable_grad() = at::Tensor{};
        }
    }
    return success();
}

namespace {

// The uploads of a value for every parameter, checked.
result<std::vector<planned_upload>>
plan_values(const gradients_params_record& record,
            std::unordered_map<param_id, named_parameter>& parameters, const cuda_device& device)
{
    BOOST_OUTCOME_TRY(auto plan, plan_uploads(record, parameters, device));
    if (plan.size() != parameters.size()) {
        std::unordered_set<param_id> present;
        for (const planned_upload& upload : plan) {
            present.insert(upload.entry->id);
        }
        for (const auto& [id, parameter] : parameters) {
            if (!present.contains(id)) {
                return error{errc::not_found, "Missing value for " + label(parameter.name, id)};
            }
        }
    }
    return plan;
}

} // namespace

result<void> check_gradients(const gradients_params_record& record,
                             const torch::nn::Module& module, const cuda_module_device& on)
{
    BOOST_OUTCOME_TRY(check_device(on.device));
    BOOST_OUTCOME_TRY(auto parameters, parameters_by_id(module));
    BOOST_OUTCOME_TRY(plan_uploads(record, parameters, on.device));
    return success();
}

result<void> check_parameters(const gradients_params_record& record,
                              const torch::nn::Module& module, const cuda_module_device& on)
{
    BOOST_OUTCOME_TRY(check_device(on.device));
    BOOST_OUTCOME_TRY(auto parameters, parameters_by_id(module));
    BOOST_OUTCOME_TRY(plan_values(record, parameters, on.device));
    return success();
}

result<void> restore_parameters(const gradients_params_record& record, torch::nn::Module& module,
                                const cuda_module_device& on)
{
    BOOST_OUTCOME_TRY(check_device(on.device));
    BOOST_OUTCOME_TRY(auto parameters, parameters_by_id(module));
    BOOST_OUTCOME_TRY(const auto plan, plan_values(record, parameters, on.device));
    if (plan.empty()) {
        return success();
    }
    BOOST_OUTCOME_TRY(const cuda_stream consumer, detail::stream_of(on));
    for (const planned_upload& upload : plan) {
        BOOST_OUTCOME_TRY(upload_in_place(upload, upload.parameter->tensor, on, consumer));
    }
    return success();
}

} // namespace ruda
