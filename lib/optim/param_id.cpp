// Random and name-derived parameter ids, and their text form.
#include <ruda/optim/param_id.hpp>

#include <ostream>
#include <random>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace ruda {

param_id param_id::generate()
{
    static thread_local std::random_device device;
    const std::uint64_t high = device();
    const std::uint64_t low = device();
    return param_id{(high << 32U) | (low & 0xffffffffULL)};
}

param_id param_id::from_name(std::string_view name) noexcept
{
    return param_id{XXH3_64bits(name.data(), name.size())};
}

std::string to_string(param_id id) { return std::to_string(id.val()); }

std::ostream& operator<<(std::ostream& os, param_id id) { return os << id.val(); }

error parameter_error(std::string_view doing, param_id id, const error& cause)
{
    return parameter_error(doing, id, {}, cause);
}

error parameter_error(std::string_view doing, param_id id, std::string_view name,
                      const error& cause)
{
    std::string what = std::string{doing} + " for parameter " + to_string(id);
    if (!name.empty()) {
        what += " (" + std::string{name} + ")";
    }
    return error{cause.code(), what + ": " + cause.message()};
}

} // namespace ruda
