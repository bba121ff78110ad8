// The identity of a model parameter, the key of every gradient: a 64-bit value, random when
// generated, stable across save and restore.
#pragma once

#include <ruda/error.hpp>

#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <string_view>

namespace ruda {

class param_id {
public:
    constexpr explicit param_id(std::uint64_t value) noexcept : value_(value) {}

    /// A fresh id from 8 random bytes (std::random_device).
    [[nodiscard]] static param_id generate();

    /// The id of a named parameter ("layers.0.weight"): XXH3-64 of the name's bytes, the same
    /// in every process and on every machine, so a checkpoint finds its parameters again.
    [[nodiscard]] static param_id from_name(std::string_view name) noexcept;

    [[nodiscard]] constexpr std::uint64_t val() const noexcept { return value_; }

    friend constexpr auto operator<=>(param_id, param_id) noexcept = default;

private:
    std::uint64_t value_;
};

/// The decimal value; every ruda message names a parameter this way.
[[nodiscard]] std::string to_string(param_id id);
/// Writes `to_string(id)`, for logs and test output.
std::ostream& operator<<(std::ostream& os, param_id id);

/// `cause`, code kept, its message behind "<doing> for parameter <id>: ": how a failure about
/// one parameter names it ("Reading gradient for parameter 7: device read failed").
[[nodiscard]] error parameter_error(std::string_view doing, param_id id, const error& cause);
/// The same with the parameter's name, when it has one: "Reading gradient for parameter 7
/// (fc1.weight): device read failed".
[[nodiscard]] error parameter_error(std::string_view doing, param_id id, std::string_view name,
                                    const error& cause);

} // namespace ruda

template <>
struct std::hash<ruda::param_id> {
    std::size_t operator()(ruda::param_id id) const noexcept
    {
        return std::hash<std::uint64_t>{}(id.val());
    }
};
