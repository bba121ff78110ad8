#include "dlpack_import.hpp"

#include "runtime.hpp"

#include <dlpack/dlpack.h>

#include <algorithm>
#include <string_view>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace ruda::python {
namespace {

constexpr std::uint8_t dlpack_bool = 6; // kDLBool, in DLPack 0.8 and later

// The DLPack types with a dtype of ruda's, both ways (bool: in only, DLPack 0.6 lacks it).
struct dlpack_kind {
    std::uint8_t code;
    std::uint8_t bits;
    dtype::kind kind;
};
constexpr dlpack_kind dlpack_kinds[] = {
    {kDLFloat, 64, dtype::kind::f64},      {kDLFloat, 32, dtype::kind::f32},
    {kDLFloat, 16, dtype::kind::f16},      {kDLBfloat, 16, dtype::kind::bf16},
    {kDLInt, 64, dtype::kind::i64},        {kDLInt, 32, dtype::kind::i32},
    {kDLInt, 16, dtype::kind::i16},        {kDLInt, 8, dtype::kind::i8},
    {kDLUInt, 64, dtype::kind::u64},       {kDLUInt, 32, dtype::kind::u32},
    {kDLUInt, 16, dtype::kind::u16},       {kDLUInt, 8, dtype::kind::u8},
    {dlpack_bool, 8, dtype::kind::boolean}};

const char* const not_contiguous =
    "it is not contiguous (strides do not lay it out row-major without gaps); pass a "
    "contiguous copy (.contiguous(), numpy.ascontiguousarray)";

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

// NumPy arrays live on the host: no device to ask about (a call saved per tensor).
bool host_producer(py::handle tensor)
{
    static PyTypeObject* const ndarray = [] {
        try {
            return reinterpret_cast<PyTypeObject*>(
                py::object(py::module_::import("numpy").attr("ndarray")).release().ptr());
        } catch (py::error_already_set&) {
            return static_cast<PyTypeObject*>(nullptr);
        }
    }();
    return ndarray != nullptr && Py_TYPE(tensor.ptr()) == ndarray;
}

// What the direct reading of torch tensors needs from torch, found once torch is imported
// (never imported here: a program without torch pays nothing), and the names of the attributes
// it reads, interned once: a lookup by a C string makes and hashes a new str each time, which
// costs as much as the lookup itself.
struct torch_types {
    PyObject* tensor = nullptr;
    PyObject* parameter = nullptr;
    PyObject* strided = nullptr;
    std::vector<std::pair<PyObject*, dtype>> dtypes;
    PyObject* is_cpu = nullptr;
    PyObject* is_cuda = nullptr;
    PyObject* layout = nullptr;
    PyObject* dtype_name = nullptr;
    PyObject* is_contiguous = nullptr;
    PyObject* shape = nullptr;
    PyObject* data_ptr = nullptr;
};

const torch_types* torch_if_imported()
{
    static torch_types* found = nullptr;
    if (found != nullptr) {
        return found;
    }
    PyObject* torch = PyDict_GetItemString(PySys_GetObject("modules"), "torch");
    if (torch == nullptr) {
        return nullptr;
    }
    try {
        const auto module = py::reinterpret_borrow<py::module_>(torch);
        auto* types = new torch_types; // for the process's life, like torch's own objects
        types->tensor = py::object(module.attr("Tensor")).release().ptr();
        types->parameter = py::object(module.attr("nn").attr("Parameter")).release().ptr();
        types->strided = py::object(module.attr("strided")).release().ptr();
        const std::pair<const char*, dtype> names[] = {
            {"float64", dtype::f64()},   {"float32", dtype::f32()}, {"float16", dtype::f16()},
            {"bfloat16", dtype::bf16()}, {"int64", dtype::i64()},   {"int32", dtype::i32()},
            {"int16", dtype::i16()},     {"int8", dtype::i8()},     {"uint8", dtype::u8()},
            {"bool", dtype::boolean()}};
        for (const auto& [name, type] : names) {
            types->dtypes.emplace_back(py::object(module.attr(name)).release().ptr(), type);
        }
        types->is_cpu = interned("is_cpu");
        types->is_cuda = interned("is_cuda");
        types->layout = interned("layout");
        types->dtype_name = interned("dtype");
        types->is_contiguous = interned("is_contiguous");
        types->shape = interned("shape");
        types->data_ptr = interned("data_ptr");
        found = types;
    } catch (py::error_already_set&) {
        return nullptr;
    }
    return found;
}

// `object.<name>()`, likewise, with no bound method made on the way.
py::object call_method(py::handle object, PyObject* name)
{
    auto value = py::reinterpret_steal<py::object>(PyObject_CallMethodNoArgs(object.ptr(), name));
    if (!value) {
        throw py::error_already_set();
    }
    return value;
}

// A view of `dims` elements of `type` at `data`, named, its byte count checked for overflow:
// what both ways of reading a tensor end with (its owner set by the caller).
result<tensor_view> view_of(std::string name, dtype type, tensor_view::extents dims,
                            std::uint8_t* data)
{
    const auto count = checked_num_elements(dims);
    if (!count || count.value() > SIZE_MAX / type.size()) {
        const ruda::shape extents(dims.begin(), dims.end());
        return refusal(errc::shape_overflow, name,
                       "its shape " + to_string(extents) + " overflows");
    }
    tensor_view view;
    view.name = std::move(name);
    view.id = param_id::from_name(view.name);
    view.type = type;
    view.dims = std::move(dims);
    view.bytes = count.value() * type.size();
    view.data = data;
    return view;
}

// An exact torch.Tensor on the host read through its attributes, with the checks DLPack's path
// makes.
result<tensor_view> borrow_torch_tensor(py::handle tensor, std::string name,
                                        const torch_types& torch)
{
    const py::object layout = attribute(tensor, torch.layout);
    if (layout.ptr() != torch.strided) {
        return refusal(errc::invalid_tensor, name,
                       "it is " + py::str(layout).cast<std::string>() +
                           ", not a dense (strided) tensor");
    }
    const py::object type_object = attribute(tensor, torch.dtype_name);
    const auto known = std::find_if(torch.dtypes.begin(), torch.dtypes.end(),
                                    [&](const auto& d) { return d.first == type_object.ptr(); });
    if (known == torch.dtypes.end()) {
        return refusal(errc::invalid_dtype, name,
                       py::str(type_object).cast<std::string>() +
                           " is no dtype ruda has (f64, f32, f16, bf16, integers, bool)");
    }
    if (call_method(tensor, torch.is_contiguous).ptr() != Py_True) {
        return refusal(errc::invalid_tensor, name, not_contiguous);
    }
    // A torch.Size, a tuple of ints: one attribute, not dim() and a size(d) per dimension.
    const py::object size = attribute(tensor, torch.shape);
    if (PyTuple_Check(size.ptr()) == 0) {
        return refusal(errc::invalid_tensor, name, "its shape is not a tuple");
    }
    const Py_ssize_t rank = PyTuple_GET_SIZE(size.ptr());
    tensor_view::extents dims(static_cast<std::size_t>(rank));
    for (Py_ssize_t d = 0; d < rank; ++d) {
        const Py_ssize_t extent = PyLong_AsSsize_t(PyTuple_GET_ITEM(size.ptr(), d));
        if (extent < 0) {
            if (PyErr_Occurred() != nullptr) {
                throw py::error_already_set();
            }
            return refusal(errc::invalid_tensor, name, "a negative extent");
        }
        dims[static_cast<std::size_t>(d)] = static_cast<std::size_t>(extent);
    }
    void* address = PyLong_AsVoidPtr(call_method(tensor, torch.data_ptr).ptr());
    if (address == nullptr && PyErr_Occurred() != nullptr) {
        throw py::error_already_set();
    }
    BOOST_OUTCOME_TRY(auto view, view_of(std::move(name), known->second, std::move(dims),
                                         static_cast<std::uint8_t*>(address)));
    view.tensor = python_reference{tensor};
    return view;
}

// The DLPack device type of a producer's tensor, from its `__dlpack_device__` (the host when it
// has none: its capsule says for sure); refused unless ruda reads memory there.
result<int> device_of(py::handle tensor, const std::string& name)
{
    if (!py::hasattr(tensor, "__dlpack_device__")) {
        return kDLCPU;
    }
    py::tuple device;
    try {
        device = tensor.attr("__dlpack_device__")();
    } catch (py::error_already_set& e) {
        return refusal(errc::unsupported_device, name,
                       "its __dlpack_device__ refused: " + std::string{e.what()});
    }
    const int type = device[0].cast<int>();
    if (type == kDLCPU || type == kDLCUDAHost || type == kDLCUDA) {
        return type;
    }
    return refusal(errc::unsupported_device, name,
                   "it is on " + device_name(type) + " device " +
                       py::str(device[1]).cast<std::string>() +
                       "; ruda reads host tensors (CPU or pinned memory) and CUDA tensors: "
                       "copy it to the CPU first");
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

// The tensor in a capsule from `__dlpack__`, asked for as on device type `asked`.
result<tensor_view> from_capsule(const py::object& capsule, std::string name, int asked)
{
    if (PyCapsule_IsValid(capsule.ptr(), "dltensor") == 0) {
        return refusal(errc::invalid_tensor, name, "its __dlpack__ gave no unused DLPack capsule");
    }
    auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
    // Consumed: from now on this view, not the capsule, calls the producer's deleter.
    PyCapsule_SetName(capsule.ptr(), "used_dltensor");
    std::unique_ptr<DLManagedTensor, dlpack_release> owner{managed};
    const DLTensor& t = managed->dl_tensor;
    const bool on_gpu = t.device.device_type == kDLCUDA;
    if (on_gpu != (asked == kDLCUDA)) {
        // A CUDA capsule asked for without a stream is not ordered after its producer's work.
        return refusal(errc::invalid_tensor, name,
                       "its __dlpack_device__ and its capsule name different devices");
    }
    if (!on_gpu && t.device.device_type != kDLCPU && t.device.device_type != kDLCUDAHost) {
        return refusal(errc::unsupported_device, name,
                       "it is on " + device_name(t.device.device_type) +
                           "; ruda reads host tensors and CUDA tensors");
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
    if (on_gpu && !type->is_float()) {
        return refusal(errc::invalid_dtype, name,
                       "it is " + to_string(*type) + " on CUDA device " +
                           std::to_string(t.device.device_id) +
                           "; ruda reads float tensors (f64, f32, f16, bf16) on a GPU: copy it "
                           "to the CPU first");
    }
    if (t.ndim < 0 || static_cast<std::size_t>(t.ndim) > 64) {
        return refusal(errc::invalid_tensor, name,
                       std::to_string(t.ndim) + " dimensions (at most 64)");
    }
    tensor_view::extents dims;
    for (int d = 0; d < t.ndim; ++d) {
        if (t.shape[d] < 0) {
            return refusal(errc::invalid_tensor, name, "a negative extent");
        }
        dims.push_back(static_cast<std::size_t>(t.shape[d]));
    }
    if (!compact(t)) {
        return refusal(errc::invalid_tensor, name, not_contiguous);
    }
    BOOST_OUTCOME_TRY(auto view, view_of(std::move(name), *type, std::move(dims),
                                         static_cast<std::uint8_t*>(t.data) + t.byte_offset));
    if (on_gpu) {
        view.cuda_ordinal = t.device.device_id;
    }
    view.owner = std::move(owner);
    return view;
}

// A tensor through its `__dlpack__`; a CUDA one asked for on the legacy default stream.
result<tensor_view> borrow_dlpack(py::handle tensor, std::string name)
{
    auto exporter =
        py::reinterpret_steal<py::object>(PyObject_GetAttrString(tensor.ptr(), "__dlpack__"));
    if (!exporter) {
        PyErr_Clear();
        return refusal(errc::invalid_tensor, name,
                       "a " + type_name(tensor) +
                           " has no __dlpack__; pass a torch tensor, a NumPy array or another "
                           "DLPack tensor");
    }
    // The device first, so that a producer on one exports what is ordered on our stream.
    int device = kDLCPU;
    if (!host_producer(tensor)) {
        BOOST_OUTCOME_TRY(device, device_of(tensor, name));
    }
    py::object capsule;
    try {
        capsule =
            device == kDLCUDA ? exporter(py::arg("stream") = dlpack_legacy_stream) : exporter();
    } catch (py::error_already_set& e) {
        return refusal(errc::invalid_tensor, name,
                       "its __dlpack__ refused: " + std::string{e.what()});
    }
    return from_capsule(capsule, std::move(name), device);
}

} // namespace

PyObject* interned(const char* text)
{
    PyObject* name = PyUnicode_InternFromString(text);
    if (name == nullptr) {
        throw py::error_already_set();
    }
    return name;
}

py::object attribute(py::handle object, PyObject* name)
{
    auto value = py::reinterpret_steal<py::object>(PyObject_GetAttr(object.ptr(), name));
    if (!value) {
        throw py::error_already_set();
    }
    return value;
}

void dlpack_release::operator()(DLManagedTensor* managed) const noexcept
{
    if (managed->deleter != nullptr) {
        managed->deleter(managed);
    }
}

void release_all(std::vector<tensor_view>& views)
{
    if (views.empty()) {
        return; // no GIL to take
    }
    const bool held = with_gil([&views] {
        for (tensor_view& view : views) {
            view.owner.reset();
            view.tensor.reset();
        }
    });
    if (!held) {
        for (tensor_view& view : views) {
            view.owner.release();             // Python is exiting: its deleters must not run now
            view.tensor = python_reference{}; // leaked likewise (no GIL: not dropped)
        }
    }
}

std::optional<dtype> dtype_of_dlpack(std::uint8_t code, std::uint8_t bits, std::uint16_t lanes)
{
    for (const dlpack_kind& k : dlpack_kinds) {
        if (lanes == 1 && k.code == code && k.bits == bits) {
            return dtype::from_kind(k.kind);
        }
    }
    return std::nullopt;
}

std::optional<DLDataType> dlpack_type_of(dtype::kind kind)
{
    for (const dlpack_kind& k : dlpack_kinds) {
        if (k.kind == kind && k.code != dlpack_bool) {
            return DLDataType{k.code, k.bits, 1};
        }
    }
    return std::nullopt;
}

result<tensor_view> borrow_tensor(py::handle tensor, std::string name)
{
    if (const torch_types* torch = torch_if_imported()) {
        const auto* type = reinterpret_cast<PyObject*>(Py_TYPE(tensor.ptr()));
        if (type == torch->tensor || type == torch->parameter) {
            if (attribute(tensor, torch->is_cpu).ptr() == Py_True) {
                return borrow_torch_tensor(tensor, std::move(name), *torch);
            }
            if (attribute(tensor, torch->is_cuda).ptr() == Py_True) {
                // torch's __dlpack__ refuses a tensor that requires grad: an alias that does not.
                return borrow_dlpack(tensor.attr("detach")(), std::move(name));
            }
        }
    }
    return borrow_dlpack(tensor, std::move(name));
}

} // namespace ruda::python
