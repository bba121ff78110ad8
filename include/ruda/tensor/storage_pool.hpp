// Memory kept from one snapshot to the next: storages whose buffers go back to their pool when
// their last reference dies, from memory a backend provides (pinned or registered host memory
// for a GPU's copies; plain host memory by default).
#pragma once

#include <ruda/error.hpp>
#include <ruda/tensor/storage.hpp>

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace ruda {

/// A pool of reusable buffers. A snapshot of the same model asks for the same sizes every
/// time, so a buffer comes back to the pool when its last storage dies and the next request
/// of its size class takes it again: allocated (and pinned, registered or faulted in) once.
/// Thread-safe. Storages keep their pool alive, so the pool may be dropped before them.
///
///     auto pool = ruda::storage_pool::create({.max_cached_bytes = 1 << 30});
///     ruda::storage s = pool->acquire(4096).value();      // unfilled, writable
///     std::memset(s.writable_data(), 1, s.size());
class storage_pool : public std::enable_shared_from_this<storage_pool> {
public:
    /// Where the pool's memory comes from and goes back to.
    struct memory_source {
        /// `size` bytes aligned to at least 64, or null when none can be had.
        std::function<void*(std::size_t size)> allocate;
        /// Frees what `allocate` returned, with the size it was asked for.
        std::function<void(void* memory, std::size_t size)> free;
        /// Named in errors ("pinned host memory").
        std::string name = "host memory";
    };

    struct options {
        /// Free buffers beyond this many bytes are returned to the source, not kept.
        std::size_t max_cached_bytes = std::size_t{1} << 30U;
        /// Plain host memory when empty.
        memory_source source{};
    };

    struct statistics {
        std::size_t allocations = 0;  ///< buffers taken from the memory source
        std::size_t reuses = 0;       ///< requests met with a buffer already held
        std::size_t cached_bytes = 0; ///< capacity of the free buffers held now
        std::size_t in_use_bytes = 0; ///< capacity of the buffers storages hold now
    };

    [[nodiscard]] static std::shared_ptr<storage_pool> create();
    [[nodiscard]] static std::shared_ptr<storage_pool> create(options opts);
    storage_pool(const storage_pool&) = delete;
    storage_pool& operator=(const storage_pool&) = delete;
    ~storage_pool();

    /// `size` unfilled bytes, writable through the storage's `writable_data()` while it is the
    /// only reference. `errc::allocation_too_large` naming the source when it has no memory.
    [[nodiscard]] result<storage> acquire(std::size_t size);
    [[nodiscard]] statistics stats() const;
    /// Returns every free buffer to the source.
    void trim();

    /// The capacity a request of `size` bytes is served with: a whole number of pages from
    /// 4 KiB on, of 64 bytes below.
    [[nodiscard]] static std::size_t size_class(std::size_t size) noexcept;

private:
    class pooled_block;
    explicit storage_pool(options opts);
    void give_back(void* memory, std::size_t capacity) noexcept;

    options options_;
    mutable std::mutex mutex_;
    std::unordered_map<std::size_t, std::vector<void*>> free_; // by capacity
    statistics stats_;
};

} // namespace ruda
