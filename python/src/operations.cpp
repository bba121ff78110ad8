// The module's functions: snapshot, one checkpoint file saved and loaded, safetensors out and
// in, and a record's tensors copied into existing tensors in place.
#include "checkpoints.hpp"
#include "errors.hpp"
#include "jobs.hpp"
#include "records.hpp"
#include "save_inputs.hpp"

#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/checkpoint/safetensors.hpp>
#include <ruda/checkpoint/saved_checkpoint.hpp>

#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace ruda::python {

py::object present_saved(const saved_checkpoint& saved);

namespace {

py::object present_record(gradients_params_record record)
{
    return py::cast(
        record_handle{std::make_shared<const gradients_params_record>(std::move(record))});
}

std::shared_ptr<future_state> snapshot(py::handle pairs)
{
    auto views = value_or_raise(borrow_all(pairs));
    return start_job(
        [views = std::move(views)](future_state& state) mutable {
            return copy_views(std::move(views), [&state] { return state.cancel_requested(); });
        },
        [](const gradients_params_record& record) { return present_record(record); });
}

py::tuple save_file(const std::filesystem::path& path, py::handle groups, py::handle sections,
                    unsigned writers, py::object progress)
{
    auto inputs = value_or_raise(capture(groups, sections));
    auto callback = share_callback(std::move(progress));
    auto staged = std::make_shared<future_state>();
    auto durable = std::make_shared<future_state>(false);
    post([path, inputs = std::move(inputs), writers, callback, staged, durable]() mutable {
        auto contents =
            assemble(std::move(inputs), [&staged] { return staged->cancel_requested(); });
        if (!contents || !staged->claim()) {
            const error why = contents ? error{errc::cancelled, "The save was cancelled"}
                                       : contents.error();
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
    auto callback = share_callback(std::move(progress));
    auto state = std::make_shared<future_state>();
    auto options = load_options(given, callback, state);
    const bool allow_pickle = given.contains("allow_pickle") && given["allow_pickle"].cast<bool>();
    post([path, options = std::move(options), callback, state, allow_pickle] {
        if (state->done()) {
            return;
        }
        std::error_code ec;
        if (!std::filesystem::exists(path, ec) && !ec) {
            state->fail(error{errc::not_found, "No checkpoint file " + path.string()});
            return;
        }
        finish_load(*state, load_checkpoint_file(path, options), allow_pickle, callback.get());
    });
    return state;
}

std::shared_ptr<future_state> export_safetensors_file(const std::filesystem::path& path,
                                                      const record_handle& record)
{
    return start_job(
        [path, record = record.record](future_state&) {
            return export_safetensors(*record, path);
        },
        [](std::uint64_t bytes) { return py::int_(bytes); });
}

std::shared_ptr<future_state> import_safetensors_file(const std::filesystem::path& path)
{
    return start_job([path](future_state&) { return import_safetensors(path); },
                     [](const gradients_params_record& record) { return present_record(record); });
}

// One target and what goes into it, checked before any byte is written.
struct copy_plan {
    host_view target;
    tensor_data source;
};

// Each `(target, record tensor)` pair checked: the target's dtype and shape are the tensor's.
std::vector<copy_plan> plan_copies(py::handle pairs)
{
    std::vector<copy_plan> plans;
    for (py::handle item : pairs) {
        const auto pair = py::reinterpret_borrow<py::tuple>(item);
        const auto& source = pair[1].cast<const tensor_handle&>();
        const gradient_entry& entry = source.entry();
        auto target = value_or_raise(borrow_host_tensor(pair[0], key_of(entry)));
        if (!(target.type == entry.dtype)) {
            throw_error(error{errc::invalid_dtype, "Tensor " + target.name + ": the target is " +
                                                       to_string(target.type) +
                                                       ", the record's " +
                                                       to_string(entry.dtype)});
        }
        if (target.dims != entry.data.shape()) {
            throw_error(error{errc::shape_mismatch, "Tensor " + target.name +
                                                        ": the target's shape is " +
                                                        to_string(target.dims) +
                                                        ", the record's " +
                                                        to_string(entry.data.shape())});
        }
        plans.push_back({std::move(target), entry.data});
    }
    return plans;
}

// Every check first, then every copy, GIL released: the targets change all or not at all
// (unless a conversion fails, which the checks make impossible for the dtypes ruda restores).
void copy_into(py::handle pairs)
{
    std::vector<copy_plan> plans = plan_copies(pairs);
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
            if (!bytes.empty()) {
                std::memcpy(plan.target.data, bytes.data(), bytes.size());
            }
        }
        plans.clear(); // the producers' deleters, GIL released (NumPy's takes it itself)
    }
    if (failure) {
        throw_error(*failure);
    }
}

} // namespace

void bind_operations(py::module_& m)
{
    m.def("_snapshot", &snapshot, py::arg("pairs"));
    m.def("_save_file", &save_file, py::arg("path"), py::arg("groups"), py::arg("sections"),
          py::arg("writers"), py::arg("progress"));
    m.def("_load_file", &load_file, py::arg("path"), py::arg("options"), py::arg("progress"));
    m.def("_export_safetensors", &export_safetensors_file, py::arg("path"), py::arg("record"));
    m.def("_import_safetensors", &import_safetensors_file, py::arg("path"));
    m.def("_copy_into", &copy_into, py::arg("pairs"));
    m.def(
        "_check_into", [](py::handle pairs) { (void)plan_copies(pairs); }, py::arg("pairs"));
}

} // namespace ruda::python
