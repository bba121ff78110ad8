// `ruda._CheckpointManager`: the C++ checkpoint_manager, its saves staged by a copy on ruda's
// threads and made durable by its writer thread, its loads run on ruda's threads.
#include "checkpoints.hpp"
#include "errors.hpp"
#include "jobs.hpp"
#include "records.hpp"
#include "save_inputs.hpp"

#include <ruda/checkpoint/checkpoint_manager.hpp>

#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace ruda::python {

namespace {

// One save, from `save()` until its durable outcome is set and the manager released; also an
// operation the interpreter's exit waits for.
class save_in_flight {
public:
    explicit save_in_flight(std::shared_ptr<in_flight_count> saves) : saves_(std::move(saves))
    {
        saves_->add();
    }
    save_in_flight(const save_in_flight&) = delete;
    save_in_flight& operator=(const save_in_flight&) = delete;
    ~save_in_flight() { saves_->remove(); }

private:
    std::shared_ptr<in_flight_count> saves_;
    operation_in_flight operation_;
};

class manager_binding {
public:
    manager_binding(const std::filesystem::path& directory, std::size_t keep, unsigned writers,
                    const std::string& run_id, const std::string& on_newer,
                    std::size_t max_queued_saves, py::object progress)
        : progress_(share_callback(std::move(progress)))
    {
        checkpoint_manager_options options;
        options.keep_last = keep;
        options.save.writers = writers;
        options.run_id = run_id;
        options.max_queued_saves = max_queued_saves;
        if (on_newer == "discard") {
            options.on_newer = newer_checkpoints::discard;
        } else if (on_newer != "refuse") {
            throw_error("invalid_argument",
                        "on_newer is \"refuse\" or \"discard\", not \"" + on_newer + "\"");
        }
        if (progress_) {
            options.save.on_progress = [progress = progress_](const checkpoint_progress& p) {
                if (!(*progress)(p.bytes_done, p.bytes_total)) {
                    throw std::runtime_error("the progress callback raised");
                }
            };
        }
        manager_ = std::make_shared<checkpoint_manager>(directory, std::move(options));
    }

    manager_binding(const manager_binding&) = delete;
    manager_binding& operator=(const manager_binding&) = delete;
    // A manager dropped without close(): its saves' completions need the GIL, so it is
    // released while they finish.
    ~manager_binding()
    {
        if (PyGILState_Check() != 0) {
            const py::gil_scoped_release release;
            saves_->wait_for_none();
            manager_.reset();
        } else {
            saves_->wait_for_none();
        }
    }

    // (staged, durable): staged once the tensors are copied and the write is queued (not
    // cancellable after), durable once the file is on disk.
    py::tuple save(std::uint64_t step, py::handle groups, py::handle sections)
    {
        auto inputs = value_or_raise(capture(groups, sections));
        auto manager = held();
        auto staged = std::make_shared<future_state>();
        auto durable = std::make_shared<future_state>(false);
        auto in_flight = std::make_shared<save_in_flight>(saves_);
        post([manager, step, inputs = std::make_shared<save_inputs>(std::move(inputs)), staged,
              durable, progress = progress_, in_flight]() mutable {
            auto contents =
                assemble(std::move(*inputs), [&staged] { return staged->cancel_requested(); });
            if (!contents) {
                staged->fail(contents.error());
                durable->fail(std::move(contents).error());
                return;
            }
            if (!staged->claim()) {
                durable->fail(error{errc::cancelled, "The save was cancelled; nothing written"});
                return;
            }
            // Blocks while max_queued_saves saves are queued: the trainer waits for the disk.
            pending_save pending = manager->queue_save(step, std::move(contents).value());
            staged->succeed([] { return py::none(); });
            manager.reset(); // the pending save holds what it needs
            pending.async_wait([durable, progress, in_flight](result<saved_checkpoint> saved) {
                if (!saved) {
                    durable->fail(load_failure(std::move(saved).error(), progress.get()));
                } else {
                    durable->succeed(
                        [value = std::move(saved).value()] { return present_saved(value); });
                }
            });
        });
        return py::make_tuple(staged, durable);
    }

    std::shared_ptr<future_state> load(std::optional<std::uint64_t> step, const py::dict& given,
                                       py::object progress)
    {
        auto manager = held();
        auto request = make_load_request(given, std::move(progress));
        auto state = request.state;
        post([manager, step, request = std::move(request)] {
            if (request.state->done()) {
                return;
            }
            const auto& options = request.options;
            finish_load(*request.state,
                        step ? manager->load(*step, options) : manager->load_latest(options),
                        request.allow_pickle, request.progress.get());
        });
        return state;
    }

    std::shared_ptr<future_state> load_newest_valid(const py::dict& given, py::object progress)
    {
        auto manager = held();
        auto request = make_load_request(given, std::move(progress));
        auto state = request.state;
        post([manager, state, request = std::move(request)] {
            if (state->done()) {
                return;
            }
            const bool allow_pickle = request.allow_pickle;
            auto found = manager->load_newest_valid(request.options);
            if (!found) {
                state->fail(load_failure(std::move(found).error(), request.progress.get()));
                return;
            }
            if (auto refusal = pickle_refusal(found.value().contents, allow_pickle)) {
                state->fail("unsafe_section", std::move(*refusal));
                return;
            }
            auto value = std::make_shared<newest_valid_checkpoint>(std::move(found).value());
            state->succeed([value, allow_pickle] { return present_newest(value, allow_pickle); });
        });
        return state;
    }

    std::vector<std::uint64_t> steps() const { return value_or_raise(held()->steps()); }
    std::optional<std::uint64_t> latest_step() const
    {
        return value_or_raise(held()->latest_step());
    }
    std::string run_id() const { return held()->run_id(); }
    std::string resumed_run_id() const { return held()->resumed_run_id(); }
    std::optional<std::string> latest_run_id() const { return held()->latest_run_id(); }
    std::string path_of(std::uint64_t step) const { return held()->path_of(step).string(); }
    std::string directory() const { return held()->directory().string(); }

    // Waits for the saves made through this object (GIL released), then lets the directory
    // go: the manager's destructor waits for its queue and releases the lock.
    void close()
    {
        std::shared_ptr<checkpoint_manager> last;
        {
            const std::lock_guard lock{mutex_};
            last = std::move(manager_);
        }
        const py::gil_scoped_release release;
        saves_->wait_for_none();
        last.reset();
    }

    bool closed() const
    {
        const std::lock_guard lock{mutex_};
        return manager_ == nullptr;
    }

private:
    static py::object present_newest(const std::shared_ptr<newest_valid_checkpoint>& held,
                                     bool allow_pickle)
    {
        const newest_valid_checkpoint& found = *held;
        py::list skipped;
        for (const skipped_checkpoint& s : found.skipped) {
            skipped.append(py::module_::import("ruda._saved")
                               .attr("Skipped")(s.step, error_object(s.why),
                                                s.run_id ? py::cast(*s.run_id) : py::none()));
        }
        return py::module_::import("ruda._saved")
            .attr("NewestValid")(found.step,
                                 present_checkpoint({held, &found.contents}, allow_pickle), skipped,
                                 found.run_id, found.latest_run_id, found.other_run);
    }

    std::shared_ptr<checkpoint_manager> held() const
    {
        const std::lock_guard lock{mutex_};
        if (!manager_) {
            throw_error("closed", "The checkpoint manager is closed");
        }
        return manager_;
    }

    mutable std::mutex mutex_;
    std::shared_ptr<checkpoint_manager> manager_;
    // The saves made through this object, which close() waits for.
    std::shared_ptr<in_flight_count> saves_ = std::make_shared<in_flight_count>();
    std::shared_ptr<python_callback> progress_;
};

} // namespace

void bind_manager(py::module_& m)
{
    py::class_<manager_binding>(m, "_CheckpointManager")
        .def(py::init<const std::filesystem::path&, std::size_t, unsigned, const std::string&,
                      const std::string&, std::size_t, py::object>(),
             py::arg("directory"), py::arg("keep"), py::arg("writers"), py::arg("run_id"),
             py::arg("on_newer"), py::arg("max_queued_saves"), py::arg("progress"))
        .def("save", &manager_binding::save)
        .def("load", &manager_binding::load)
        .def("load_newest_valid", &manager_binding::load_newest_valid)
        .def("steps", &manager_binding::steps)
        .def("latest_step", &manager_binding::latest_step)
        .def_property_readonly("run_id", &manager_binding::run_id)
        .def_property_readonly("resumed_run_id", &manager_binding::resumed_run_id)
        .def("latest_run_id", &manager_binding::latest_run_id)
        .def("path_of", &manager_binding::path_of)
        .def_property_readonly("directory", &manager_binding::directory)
        .def("close", &manager_binding::close)
        .def_property_readonly("closed", &manager_binding::closed);
}

} // namespace ruda::python
