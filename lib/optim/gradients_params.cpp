// The non-template part of gradients_params: copies and moves under the source's lock, ids.
#include <ruda/optim/gradients_params.hpp>

namespace ruda {

gradients_params::gradients_params(const gradients_params& other)
{
    const std::shared_lock lock{other.mutex_};
    entries_ = other.entries_;
}

gradients_params::gradients_params(gradients_params&& other) noexcept
{
    const std::unique_lock lock{other.mutex_};
    entries_ = std::move(other.entries_);
}

gradients_params& gradients_params::operator=(gradients_params other) noexcept
{
    const std::unique_lock lock{mutex_};
    entries_.swap(other.entries_);
    return *this;
}

std::vector<param_id> gradients_params::sorted_ids() const
{
    std::vector<param_id> sorted;
    sorted.reserve(entries_.size());
    for (const auto& [id, tensor] : entries_) {
        sorted.push_back(id);
    }
    std::sort(sorted.begin(), sorted.end());
    return sorted;
}

std::vector<param_id> gradients_params::ids() const
{
    const std::shared_lock lock{mutex_};
    return sorted_ids();
}

std::string gradients_params::name(param_id id) const
{
    const std::shared_lock lock{mutex_};
    const auto found = entries_.find(id);
    return found == entries_.end() ? std::string{} : found->second.name;
}

std::size_t gradients_params::size() const
{
    const std::shared_lock lock{mutex_};
    return entries_.size();
}

bool gradients_params::empty() const
{
    const std::shared_lock lock{mutex_};
    return entries_.empty();
}

} // namespace ruda
