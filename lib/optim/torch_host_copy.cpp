// Host copies of torch tensors, both ways, through contiguous CPU tensors.
#include "torch_host_copy.hpp"

#include "../backend/torch_conversions.hpp"

#include <ATen/ops/empty.h>

#include <cstring>
#include <exception>

namespace ruda::detail {

result<gradient_entry> host_copy(const std::string& name, const at::Tensor& tensor)
{
    if (!tensor.defined() || tensor.layout() != c10::kStrided) {
        return error{errc::invalid_tensor,
                     name + ": the tensor is undefined, sparse or of another layout"};
    }
    const auto type = ruda_dtype(tensor.scalar_type());
    if (!type) {
        return error{errc::invalid_dtype, name + ": ruda has no dtype for torch's " +
                                              std::string{c10::toString(tensor.scalar_type())}};
    }
    try {
        const at::Tensor host = tensor.detach().cpu().contiguous();
        const auto bytes = static_cast<std::size_t>(host.numel()) * host.element_size();
        BOOST_OUTCOME_TRY(auto copy, storage::try_allocate(bytes));
        if (bytes != 0) {
            std::memcpy(copy.writable_data(), host.data_ptr(), bytes);
        }
        return gradient_entry{param_id::from_name(name), *type,
                              tensor_data{std::move(copy), ruda_shape(host), *type}, name};
    } catch (const std::exception& e) {
        return error{errc::read_failed, name + ": copying the tensor to the host: " + e.what()};
    }
}

result<at::Tensor> tensor_of(const gradient_entry& entry, const c10::Device& device)
{
    const auto type = torch_type(entry.dtype);
    if (!type) {
        return error{errc::invalid_dtype, entry.name + ": torch has no dtype for ruda's " +
                                              to_string(entry.dtype)};
    }
    BOOST_OUTCOME_TRY(const auto values, entry.data.convert(entry.dtype));
    BOOST_OUTCOME_TRY(const auto sizes, torch_sizes(values.shape()));
    try {
        at::Tensor host = at::empty(sizes, at::TensorOptions{}.dtype(*type));
        const auto bytes = values.bytes().size();
        if (bytes != static_cast<std::size_t>(host.numel()) * host.element_size()) {
            return error{errc::byte_count_mismatch,
                         entry.name + ": " + std::to_string(bytes) + " bytes for shape " +
                             to_string(values.shape())};
        }
        if (bytes != 0) {
            std::memcpy(host.data_ptr(), values.bytes().data(), bytes);
        }
        return device.is_cpu() ? host : host.to(device);
    } catch (const std::exception& e) {
        return error{errc::allocation_too_large,
                     entry.name + ": making the tensor on " + device.str() + ": " + e.what()};
    }
}

} // namespace ruda::detail
