// ruda's failures as Python exceptions: `ruda.Error` with `.code` (the `errc` name) and the
// C++ message, or the subclass the Python layer registered for that code (`NotFound` is also a
// `FileNotFoundError`, `TimedOut` a `TimeoutError`).
#pragma once

#include <ruda/error.hpp>

#include <pybind11/pybind11.h>

#include <string>
#include <string_view>

namespace ruda::python {

/// The exception object for `why`, of the class registered for its code.
[[nodiscard]] pybind11::object error_object(const error& why);
/// The same for a code only the Python module has ("closed", "invalid_argument").
[[nodiscard]] pybind11::object error_object(std::string_view code, const std::string& message);
/// Raises `why` as its Python exception.
[[noreturn]] void throw_error(const error& why);
[[noreturn]] void throw_error(std::string_view code, const std::string& message);

/// The value of a result, or its failure raised.
template <class T>
T value_or_raise(result<T> outcome)
{
    if (!outcome) {
        throw_error(outcome.error());
    }
    if constexpr (!std::is_void_v<T>) {
        return std::move(outcome).value();
    }
}

void bind_errors(pybind11::module_& m);

} // namespace ruda::python
