// Turns what Asio and the standard library report (error codes, exceptions) into `ruda::error`,
// so that no exception crosses the public API.
#pragma once

#include <ruda/error.hpp>

#include <boost/system/error_code.hpp>

#include <exception>
#include <string_view>

namespace ruda {

/// `operation_aborted` becomes `errc::cancelled`; a ruda code stays itself; any other code is
/// kept (as a `std::error_code`) with its message. `what` says which operation failed.
[[nodiscard]] error error_from_code(const boost::system::error_code& code, std::string_view what);

/// A `std::system_error` or `boost::system::system_error` maps like its code, `bad_alloc` to
/// `errc::allocation_too_large`, any other exception to `errc::read_failed` with its `what()`.
[[nodiscard]] error error_from_exception(std::exception_ptr failure, std::string_view what);

} // namespace ruda
