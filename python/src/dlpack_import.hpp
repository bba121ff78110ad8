// Tensors in through DLPack: any object with `__dlpack__` (torch, NumPy, JAX, CuPy...) seen as
// host or CUDA memory ruda reads, checked before a byte is touched.
#pragma once

#include <ruda/error.hpp>
#include <ruda/optim/param_id.hpp>
#include <ruda/tensor/dtype.hpp>
#include <ruda/tensor/tensor_data.hpp>

#include <boost/container/small_vector.hpp>
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

/// A str made once, for the process's life, whose hash Python keeps: attribute lookups by it
/// skip making and hashing a new str from a C string each time. GIL held.
[[nodiscard]] PyObject* interned(const char* text);

/// `object.<name>`, raising Python's error when it fails. GIL held.
[[nodiscard]] pybind11::object attribute(pybind11::handle object, PyObject* name);

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

/// A producer's tensor, borrowed: its memory stays valid while its owner lives, the DLPack
/// tensor (the producer's deleter runs when it goes: NumPy's takes the GIL) or, for a torch
/// tensor read directly, the tensor itself. Host memory, or CUDA device memory (`cuda_ordinal`
/// set, `data` the device address) made ready on the legacy default stream by the producer.
/// Release many under one GIL hold, `release_all`.
struct tensor_view {
    /// Extents held in the view up to rank 6: borrowing 100,000 tensors under the GIL then
    /// allocates nothing per tensor (the record's shapes are made on ruda's threads).
    using extents = boost::container::small_vector<std::size_t, 6>;

    std::string name;
    param_id id{0};
    ruda::dtype type = dtype::f32();
    extents dims;
    std::uint8_t* data = nullptr;
    std::size_t bytes = 0;
    std::optional<int> cuda_ordinal; // the GPU, for device memory

    [[nodiscard]] ruda::shape shape() const { return {dims.begin(), dims.end()}; }
    std::unique_ptr<DLManagedTensor, dlpack_release> owner;
    python_reference tensor;
};

/// Releases every view's producer tensor, under one GIL hold when the interpreter lives (each
/// NumPy deleter takes the GIL, a cost per tensor without it), else one by one.
void release_all(std::vector<tensor_view>& views);

/// The DLPack stream a consumer passes for CUDA's legacy default stream: the producer makes its
/// work so far visible there, and ruda's reads and uploads are ordered after that stream.
constexpr int dlpack_legacy_stream = 1;

/// Borrows `tensor`, GIL held, through its `__dlpack__`: host memory (kDLCPU, kDLCUDAHost) or
/// a float tensor in CUDA memory (kDLCUDA, asked for with `stream=dlpack_legacy_stream`),
/// compact row-major, a dtype ruda has. A host `torch.Tensor` itself (not a subclass) is read
/// through its own attributes instead (`data_ptr()`, `dtype`, `shape`): the same checks, a
/// quarter of the cost, and a parameter (which requires grad, and so which torch's
/// `__dlpack__` refuses) is taken too; a CUDA one goes through `.detach().__dlpack__`.
/// Refusals name the tensor: `errc::invalid_tensor` (no DLPack, the producer refused, not
/// contiguous, sparse), `errc::unsupported_device`, `errc::invalid_dtype` (also a CUDA tensor
/// that is not float: ruda's CUDA backend reads float tensors).
[[nodiscard]] result<tensor_view> borrow_tensor(pybind11::handle tensor, std::string name);

/// The DLPack type of a dtype kind DLPack 0.6 describes as it is (not flex32, bool or qfloat).
[[nodiscard]] std::optional<DLDataType> dlpack_type_of(dtype::kind kind);

/// The dtype for a DLPack type code and width; nothing for one ruda lacks.
[[nodiscard]] std::optional<dtype> dtype_of_dlpack(std::uint8_t code, std::uint8_t bits,
                                                   std::uint16_t lanes);

} // namespace ruda::python
