// What a save or a snapshot takes from Python: groups of borrowed tensors (or records already
// in host memory) and sections of bytes, captured under the GIL, assembled into a checkpoint
// off it.
#pragma once

#include "borrowed_tensors.hpp"

#include <ruda/checkpoint/checkpoint.hpp>

#include <pybind11/pybind11.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ruda::python {

/// One group: borrowed tensors to read, or a record already in host memory (shared, not
/// copied).
struct group_input {
    std::string name;
    std::optional<borrowed_tensors> tensors;
    std::shared_ptr<const gradients_params_record> record;
};

struct save_inputs {
    std::vector<group_input> groups; // in the order given
    std::vector<std::pair<std::string, std::vector<std::uint8_t>>> sections;
};

/// `groups`: `(name, ruda.Record or (names, tensors, grads))` pairs (`borrow_all`'s
/// arguments); `sections`:
/// `(name, bytes)` pairs. Borrows every tensor (`borrow_all`) and takes the snapshot of the
/// CUDA ones (`borrowed_tensors::take`), GIL held; a group name that is invalid or given twice
/// is `errc::malformed_record`.
[[nodiscard]] result<save_inputs> capture(pybind11::handle groups, pybind11::handle sections);

/// The checkpoint: borrowed groups read (`borrowed_tensors::read`, asking `stop` as it goes),
/// groups and sections put under their names. No GIL needed.
[[nodiscard]] result<checkpoint> assemble(save_inputs inputs, const std::function<bool()>& stop);

} // namespace ruda::python
