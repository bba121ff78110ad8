// Error model of ruda: the `errc` codes, their "ruda" category, `ruda::error` (a code plus a
// human message) and `ruda::result<T>`, the return type of every fallible public call.
#pragma once

#include <boost/outcome/std_result.hpp>
#include <boost/outcome/try.hpp>

#include <iosfwd>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

namespace ruda {

/// Every way a ruda call can fail. Zero is reserved for success.
enum class errc : int {
    sync_read_unavailable = 1,
    missing_gradient,
    read_failed,
    duplicate_param_id,
    invalid_dtype,
    shape_overflow,
    byte_count_mismatch,
    invalid_quantization,
    allocation_too_large,
    malformed_record,
    unsupported_version,
    checksum_mismatch,
    io_error,
    cancelled,
    timed_out,
    backend_mismatch,
    shape_mismatch,
    unknown_parameter,
    device_unavailable,
    directory_in_use,
    unsupported_device,
    not_found,
    invalid_tensor,
    /// Ranks of a distributed checkpoint disagree on a parameter (shape, dtype, placement).
    plan_mismatch,
    /// A checkpoint's rank-local state cannot go to another number of ranks as asked.
    world_size_mismatch,
    /// A manager's save of a step that is not above the newest step of its directory.
    step_not_newer,
    /// A checkpoint written by another run than the one asked for.
    other_run,
    /// An optimizer of a type ruda cannot read or restore the state of.
    unsupported_optimizer,
    /// A saved optimizer state that does not fit the optimizer it is restored into: another
    /// type, other param groups, other hyper-parameters where they are checked.
    optimizer_mismatch,
};

} // namespace ruda

template <>
struct std::is_error_code_enum<ruda::errc> : std::true_type {};

namespace ruda {

/// The `std::error_category` of `errc`; its name is "ruda".
const std::error_category& ruda_category() noexcept;

inline std::error_code make_error_code(errc e) noexcept
{
    return {static_cast<int>(e), ruda_category()};
}

/// A failure: a `std::error_code` (usually a `ruda::errc`) and the text a person reads, which
/// names the parameter id where one is involved.
///
///     ruda::error e{ruda::errc::invalid_dtype, "Invalid gradient dtype for parameter 7"};
///     assert(e == ruda::errc::invalid_dtype);
class error {
public:
    /// A bare code; the message is the category's text for it.
    error(errc code) : code_(make_error_code(code)) {} // NOLINT: implicit on purpose
    error(errc code, std::string message)
        : code_(make_error_code(code)), message_(std::move(message))
    {
    }
    error(std::error_code code, std::string message) : code_(code), message_(std::move(message)) {}

    [[nodiscard]] std::error_code code() const noexcept { return code_; }
    /// The detailed message, or the category's text when none was given.
    [[nodiscard]] std::string message() const
    {
        return message_.empty() ? code_.message() : message_;
    }

    friend bool operator==(const error& a, errc b) noexcept { return a.code_ == b; }

private:
    std::error_code code_;
    std::string message_;
};

/// The enumerator's name ("not_found"), for bindings and logs that name codes in words; empty
/// for a value that is no enumerator.
[[nodiscard]] std::string_view to_name(errc e) noexcept;

/// Writes "ruda:5" style codes and "message (ruda:5)" errors, for logs and test output.
std::ostream& operator<<(std::ostream& os, errc e);
std::ostream& operator<<(std::ostream& os, const error& e);

// Outcome's hooks, found by ADL: they let `result<T>::value()` on a failure throw a
// `std::system_error` that carries the message.
inline std::error_code make_error_code(const error& e) noexcept { return e.code(); }
[[noreturn]] void outcome_throw_as_system_error_with_payload(const error& e);

/// The value or the failure of a ruda call.
template <class T>
using result = BOOST_OUTCOME_V2_NAMESPACE::std_result<T, error>;

/// Shorthand for the success of a `result<void>`.
inline auto success() noexcept { return BOOST_OUTCOME_V2_NAMESPACE::success(); }

} // namespace ruda
