// The non-template part of gradients_params.
#include <ruda/optim/gradients_params.hpp>

namespace ruda {

std::vector<param_id> gradients_params::ids() const
{
    std::vector<param_id> sorted;
    sorted.reserve(entries_.size());
    for (const auto& [id, tensor] : entries_) {
        sorted.push_back(id);
    }
    std::sort(sorted.begin(), sorted.end());
    return sorted;
}

} // namespace ruda
