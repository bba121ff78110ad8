#include "dlpack_export.hpp"

#include "errors.hpp"
#include "records.hpp"

#include <dlpack/dlpack.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace py = pybind11;

namespace ruda::python {
namespace {

// What the capsule owns: the record (or a copy of the bytes), the shape, the DLPack struct.
struct export_context {
    std::shared_ptr<const void> keep;
    storage bytes;
    std::vector<std::int64_t> shape;
    DLManagedTensor managed{};
};

// Called once by the consumer (or by the capsule's destructor when nobody consumed it).
void delete_context(DLManagedTensor* managed)
{
    delete static_cast<export_context*>(managed->manager_ctx);
}

void destroy_capsule(PyObject* capsule)
{
    if (PyCapsule_IsValid(capsule, "dltensor") == 0) {
        return; // consumed: the consumer calls the deleter
    }
    auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    managed->deleter(managed);
}

DLDataType dlpack_type(const dtype& type, const std::string& key)
{
    switch (type.get_kind()) {
    case dtype::kind::flex32: return *dlpack_type_of(dtype::kind::f32);
    case dtype::kind::boolean: // DLPack 0.6 has no bool: its bytes, as unsigned integers
        return *dlpack_type_of(type.get_bool_store() == bool_store::u32 ? dtype::kind::u32
                                                                        : dtype::kind::u8);
    default:
        if (auto known = dlpack_type_of(type.get_kind())) {
            return *known;
        }
    }
    throw_error(error{errc::invalid_dtype, "Tensor " + key + " is " + to_string(type) +
                                               ", which DLPack cannot describe; read its "
                                               "bytes with tobytes()"});
}

} // namespace

py::capsule export_dlpack(const tensor_handle& tensor, const py::object& stream,
                          const py::object& /*max_version*/, const py::object& dl_device,
                          const py::object& copy)
{
    const gradient_entry& entry = tensor.entry();
    if (!dl_device.is_none()) {
        const auto device = dl_device.cast<py::tuple>();
        if (device[0].cast<int>() != kDLCPU) {
            PyErr_SetString(PyExc_BufferError, "A ruda record lives in host memory: "
                                               "dl_device must be the CPU (1, 0)");
            throw py::error_already_set();
        }
    }
    (void)stream; // host memory: nothing to order, as the protocol says for the CPU
    const DLDataType type = dlpack_type(entry.data.dtype(), key_of(entry));
    auto context = std::make_unique<export_context>();
    const storage& held = entry.data.bytes();
    const bool copied =
        (!copy.is_none() && copy.cast<bool>()) || held.origin() == storage_origin::mapped;
    // A mapped file's pages are read-only and a consumer such as torch may write: copied.
    context->bytes = copied ? storage::copy_of(held.span()) : held;
    if (!copied) {
        context->keep = tensor.record;
    }
    for (const std::size_t extent : entry.data.shape()) {
        context->shape.push_back(static_cast<std::int64_t>(extent));
    }
    static std::uint64_t empty_tensor_home = 0; // some consumers refuse a null data pointer
    DLTensor& t = context->managed.dl_tensor;
    t.data = context->bytes.empty() ? static_cast<void*>(&empty_tensor_home)
                                    : const_cast<std::uint8_t*>(context->bytes.data());
    t.device = {kDLCPU, 0};
    t.ndim = static_cast<std::int32_t>(context->shape.size());
    t.dtype = type;
    t.shape = context->shape.data();
    t.strides = nullptr;
    t.byte_offset = 0;
    context->managed.manager_ctx = context.get();
    context->managed.deleter = &delete_context;
    PyObject* capsule = PyCapsule_New(&context->managed, "dltensor", &destroy_capsule);
    if (capsule == nullptr) {
        throw py::error_already_set();
    }
    context.release();
    return py::reinterpret_steal<py::capsule>(capsule);
}

} // namespace ruda::python
