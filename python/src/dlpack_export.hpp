// Records out through DLPack: a capsule over a record entry's bytes that keeps the record alive
// until the consumer's view is gone, and holds nothing of Python (its deleter runs anywhere).
#pragma once

#include <pybind11/pybind11.h>

namespace ruda::python {

struct tensor_handle;

/// `__dlpack__` of a record's tensor: the CPU only (`dl_device` other than (1, 0) is a
/// BufferError), `stream` ignored as the protocol says for the CPU, `copy=True` exports a copy.
/// Bools go out as uint8 (DLPack 0.6 has no bool); quantized tensors are refused.
[[nodiscard]] pybind11::capsule export_dlpack(const tensor_handle& tensor,
                                              const pybind11::object& stream,
                                              const pybind11::object& max_version,
                                              const pybind11::object& dl_device,
                                              const pybind11::object& copy);

} // namespace ruda::python
