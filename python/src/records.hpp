// Records in Python: `ruda.Record`, a host-owned snapshot read by name or id, whose tensors
// (`ruda.Tensor`) go out through DLPack sharing ruda's memory; and the copy of borrowed
// tensors into one, off the GIL.
#pragma once

#include "borrowed_tensors.hpp"
#include "dlpack_import.hpp"

#include <ruda/optim/gradients_params_record.hpp>

#include <pybind11/pybind11.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace ruda::python {

/// A record shared by every Python object that shows it (and every DLPack view of it).
struct record_handle {
    std::shared_ptr<const gradients_params_record> record;

    explicit record_handle(std::shared_ptr<const gradients_params_record> shared);
    /// Each entry's index by key: its name, or its decimal id when it has none.
    [[nodiscard]] const std::unordered_map<std::string, std::size_t>& keys() const;

private:
    mutable std::shared_ptr<const std::unordered_map<std::string, std::size_t>> by_key;
};

/// One entry of a record.
struct tensor_handle {
    std::shared_ptr<const gradients_params_record> record;
    std::size_t index;

    [[nodiscard]] const gradient_entry& entry() const { return record->entries()[index]; }
};

/// The key of an entry: its name, or its decimal id.
[[nodiscard]] std::string key_of(const gradient_entry& entry);

/// Borrows each tensor of `tensors` (lists of str and of tensors, as long as each other) under
/// its name, GIL held, in id order; with `grads`, each tensor's `.grad` (a parameter's),
/// leaving out those that are None. A name given twice, or two names of one id, is
/// `errc::duplicate_param_id` before anything is copied.
[[nodiscard]] result<std::vector<tensor_view>> borrow_all(pybind11::handle names,
                                                          pybind11::handle tensors, bool grads);

/// `borrow_all`, then `borrowed_tensors::take`: what a snapshot or a save starts with.
[[nodiscard]] result<borrowed_tensors> borrow_snapshot(pybind11::handle names,
                                                       pybind11::handle tensors, bool grads);

/// Copies the host views (in id order, as `borrow_all` gives them) into memory of ruda's own, then
/// releases the producers' tensors (`release_all`); `stop()` is asked between pieces of at
/// most 4 MiB, and a true answer ends it with `errc::cancelled`. No GIL needed.
[[nodiscard]] result<gradients_params_record> copy_views(std::vector<tensor_view> views,
                                                         const std::function<bool()>& stop);

void bind_records(pybind11::module_& m);

} // namespace ruda::python
