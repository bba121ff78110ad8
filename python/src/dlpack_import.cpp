#include "dlpack_import.hpp"

#include <dlpack/dlpack.h>

#include <string_view>
#include <utility>

namespace py = pybind11;

namespace ruda::python {
namespace {

constexpr std::uint8_t dlpack_bool = 6; // kDLBool, in DLPack 0.8 and later

error refusal(errc code, const std::string& name, const std::string& why)
{
    return error{code, "Tensor " + name + ": " + why};
}

std::string type_name(py::handle object)
{
    return py::str(py::type::handle_of(object).attr("__name__")).cast<std::string>();
}

std::string device_name(int type)
{
    switch (type) {
    case kDLCUDA: return "CUDA";
    case kDLCUDAManaged: return "CUDA managed memory";
    case kDLROCM: return "ROCm";
    case kDLOpenCL: return "OpenCL";
    case kDLVulkan: return "Vulkan";
    case kDLMetal: return "Metal";
    default: return "DLPack device type " + std::to_string(type);
    }
}

// Row-major and gap-free, dimensions of extent 1 ignored: what a plain copy of the bytes reads.
bool compact(const DLTensor& t)
{
    if (t.strides == nullptr) {
        return true;
    }
    std::int64_t expected = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
        if (t.shape[d] != 1 && t.strides[d] != expected) {
            return false;
        }
        expected *= t.shape[d];
    }
    return true;
}

} // namespace

std::optional<dtype> dtype_of_dlpack(std::uint8_t code, std::uint8_t bits, std::uint16_t lanes)
{
    if (lanes != 1) {
        return std::nullopt;
    }
    switch (code) {
    case kDLFloat:
        if (bits == 64) return dtype::f64();
        if (bits == 32) return dtype::f32();
        if (bits == 16) return dtype::f16();
        break;
    case kDLBfloat:
        if (bits == 16) return dtype::bf16();
        break;
    case kDLInt:
        if (bits == 64) return dtype::i64();
        if (bits == 32) return dtype::i32();
        if (bits == 16) return dtype::i16();
        if (bits == 8) return dtype::i8();
        break;
    case kDLUInt:
        if (bits == 64) return dtype::u64();
        if (bits == 32) return dtype::u32();
        if (bits == 16) return dtype::u16();
        if (bits == 8) return dtype::u8();
        break;
    case dlpack_bool:
        if (bits == 8) return dtype::boolean();
        break;
    default: break;
    }
    return std::nullopt;
}

result<host_view> borrow_host_tensor(py::handle tensor, std::string name)
{
    if (!py::hasattr(tensor, "__dlpack__")) {
        return refusal(errc::invalid_tensor, name,
                       "a " + type_name(tensor) +
                           " has no __dlpack__; pass a torch tensor, a NumPy array or another "
                           "DLPack tensor");
    }
    if (py::hasattr(tensor, "__dlpack_device__")) {
        const py::tuple device = tensor.attr("__dlpack_device__")();
        const int type = device[0].cast<int>();
        if (type != kDLCPU && type != kDLCUDAHost) {
            return refusal(errc::unsupported_device, name,
                           "it is on " + device_name(type) + " device " +
                               py::str(device[1]).cast<std::string>() +
                               "; ruda's Python module reads host tensors (CPU or pinned "
                               "memory): copy it to the CPU first");
        }
    }
    py::object capsule;
    try {
        capsule = tensor.attr("__dlpack__")();
    } catch (py::error_already_set& e) {
        return refusal(errc::invalid_tensor, name, "its __dlpack__ refused: " +
                                                       std::string{e.what()});
    }
    if (PyCapsule_IsValid(capsule.ptr(), "dltensor") == 0) {
        return refusal(errc::invalid_tensor, name,
                       "its __dlpack__ gave no unused DLPack capsule");
    }
    auto* managed =
        static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
    // Consumed: from now on this view, not the capsule, calls the producer's deleter.
    PyCapsule_SetName(capsule.ptr(), "used_dltensor");
    std::shared_ptr<void> owner{managed, [](void* p) {
                                    auto* m = static_cast<DLManagedTensor*>(p);
                                    if (m->deleter != nullptr) {
                                        m->deleter(m);
                                    }
                                }};
    const DLTensor& t = managed->dl_tensor;
    if (t.device.device_type != kDLCPU && t.device.device_type != kDLCUDAHost) {
        return refusal(errc::unsupported_device, name,
                       "it is on " + device_name(t.device.device_type) +
                           "; ruda's Python module reads host tensors");
    }
    const auto type = dtype_of_dlpack(t.dtype.code, t.dtype.bits, t.dtype.lanes);
    if (!type) {
        return refusal(errc::invalid_dtype, name,
                       "DLPack dtype code " + std::to_string(t.dtype.code) + " with " +
                           std::to_string(t.dtype.bits) + " bits and " +
                           std::to_string(t.dtype.lanes) +
                           " lanes is no dtype ruda has (f64, f32, f16, bf16, signed and "
                           "unsigned integers of 8 to 64 bits)");
    }
    if (t.ndim < 0 || static_cast<std::size_t>(t.ndim) > 64) {
        return refusal(errc::invalid_tensor, name,
                       std::to_string(t.ndim) + " dimensions (at most 64)");
    }
    ruda::shape dims;
    for (int d = 0; d < t.ndim; ++d) {
        if (t.shape[d] < 0) {
            return refusal(errc::invalid_tensor, name, "a negative extent");
        }
        dims.push_back(static_cast<std::size_t>(t.shape[d]));
    }
    if (!compact(t)) {
        return refusal(errc::invalid_tensor, name,
                       "it is not contiguous (strides do not lay it out row-major without "
                       "gaps); pass a contiguous copy (.contiguous(), numpy.ascontiguousarray)");
    }
    auto count = checked_num_elements(dims);
    if (!count || count.value() > SIZE_MAX / type->size()) {
        return refusal(errc::shape_overflow, name, "its shape " + to_string(dims) +
                                                       " overflows");
    }
    host_view view;
    view.name = std::move(name);
    view.id = param_id::from_name(view.name);
    view.type = *type;
    view.dims = std::move(dims);
    view.bytes = count.value() * type->size();
    view.data = static_cast<std::uint8_t*>(t.data) + t.byte_offset;
    view.owner = std::move(owner);
    return view;
}

} // namespace ruda::python
