#include "save_inputs.hpp"

#include "records.hpp"

#include <set>

namespace py = pybind11;

namespace ruda::python {

result<save_inputs> capture(py::handle groups, py::handle sections)
{
    save_inputs inputs;
    std::set<std::string> names;
    for (py::handle item : groups) {
        const auto pair = py::reinterpret_borrow<py::tuple>(item);
        auto name = pair[0].cast<std::string>();
        BOOST_OUTCOME_TRY(check_item_name(name, "A group"));
        if (!names.insert(name).second) {
            return error{errc::malformed_record, "Group " + name + " is given twice"};
        }
        if (py::isinstance<record_handle>(pair[1])) {
            inputs.groups.push_back(
                {std::move(name), std::nullopt, pair[1].cast<const record_handle&>().record});
            continue;
        }
        const auto lists = pair[1].cast<py::tuple>();
        auto tensors = borrow_snapshot(lists[0], lists[1], lists[2].cast<bool>());
        if (!tensors) {
            if (name == checkpoint::gradients_group) {
                return std::move(tensors).error();
            }
            return error{tensors.error().code(),
                         "Group " + name + ": " + tensors.error().message()};
        }
        inputs.groups.push_back({std::move(name), std::move(tensors).value(), nullptr});
    }
    for (py::handle item : sections) {
        const auto pair = py::reinterpret_borrow<py::tuple>(item);
        char* data = nullptr;
        Py_ssize_t size = 0;
        if (PyBytes_AsStringAndSize(pair[1].ptr(), &data, &size) != 0) {
            throw py::error_already_set();
        }
        const auto* bytes = reinterpret_cast<const std::uint8_t*>(data);
        inputs.sections.emplace_back(pair[0].cast<std::string>(),
                                     std::vector<std::uint8_t>(bytes, bytes + size));
    }
    return inputs;
}

result<checkpoint> assemble(save_inputs inputs, const std::function<bool()>& stop)
{
    checkpoint contents;
    for (group_input& group : inputs.groups) {
        if (group.record) {
            BOOST_OUTCOME_TRY(contents.put_group(group.name, *group.record)); // bytes shared
            continue;
        }
        auto copied = group.tensors->read(stop);
        if (!copied) {
            return std::move(copied).error();
        }
        BOOST_OUTCOME_TRY(contents.put_group(group.name, std::move(copied).value()));
    }
    for (auto& [name, bytes] : inputs.sections) {
        BOOST_OUTCOME_TRY(contents.put_bytes(name, std::move(bytes)));
    }
    return contents;
}

} // namespace ruda::python
