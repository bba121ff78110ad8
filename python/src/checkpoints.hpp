// Loaded checkpoints in Python: `ruda.Checkpoint` (its groups as records, its sections as
// bytes, its run and step), what `load_newest_valid` found, and the load options.
#pragma once

#include "future.hpp"
#include "python_callback.hpp"

#include <ruda/checkpoint/checkpoint.hpp>
#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/checkpoint/saved_checkpoint.hpp>

#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <string>

namespace ruda::python {

struct checkpoint_handle {
    std::shared_ptr<const checkpoint> contents;
};

/// The section that names a checkpoint's pickled sections (a JSON list), which a load refuses
/// unless told `allow_pickle`: unpickling runs code from the file.
inline constexpr const char* pickled_sections = "python.pickled";

/// The Python object of a loaded checkpoint (what a load's future gives); its `sections`
/// unpickle only when `allow_pickle`.
[[nodiscard]] pybind11::object present_checkpoint(std::shared_ptr<const checkpoint> contents,
                                                  bool allow_pickle);

/// The Python object of a durable save (`ruda.Saved`), its cleanup failure an exception object.
[[nodiscard]] pybind11::object present_saved(const saved_checkpoint& saved);

/// Why a load must refuse `contents` (pickled sections, not allowed), or nothing.
[[nodiscard]] std::optional<std::string> pickle_refusal(const checkpoint& contents,
                                                        bool allow_pickle);

/// Completes a load's `state`: its failure (`load_failure`), the pickle refusal, or the
/// checkpoint.
void finish_load(future_state& state, result<checkpoint> loaded, bool allow_pickle,
                 const python_callback* progress);

/// A load's future and what its job needs.
struct load_request {
    std::shared_ptr<future_state> state;
    std::shared_ptr<python_callback> progress;
    /// From the Python layer's dict (groups, ids, names, verify, mmap, run_id, readers,
    /// max_header_bytes), with a progress hook that stops the load once `state` is cancelled
    /// and otherwise tells `progress(done, total)`, when given.
    checkpoint_load_options options;
    bool allow_pickle = false;
};

[[nodiscard]] load_request make_load_request(const pybind11::dict& given,
                                             pybind11::object progress);

/// A load's failure, its message the progress callback's exception when that stopped it.
[[nodiscard]] error load_failure(error why, const python_callback* progress);

void bind_checkpoints(pybind11::module_& m);

} // namespace ruda::python
