// storage_pool: buffers by size class, handed out as storages and taken back by their block.
#include <ruda/tensor/storage_pool.hpp>

#include <new>
#include <utility>

namespace ruda {

// The block of one pooled buffer: gives the buffer back to its pool when destroyed.
class storage_pool::pooled_block final : public detail::storage_block {
public:
    pooled_block(std::shared_ptr<storage_pool> pool, void* memory, std::size_t capacity) noexcept
        : pool_(std::move(pool)), memory_(memory),
          capacity_(capacity)
    {
    }

private:
    ~pooled_block() = default;
    [[nodiscard]] storage_origin origin() const noexcept override { return storage_origin::pooled; }
    void destroy() noexcept override
    {
        pool_->give_back(memory_, capacity_);
        delete this;
    }

    std::shared_ptr<storage_pool> pool_;
    void* memory_;
    std::size_t capacity_;
};

std::shared_ptr<storage_pool> storage_pool::create() { return create(options{}); }

std::shared_ptr<storage_pool> storage_pool::create(options opts)
{
    return std::shared_ptr<storage_pool>(new storage_pool(std::move(opts)));
}

storage_pool::storage_pool(options opts) : options_(std::move(opts))
{
    if (!options_.source.allocate || !options_.source.free) {
        options_.source.allocate = [](std::size_t size) -> void* {
            return ::operator new(size, std::align_val_t{64}, std::nothrow);
        };
        options_.source.free = [](void* memory, std::size_t) {
            ::operator delete(memory, std::align_val_t{64});
        };
    }
}

storage_pool::~storage_pool() { trim(); }

std::size_t storage_pool::size_class(std::size_t size) noexcept
{
    const std::size_t unit = size >= 4096 ? 4096 : 64;
    return (size + unit - 1) / unit * unit;
}

result<storage> storage_pool::acquire(std::size_t size)
{
    if (size == 0) {
        return storage{};
    }
    const std::size_t capacity = size_class(size);
    if (capacity < size) {
        return error{errc::allocation_too_large, "Cannot allocate " + std::to_string(size) +
                                                     " bytes of " + options_.source.name};
    }
    void* memory = nullptr;
    {
        const std::lock_guard lock{mutex_};
        auto found = free_.find(capacity);
        if (found != free_.end() && !found->second.empty()) {
            memory = found->second.back();
            found->second.pop_back();
            stats_.cached_bytes -= capacity;
            ++stats_.reuses;
        }
    }
    if (memory == nullptr) {
        memory = options_.source.allocate(capacity);
        if (memory == nullptr) {
            return error{errc::allocation_too_large, "Cannot allocate " + std::to_string(size) +
                                                         " bytes of " + options_.source.name};
        }
        const std::lock_guard lock{mutex_};
        ++stats_.allocations;
    }
    {
        const std::lock_guard lock{mutex_};
        stats_.in_use_bytes += capacity;
    }
    auto* block = new (std::nothrow) pooled_block(shared_from_this(), memory, capacity);
    if (block == nullptr) {
        give_back(memory, capacity);
        return error{errc::allocation_too_large, "Cannot allocate a pooled storage's block"};
    }
    return detail::adopt_block(block, static_cast<const std::uint8_t*>(memory), size);
}

void storage_pool::give_back(void* memory, std::size_t capacity) noexcept
{
    bool keep = false;
    {
        const std::lock_guard lock{mutex_};
        stats_.in_use_bytes -= capacity;
        if (stats_.cached_bytes + capacity <= options_.max_cached_bytes) {
            try {
                free_[capacity].push_back(memory);
                stats_.cached_bytes += capacity;
                keep = true;
            } catch (const std::bad_alloc&) {
                keep = false; // no room to remember it: free it instead
            }
        }
    }
    if (!keep) {
        options_.source.free(memory, capacity);
    }
}

storage_pool::statistics storage_pool::stats() const
{
    const std::lock_guard lock{mutex_};
    return stats_;
}

void storage_pool::trim()
{
    std::unordered_map<std::size_t, std::vector<void*>> freed;
    {
        const std::lock_guard lock{mutex_};
        freed.swap(free_);
        stats_.cached_bytes = 0;
    }
    for (auto& [capacity, buffers] : freed) {
        for (void* memory : buffers) {
            options_.source.free(memory, capacity);
        }
    }
}

} // namespace ruda
