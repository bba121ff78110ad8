// Random parameter ids and their text form.
#include <ruda/optim/param_id.hpp>

#include <random>

namespace ruda {

param_id param_id::generate()
{
    static thread_local std::random_device device;
    const std::uint64_t high = device();
    const std::uint64_t low = device();
    return param_id{(high << 32U) | (low & 0xffffffffULL)};
}

std::string to_string(param_id id) { return std::to_string(id.val()); }

} // namespace ruda
