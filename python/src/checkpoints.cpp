#include "checkpoints.hpp"

#include "errors.hpp"
#include "records.hpp"

#include <ruda/checkpoint/checkpoint_manager.hpp>

#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace ruda::python {
namespace {

record_handle group_record(const checkpoint_handle& c, const gradients_params_record& group)
{
    // Shares the checkpoint: the record lives as long as any group of it is held.
    return record_handle{std::shared_ptr<const gradients_params_record>{c.contents, &group}};
}

py::object identity_field(const checkpoint_handle& c, auto field)
{
    const auto& identity = c.contents->identity();
    if (!identity) {
        return py::none();
    }
    return py::cast(field(*identity));
}

template <class T>
std::optional<T> optional_item(const py::dict& given, const char* key)
{
    if (!given.contains(key) || given[key].is_none()) {
        return std::nullopt;
    }
    return given[key].cast<T>();
}

} // namespace

py::object present_checkpoint(std::shared_ptr<const checkpoint> contents, bool allow_pickle)
{
    py::object out = py::cast(checkpoint_handle{std::move(contents)});
    out.attr("_allow_pickle") = py::bool_(allow_pickle);
    return out;
}

py::object present_saved(const saved_checkpoint& saved)
{
    py::object cleanup = py::none();
    if (saved.cleanup_failure) {
        cleanup = error_object(*saved.cleanup_failure);
    }
    return py::module_::import("ruda._saved")
        .attr("Saved")(saved.step, saved.path.string(), saved.bytes, cleanup);
}

std::optional<std::string> pickle_refusal(const checkpoint& contents, bool allow_pickle)
{
    const checkpoint_section* listed = contents.find(pickled_sections);
    if (allow_pickle || listed == nullptr) {
        return std::nullopt;
    }
    return "The checkpoint holds pickled sections (" +
           std::string(listed->bytes.begin(), listed->bytes.end()) +
           "), and unpickling runs code the file chooses: load it with allow_pickle=True only "
           "if you trust where it came from";
}

void finish_load(future_state& state, result<checkpoint> loaded, bool allow_pickle,
                 const python_callback* progress)
{
    if (!loaded) {
        state.fail(load_failure(std::move(loaded).error(), progress));
        return;
    }
    if (auto refusal = pickle_refusal(loaded.value(), allow_pickle)) {
        state.fail("unsafe_section", std::move(*refusal));
        return;
    }
    auto value = std::make_shared<const checkpoint>(std::move(loaded).value());
    state.succeed([value, allow_pickle] { return present_checkpoint(value, allow_pickle); });
}

load_request make_load_request(const py::dict& given, py::object progress_callable)
{
    load_request request;
    request.state = std::make_shared<future_state>();
    request.progress = share_callback(std::move(progress_callable));
    request.allow_pickle = optional_item<bool>(given, "allow_pickle").value_or(false);
    checkpoint_load_options& options = request.options;
    options.only_groups = optional_item<std::vector<std::string>>(given, "groups");
    options.only_names = optional_item<std::vector<std::string>>(given, "names");
    if (auto ids = optional_item<std::vector<std::uint64_t>>(given, "ids")) {
        options.only_ids.emplace();
        for (const std::uint64_t id : *ids) {
            options.only_ids->push_back(param_id{id});
        }
    }
    options.verify_checksums = optional_item<bool>(given, "verify").value_or(true);
    options.mapping = optional_item<bool>(given, "mmap").value_or(true)
                          ? load_mapping::when_unchangeable
                          : load_mapping::never;
    options.run_id = optional_item<std::string>(given, "run_id").value_or("");
    options.readers = optional_item<unsigned>(given, "readers").value_or(0);
    if (auto most = optional_item<std::uint64_t>(given, "max_header_bytes")) {
        options.max_header_bytes = *most;
    }
    // The state is held weakly: the options may outlive the load in a manager's copy.
    options.on_progress =
        [progress = request.progress,
         weak = std::weak_ptr<future_state>{request.state}](const checkpoint_progress& p) {
            const auto held = weak.lock();
            if (held && held->cancel_requested()) {
                throw std::runtime_error("cancelled");
            }
            if (progress && !(*progress)(p.bytes_done, p.bytes_total)) {
                throw std::runtime_error("the progress callback raised");
            }
        };
    return request;
}

error load_failure(error why, const python_callback* progress)
{
    if (why == errc::cancelled && progress != nullptr) {
        if (auto raised = progress->failure()) {
            return error{errc::cancelled,
                         "The progress callback raised " + *raised + "; the operation stopped"};
        }
    }
    return why;
}

void bind_checkpoints(py::module_& m)
{
    py::class_<checkpoint_handle>(
        m, "Checkpoint",
        "A loaded checkpoint: its tensor groups (\"gradients\" first) as ruda.Record, its "
        "sections as bytes, and the run and step that wrote it.",
        py::dynamic_attr())
        .def_property_readonly(
            "gradients",
            [](const checkpoint_handle& c) { return group_record(c, c.contents->gradients()); },
            "The \"gradients\" group (empty when the checkpoint holds none).")
        .def_property_readonly(
            "groups",
            [](const checkpoint_handle& c) {
                py::dict out;
                for (const tensor_group& g : c.contents->groups()) {
                    out[py::str(g.name)] = py::cast(group_record(c, g.tensors));
                }
                return out;
            },
            "Every group by name, \"gradients\" first.")
        .def(
            "__getitem__",
            [](const checkpoint_handle& c, const std::string& name) {
                const gradients_params_record* group = c.contents->group(name);
                if (group == nullptr) {
                    PyErr_SetObject(PyExc_KeyError, py::str(name).ptr());
                    throw py::error_already_set();
                }
                return group_record(c, *group);
            },
            "Group name's record.")
        .def("__contains__",
             [](const checkpoint_handle& c, const std::string& name) {
                 return c.contents->group(name) != nullptr;
             })
        .def_property_readonly(
            "raw_sections",
            [](const checkpoint_handle& c) {
                py::dict out;
                for (const checkpoint_section& s : c.contents->sections()) {
                    out[py::str(s.name)] =
                        py::bytes(reinterpret_cast<const char*>(s.bytes.data()), s.bytes.size());
                }
                return out;
            },
            "Every section's bytes by name, as stored (pickled sections still pickled).")
        .def_property_readonly(
            "step",
            [](const checkpoint_handle& c) {
                return identity_field(c, [](const run_identity& i) { return i.step; });
            },
            "The step the file records, None when it records no run.")
        .def_property_readonly(
            "run_id",
            [](const checkpoint_handle& c) {
                return identity_field(c, [](const run_identity& i) { return i.run_id; });
            },
            "The run that wrote it, None when the file does not say.")
        .def_property_readonly(
            "parent_run_id",
            [](const checkpoint_handle& c) {
                return identity_field(c, [](const run_identity& i) { return i.parent_run_id; });
            },
            "The run the writer resumed (\"\" for a fresh run), None when the file does not "
            "say.")
        .def("__repr__", [](const checkpoint_handle& c) {
            return "ruda.Checkpoint(" + std::to_string(c.contents->groups().size()) + " groups, " +
                   std::to_string(c.contents->sections().size()) + " sections)";
        });
}

} // namespace ruda::python
