#include "cuda_devices.hpp"

#include "errors.hpp"

#include <pybind11/stl.h>

#include <unistd.h>

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

namespace py = pybind11;

namespace ruda::python {
namespace {

// Never destroyed: a device's worker may still run at exit, and a forked child's copies of
// the parent's devices must not be closed (their threads do not exist there).
struct open_devices {
    std::mutex mutex;
    std::map<int, cuda_device> by_ordinal;
    pid_t opened_in = 0; // the process that opened them
};

open_devices& devices()
{
    static auto* all = new open_devices;
    return *all;
}

// Under the registry's lock.
std::optional<error> refuse_after_fork(const open_devices& all)
{
    if (!all.by_ordinal.empty() && all.opened_in != ::getpid()) {
        return error{errc::device_unavailable,
                     "CUDA devices were opened before this process forked; a forked child "
                     "cannot use its parent's CUDA state (start it with spawn instead)"};
    }
    return std::nullopt;
}

// Under the registry's lock, once `refuse_after_fork` has passed: opens and keeps the device.
result<cuda_device> open_and_keep(open_devices& all, cuda_device::options options)
{
    const int ordinal = options.ordinal;
    BOOST_OUTCOME_TRY(auto device, cuda_device::open(std::move(options)));
    all.opened_in = ::getpid();
    all.by_ordinal.emplace(ordinal, device);
    return device;
}

// `ruda.open_cuda_device`: opening may initialise the driver, so not under the GIL.
cuda_device open_with(int ordinal, const std::string& driver_library, std::size_t piece_bytes,
                      std::size_t staging_bytes, bool pinned_records,
                      std::size_t max_cached_record_bytes, std::size_t device_staging_bytes)
{
    cuda_device::options options;
    options.ordinal = ordinal;
    options.driver_library = driver_library;
    options.piece_bytes = piece_bytes;
    options.staging_bytes = staging_bytes;
    options.pinned_records = pinned_records;
    options.max_cached_record_bytes = max_cached_record_bytes;
    options.device_staging_bytes = device_staging_bytes;
    std::optional<result<cuda_device>> opened;
    bool already = false;
    {
        const py::gil_scoped_release release;
        open_devices& all = devices();
        const std::lock_guard lock{all.mutex};
        if (auto refused = refuse_after_fork(all)) {
            opened = *refused;
        } else if (all.by_ordinal.count(ordinal) != 0) {
            already = true;
        } else {
            opened = open_and_keep(all, std::move(options));
        }
    }
    if (already) {
        throw_error("invalid_argument",
                    "CUDA device " + std::to_string(ordinal) +
                        " is already open: open it before the first snapshot, save or "
                        "restore of its tensors, and once");
    }
    return value_or_raise(std::move(*opened));
}

py::dict counters_of(const cuda_device& device)
{
    const cuda_device::counters c = device.stats();
    py::dict out;
    out["reads_completed"] = c.reads_completed;
    out["reads_failed"] = c.reads_failed;
    out["reads_cancelled"] = c.reads_cancelled;
    out["bytes_read"] = c.bytes_read;
    out["pieces"] = c.pieces;
    out["completions"] = c.completions;
    out["staged_tensors"] = c.staged_tensors;
    out["unstaged_tensors"] = c.unstaged_tensors;
    out["uploads"] = c.uploads;
    out["bytes_uploaded"] = c.bytes_uploaded;
    return out;
}

} // namespace

result<cuda_device> cuda_device_for(int ordinal)
{
    open_devices& all = devices();
    const std::lock_guard lock{all.mutex};
    if (auto refused = refuse_after_fork(all)) {
        return *refused;
    }
    if (const auto found = all.by_ordinal.find(ordinal); found != all.by_ordinal.end()) {
        return found->second;
    }
    cuda_device::options options;
    options.ordinal = ordinal;
    return open_and_keep(all, std::move(options));
}

void bind_cuda_devices(py::module_& m)
{
    const cuda_device::options defaults;
    py::class_<cuda_device>(m, "CudaDevice",
                            "A GPU ruda reads CUDA tensors on and restores them to: its copy "
                            "streams, worker thread, pinned buffers and staging memory.")
        .def_property_readonly("ordinal", &cuda_device::ordinal)
        .def_property_readonly("name", &cuda_device::name, "The driver's name for the GPU.")
        .def_property_readonly("driver_version", &cuda_device::driver_version,
                               "cuDriverGetVersion: 12040 is CUDA 12.4.")
        .def(
            "stats", [](const cuda_device& d) { return counters_of(d); },
            "What the device has done so far: reads, bytes, copies, staged tensors, uploads.")
        .def("__repr__", [](const cuda_device& d) {
            return "<ruda.CudaDevice " + std::to_string(d.ordinal()) + " " + d.name() + ">";
        });
    m.def("_open_cuda_device", &open_with, py::arg("ordinal"), py::arg("driver_library"),
          py::arg("piece_bytes"), py::arg("staging_bytes"), py::arg("pinned_records"),
          py::arg("max_cached_record_bytes"), py::arg("device_staging_bytes"));
    m.def("_cuda_device", [](int ordinal) {
        std::optional<result<cuda_device>> device;
        {
            const py::gil_scoped_release release;
            device = cuda_device_for(ordinal);
        }
        return value_or_raise(std::move(*device));
    });
    py::dict options;
    options["driver_library"] = defaults.driver_library;
    options["piece_bytes"] = defaults.piece_bytes;
    options["staging_bytes"] = defaults.staging_bytes;
    options["pinned_records"] = defaults.pinned_records;
    options["max_cached_record_bytes"] = defaults.max_cached_record_bytes;
    options["device_staging_bytes"] = defaults.device_staging_bytes;
    m.attr("_cuda_defaults") = options;
}

} // namespace ruda::python
