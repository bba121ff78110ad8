// Tensors in through DLPack: any object with `__dlpack__` (torch, NumPy, JAX, CuPy...) seen as
// host memory ruda reads, checked before a byte is touched.
#pragma once

#include <ruda/error.hpp>
#include <ruda/optim/param_id.hpp>
#include <ruda/tensor/dtype.hpp>
#include <ruda/tensor/tensor_data.hpp>

#include <dlpack/dlpack.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ruda::python {

/// Calls a DLPack producer's deleter: what releases its tensor.
struct dlpack_release {
    void operator()(DLManagedTensor* managed) const noexcept;
};

/// A reference to a Python object, dropped only under the GIL (`release_all`): one that is
/// still held when it dies without the GIL is leaked, never touched.
class python_reference {
public:
    python_reference() = default;
    explicit python_reference(pybind11::handle object) : object_(object.inc_ref().ptr()) {}
    python_reference(python_reference&& other) noexcept : object_(other.object_)
    {
        other.object_ = nullptr;
    }
    python_reference& operator=(python_reference&& other) noexcept
    {
        std::swap(object_, other.object_);
        return *this;
    }
    ~python_reference() { reset(); }
    /// Drops the reference: call it with the GIL held.
    void reset() noexcept
    {
        if (object_ != nullptr && PyGILState_Check() != 0) {
            Py_DECREF(object_);
        }
        object_ = nullptr;
    }

private:
    PyObject* object_ = nullptr;
};

/// A producer's host tensor, borrowed: its memory stays valid while its owner lives, the
/// DLPack tensor (the producer's deleter runs when it goes: NumPy's takes the GIL) or, for a
/// torch tensor read directly, the tensor itself. Release many under one GIL hold,
/// `release_all`.
struct host_view {
    std::string name;
    param_id id{0};
    ruda::dtype type = dtype::f32();
    ruda::shape dims;
    std::uint8_t* data = nullptr;
    std::size_t bytes = 0;
    std::unique_ptr<DLManagedTensor, dlpack_release> owner;
    python_reference tensor;
};

/// Releases every view's producer tensor, under one GIL hold when the interpreter lives (each
/// NumPy deleter takes the GIL, a cost per tensor without it), else one by one.
void release_all(std::vector<host_view>& views);

/// Borrows `tensor`, GIL held, through its `__dlpack__`: host memory (kDLCPU, kDLCUDAHost),
/// compact row-major, a dtype ruda has. A `torch.Tensor` itself (not a subclass) is read
/// through its own attributes instead (`data_ptr()`, `dtype`, `shape`): the same checks, a
/// quarter of the cost, and a parameter (which requires grad, and so which torch's
/// `__dlpack__` refuses) is taken too. Refusals name the tensor: `errc::invalid_tensor` (no
/// DLPack, the producer refused, not contiguous, sparse), `errc::unsupported_device`,
/// `errc::invalid_dtype`.
[[nodiscard]] result<host_view> borrow_host_tensor(pybind11::handle tensor, std::string name);

/// The DLPack type of a dtype kind DLPack 0.6 describes as it is (not flex32, bool or qfloat).
[[nodiscard]] std::optional<DLDataType> dlpack_type_of(dtype::kind kind);

/// The dtype for a DLPack type code and width; nothing for one ruda lacks.
[[nodiscard]] std::optional<dtype> dtype_of_dlpack(std::uint8_t code, std::uint8_t bits,
                                                   std::uint16_t lanes);

} // namespace ruda::python
