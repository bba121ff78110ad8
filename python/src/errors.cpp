#include "errors.hpp"

#include <utility>

namespace py = pybind11;

namespace ruda::python {
namespace {

// Set once by the Python layer at import and never freed: a static py::object would be
// destroyed after the interpreter.
PyObject* base_class = nullptr;
PyObject* classes_by_code = nullptr; // dict: code name -> class

} // namespace

py::object error_object(std::string_view code, const std::string& message)
{
    py::handle cls =
        base_class != nullptr ? py::handle{base_class} : py::handle{PyExc_RuntimeError};
    if (classes_by_code != nullptr) {
        PyObject* found = PyDict_GetItemString(classes_by_code, std::string{code}.c_str());
        if (found != nullptr) {
            cls = found;
        }
    }
    py::object instance = cls(message);
    instance.attr("code") = py::str(code.data(), code.size());
    return instance;
}

namespace {

// The C++ spellings a core message may name, as a Python user writes them.
std::string in_python_words(std::string message)
{
    static const std::pair<std::string_view, std::string_view> words[] = {
        {"newer_checkpoints::discard", "on_newer=\"discard\""},
    };
    for (const auto& [cpp, python] : words) {
        for (auto at = message.find(cpp); at != std::string::npos; at = message.find(cpp, at)) {
            message.replace(at, cpp.size(), python);
            at += python.size();
        }
    }
    return message;
}

} // namespace

py::object error_object(const error& why)
{
    const std::error_code code = why.code();
    std::string_view name = code.category() == ruda_category()
                                ? to_name(static_cast<errc>(code.value()))
                                : std::string_view{};
    if (name.empty()) {
        name = "io_error"; // a system error code: an operating-system failure
    }
    return error_object(name, in_python_words(why.message()));
}

void throw_error(std::string_view code, const std::string& message)
{
    py::object instance = error_object(code, message);
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(instance.ptr())), instance.ptr());
    throw py::error_already_set();
}

void throw_error(const error& why)
{
    py::object instance = error_object(why);
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(instance.ptr())), instance.ptr());
    throw py::error_already_set();
}

void bind_errors(py::module_& m)
{
    m.def(
        "_register_errors",
        [](py::object base, py::dict by_code) {
            base_class = base.release().ptr();
            classes_by_code = by_code.release().ptr();
        },
        "Called once by ruda/__init__.py with ruda.Error and its subclasses by code.");
    py::list codes;
    for (int value = 1;; ++value) {
        const std::string_view name = to_name(static_cast<errc>(value));
        if (name.empty()) {
            break;
        }
        codes.append(py::str(name.data(), name.size()));
    }
    m.attr("_error_codes") = codes;
}

} // namespace ruda::python
