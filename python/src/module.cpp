// `ruda._ruda`: the C++ core for Python. The pure-Python package `ruda` wraps it.
#include "checkpoints.hpp"
#include "cuda_devices.hpp"
#include "errors.hpp"
#include "future.hpp"
#include "records.hpp"
#include "runtime.hpp"

#include <ruda/version.hpp>

#include <pybind11/pybind11.h>

namespace py = pybind11;

namespace ruda::python {
void bind_manager(py::module_& m);
void bind_operations(py::module_& m);
} // namespace ruda::python

PYBIND11_MODULE(_ruda, m)
{
    m.doc() = "ruda's C++ core: snapshots, checkpoint files and managers, DLPack in and out.";
    m.attr("__version__") = RUDA_VERSION_STRING;
    ruda::python::install_runtime_hooks();
    ruda::python::bind_errors(m);
    ruda::python::bind_future(m);
    ruda::python::bind_records(m);
    ruda::python::bind_checkpoints(m);
    ruda::python::bind_manager(m);
    ruda::python::bind_cuda_devices(m);
    ruda::python::bind_operations(m);
}
