// The module's functions: snapshot, one checkpoint file saved and loaded, safetensors out and
// in, and a record's tensors copied into existing tensors in place.
#include "checkpoints.hpp"
#include "cuda_devices.hpp"
#include "errors.hpp"
#include "jobs.hpp"
#include "records.hpp"
#include "save_inputs.hpp"

#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/checkpoint/safetensors.hpp>
#include <ruda/checkpoint/saved_checkpoint.hpp>

#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace ruda::python {

namespace {

py::object present_record(std::shared_ptr<const gradients_params_record> record)
{
    return py::cast(record_handle{std::move(record)});
}

std::shared_ptr<future_state> snapshot(py::handle names, py::handle tensors, bool grads)
{
    auto borrowed =
        std::make_shared<borrowed_tensors>(value_or_raise(borrow_snapshot(names, tensors, grads)));
    return start_job(
        [borrowed](future_state& state) {
            return borrowed->read([&state] { return state.cancel_requested(); });
        },
        &present_record);
}

py::tuple save_file(const std::filesystem::path& path, py::handle groups, py::handle sections,
                    unsigned writers, py::object progress)
{
    auto inputs = value_or_raise(capture(groups, sections));
    auto callback = share_callback(std::move(progress));
    auto staged = std::make_shared<future_state>();
    auto durable = std::make_shared<future_state>(false);
    post([path, inputs = std::make_shared<save_inputs>(std::move(inputs)), writers, callback,
          staged, durable]() mutable {
        auto contents =
            assemble(std::move(*inputs), [&staged] { return staged->cancel_requested(); });
        if (!contents || !staged->claim()) {
            const error why =
                contents ? error{errc::cancelled, "The save was cancelled"} : contents.error();
            staged->fail(why);
            durable->fail(why);
            return;
        }
        staged->succeed([] { return py::none(); });
        checkpoint_save_options options;
        options.writers = writers;
        if (callback) {
            options.on_progress = [callback](const checkpoint_progress& p) {
                if (!(*callback)(p.bytes_done, p.bytes_total)) {
                    throw std::runtime_error("the progress callback raised");
                }
            };
        }
        auto bytes = save_checkpoint_file(path, contents.value(), options);
        if (!bytes) {
            durable->fail(load_failure(std::move(bytes).error(), callback.get()));
            return;
        }
        durable->succeed([path, size = bytes.value()] {
            return present_saved(saved_checkpoint{0, path, size, std::nullopt});
        });
    });
    return py::make_tuple(staged, durable);
}

std::shared_ptr<future_state> load_file(const std::filesystem::path& path, const py::dict& given,
                                        py::object progress)
{
    auto request = make_load_request(given, std::move(progress));
    auto state = request.state;
    post([path, request = std::move(request)] {
        if (request.state->done()) {
            return;
        }
        std::error_code ec;
        if (!std::filesystem::exists(path, ec) && !ec) {
            request.state->fail(error{errc::not_found, "No checkpoint file " + path.string()});
            return;
        }
        finish_load(*request.state, load_checkpoint_file(path, request.options),
                    request.allow_pickle, request.progress.get());
    });
    return state;
}

std::shared_ptr<future_state> export_safetensors_file(const std::filesystem::path& path,
                                                      const record_handle& record)
{
    return start_job(
        [path, record = record.record](future_state&) { return export_safetensors(*record, path); },
        [](const std::shared_ptr<const std::uint64_t>& bytes) { return py::int_(*bytes); });
}

std::shared_ptr<future_state> import_safetensors_file(const std::filesystem::path& path)
{
    return start_job([path](future_state&) { return import_safetensors(path); }, &present_record);
}

// One target and what goes into it, checked before any byte is written; a CUDA target's
// device, opened before any byte is written too.
struct copy_plan {
    tensor_view target;
    tensor_data source;
    std::optional<cuda_device> device;
};

// How `restore` pairs a record with its targets.
struct pairing {
    bool every_entry = true;  // each entry must have a target (else unknown_parameter)
    bool every_target = true; // each target must have an entry (else not_found)
};

// The record's entries paired with `(name, tensor)` targets by name, each checked: the
// target's dtype is the entry's original dtype and its shape the entry's.
std::vector<copy_plan> plan_copies(py::handle names, py::handle tensors, bool grads,
                                   const record_handle& record, pairing rules)
{
    const auto& keys = record.keys();
    const auto& entries = record.record->entries();
    // Names first, so that a wrong model is named as such before any tensor is looked at.
    std::vector<char> matched(entries.size(), 0);
    std::vector<std::pair<py::object, std::size_t>> pairs;
    const auto name_list = py::reinterpret_borrow<py::list>(names);
    const auto tensor_list = py::reinterpret_borrow<py::list>(tensors);
    if (name_list.size() != tensor_list.size()) {
        throw py::value_error("as many names as tensors");
    }
    for (std::size_t i = 0; i < name_list.size(); ++i) {
        const auto name = name_list[i].cast<std::string>();
        const auto at = keys.find(name);
        if (at == keys.end()) {
            if (rules.every_target) {
                throw_error(error{errc::not_found, "The record has no tensor " + name});
            }
            continue;
        }
        matched[at->second] = 1;
        py::object target = tensor_list[i];
        if (grads) {
            target = target.attr("grad");
        }
        pairs.emplace_back(std::move(target), at->second);
    }
    if (rules.every_entry) {
        for (std::size_t i = 0; i < entries.size(); ++i) {
            if (matched[i] == 0) {
                throw_error(
                    error{errc::unknown_parameter, "Tensor " + key_of(entries[i]) +
                                                       " of the record has no target of its name"});
            }
        }
    }
    std::vector<copy_plan> plans;
    plans.reserve(pairs.size());
    for (const auto& [tensor, index] : pairs) {
        const gradient_entry& entry = entries[index];
        auto target = value_or_raise(borrow_tensor(tensor, key_of(entry)));
        if (!(target.type == entry.dtype)) {
            throw_error(error{errc::invalid_dtype, "Tensor " + target.name + ": the target is " +
                                                       to_string(target.type) + ", the record's " +
                                                       to_string(entry.dtype)});
        }
        if (!std::equal(target.dims.begin(), target.dims.end(), entry.data.shape().begin(),
                        entry.data.shape().end())) {
            throw_error(
                error{errc::shape_mismatch, "Tensor " + target.name + ": the target's shape is " +
                                                to_string(target.shape()) + ", the record's " +
                                                to_string(entry.data.shape())});
        }
        std::optional<cuda_device> device;
        if (target.cuda_ordinal) {
            std::optional<result<cuda_device>> opened;
            {
                const py::gil_scoped_release release; // opening may initialise the driver
                opened = cuda_device_for(*target.cuda_ordinal);
            }
            if (!*opened) {
                throw_error(error{opened->error().code(),
                                  "Tensor " + target.name + ": " + opened->error().message()});
            }
            device = std::move(*opened).value();
        }
        plans.push_back({std::move(target), entry.data, std::move(device)});
    }
    return plans;
}

// Every check first, then every copy, GIL released: the targets change all or not at all
// (unless a conversion fails, which the checks make impossible for the dtypes ruda restores).
void restore(py::handle names, py::handle tensors, bool grads, const record_handle& record,
             bool every_entry, bool every_target, bool check_only)
{
    // The plans die with the GIL held (here), which drops every borrowed tensor at once.
    std::vector<copy_plan> plans =
        plan_copies(names, tensors, grads, record, {every_entry, every_target});
    if (check_only) {
        return;
    }
    std::optional<error> failure;
    {
        const py::gil_scoped_release release;
        for (copy_plan& plan : plans) {
            auto data = plan.source.dtype() == plan.target.type
                            ? result<tensor_data>{plan.source}
                            : plan.source.convert(plan.target.type);
            if (!data) {
                failure = std::move(data).error();
                break;
            }
            const storage& bytes = data.value().bytes();
            if (bytes.size() != plan.target.bytes) {
                failure = error{errc::byte_count_mismatch,
                                "Tensor " + plan.target.name + ": the record holds " +
                                    std::to_string(bytes.size()) + " bytes for " +
                                    std::to_string(plan.target.bytes)};
                break;
            }
            if (plan.device) {
                // After the work on the legacy default stream, where the producer made its own
                // work visible; that stream then waits for the copies.
                auto uploaded =
                    plan.device->upload_into(reinterpret_cast<cuda_device_ptr>(plan.target.data),
                                             bytes.span(), cuda_stream{nullptr});
                if (!uploaded) {
                    failure = error{uploaded.error().code(), "Tensor " + plan.target.name + ": " +
                                                                 uploaded.error().message()};
                    break;
                }
            } else if (!bytes.empty()) {
                std::memcpy(plan.target.data, bytes.data(), bytes.size());
            }
        }
    }
    if (failure) {
        throw_error(*failure);
    }
}

} // namespace

void bind_operations(py::module_& m)
{
    m.def("_snapshot", &snapshot, py::arg("names"), py::arg("tensors"), py::arg("grads"));
    m.def("_save_file", &save_file, py::arg("path"), py::arg("groups"), py::arg("sections"),
          py::arg("writers"), py::arg("progress"));
    m.def("_load_file", &load_file, py::arg("path"), py::arg("options"), py::arg("progress"));
    m.def("_export_safetensors", &export_safetensors_file, py::arg("path"), py::arg("record"));
    m.def("_import_safetensors", &import_safetensors_file, py::arg("path"));
    m.def("_restore", &restore, py::arg("names"), py::arg("tensors"), py::arg("grads"),
          py::arg("record"), py::arg("every_entry"), py::arg("every_target"),
          py::arg("check_only"));
}

} // namespace ruda::python
