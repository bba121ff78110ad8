// Tensors in through DLPack: any object with `__dlpack__` (torch, NumPy, JAX, CuPy...) seen as
// host memory ruda reads, checked before a byte is touched.
#pragma once

#include <ruda/error.hpp>
#include <ruda/optim/param_id.hpp>
#include <ruda/tensor/dtype.hpp>
#include <ruda/tensor/tensor_data.hpp>

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ruda::python {

/// A producer's host tensor, borrowed: its memory stays valid while `owner` lives (the
/// producer's deleter runs when it goes, on any thread).
struct host_view {
    std::string name;
    param_id id{0};
    ruda::dtype type = dtype::f32();
    ruda::shape dims;
    std::uint8_t* data = nullptr;
    std::size_t bytes = 0;
    std::shared_ptr<void> owner;
};

/// Borrows `tensor`, GIL held, through its `__dlpack__`: host memory (kDLCPU, kDLCUDAHost),
/// compact row-major, a dtype ruda has. Refusals name the tensor: `errc::invalid_tensor` (no
/// DLPack, the producer refused, not contiguous), `errc::unsupported_device`,
/// `errc::invalid_dtype`.
[[nodiscard]] result<host_view> borrow_host_tensor(pybind11::handle tensor, std::string name);

/// The dtype for a DLPack type code and width; nothing for one ruda lacks.
[[nodiscard]] std::optional<dtype> dtype_of_dlpack(std::uint8_t code, std::uint8_t bits,
                                                   std::uint16_t lanes);

} // namespace ruda::python
