// The one buffer type behind every tensor's bytes: owned and never zero-filled first, shared
// by reference count, a slice of a larger buffer, a read-only view of a mapped file, borrowed
// from an owner elsewhere (a torch tensor), or taken from a pool and returned to it.
#pragma once

#include <ruda/error.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <iosfwd>
#include <memory>
#include <span>
#include <vector>

namespace ruda {

/// Where a storage's memory comes from.
enum class storage_origin : std::uint8_t {
    none,     ///< empty: no memory at all
    owned,    ///< allocated by ruda (or adopted from a vector), freed with its last reference
    borrowed, ///< someone else's memory, kept alive by a handle the storage holds
    mapped,   ///< a read-only mapping of a file that cannot change under it
    pooled,   ///< memory of a `storage_pool`, returned to it with its last reference
};

/// The origin's name: "none", "owned", "borrowed", "mapped" or "pooled".
const char* to_string(storage_origin origin) noexcept;

class storage;

namespace detail {

// The reference-counted owner of a storage's memory. One block can back many storages (the
// slices of a checkpoint's small payloads, or every snapshot of one tensor).
class storage_block {
public:
    storage_block(const storage_block&) = delete;
    storage_block& operator=(const storage_block&) = delete;

    void retain() noexcept;
    void release() noexcept;
    [[nodiscard]] bool unique() const noexcept;
    [[nodiscard]] virtual storage_origin origin() const noexcept = 0;
    /// Whether ruda may write the memory (owned or pooled), when it holds the only reference.
    [[nodiscard]] bool writable() const noexcept
    {
        const storage_origin o = origin();
        return o == storage_origin::owned || o == storage_origin::pooled;
    }

protected:
    storage_block() noexcept = default;
    ~storage_block() = default;
    // Frees the block and its memory; called once, by the last release.
    virtual void destroy() noexcept = 0;

private:
    // With the vtable pointer, 16 bytes: a small buffer's whole header.
    std::atomic<std::size_t> refs_{1};
};

// A storage over `size` bytes at `data` inside `block`, taking over the block's first
// reference: how pools and mappings hand out their memory.
storage adopt_block(storage_block* block, const std::uint8_t* data, std::size_t size) noexcept;

} // namespace detail

/// Tensor bytes: a pointer, a length and a reference to the block that owns the memory.
/// Copies share the memory; the bytes are read-only through every copy, and a caller that
/// wants to write gets them to itself first (`writable_data` copies unless this is the only
/// reference to memory ruda owns). So a storage shared by a snapshot can never change under
/// it. Safe to copy and destroy from any thread; one storage object is not synchronized.
///
///     auto s = ruda::storage::allocate(1024);   // unfilled
///     std::memset(s.writable_data(), 0, s.size());
///     ruda::storage view = s.slice(512, 512);  // shares the memory, copies nothing
class storage {
public:
    /// Empty: no bytes, no memory.
    storage() noexcept = default;
    /// Adopts the vector's memory, copying nothing.
    storage(std::vector<std::uint8_t> bytes); // NOLINT(google-explicit-constructor): as a vector
    /// A copy of the listed bytes, for constants and tests.
    storage(std::initializer_list<std::uint8_t> bytes);
    /// A copy of [first, last), as the vector constructor it stands in for makes one.
    template <std::input_iterator It>
        requires std::convertible_to<std::iter_value_t<It>, std::uint8_t>
    storage(It first, It last) : storage(std::vector<std::uint8_t>(first, last))
    {
    }

    storage(const storage& other) noexcept;
    storage(storage&& other) noexcept;
    storage& operator=(const storage& other) noexcept;
    storage& operator=(storage&& other) noexcept;
    ~storage();

    /// `size` bytes of owned memory that nothing has written: never zero-filled, and a large
    /// buffer's pages are mapped in one call rather than faulted in one at a time. Fill them
    /// through `writable_data()` before handing the storage on. Throws `std::bad_alloc`.
    [[nodiscard]] static storage allocate(std::size_t size);
    /// `allocate`, with `errc::allocation_too_large` instead of an exception.
    [[nodiscard]] static result<storage> try_allocate(std::size_t size);
    /// An owned copy of `bytes`.
    [[nodiscard]] static storage copy_of(std::span<const std::uint8_t> bytes);
    /// Memory that `owner` keeps alive, read-only: the storage holds `owner` until its last
    /// copy dies. Whoever hands memory over this way promises it never changes while held.
    [[nodiscard]] static storage borrow(std::span<const std::uint8_t> bytes,
                                        std::shared_ptr<const void> owner);

    [[nodiscard]] const std::uint8_t* data() const noexcept { return data_; }
    [[nodiscard]] std::size_t size() const noexcept { return size_; }
    [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
    [[nodiscard]] const std::uint8_t* begin() const noexcept { return data_; }
    [[nodiscard]] const std::uint8_t* end() const noexcept { return data_ + size_; }
    [[nodiscard]] std::uint8_t operator[](std::size_t i) const noexcept { return data_[i]; }
    [[nodiscard]] std::span<const std::uint8_t> span() const noexcept { return {data_, size_}; }
    operator std::span<const std::uint8_t>() const noexcept { return span(); } // NOLINT

    [[nodiscard]] storage_origin origin() const noexcept;
    /// `size` bytes from `offset`, sharing this memory (and keeping all of it alive).
    /// Throws `std::out_of_range` when the range is not inside this storage.
    [[nodiscard]] storage slice(std::size_t offset, std::size_t size) const;
    /// Whether both are backed by the same block of memory (a copy or a slice of one another,
    /// or two slices of one buffer), not merely equal bytes.
    [[nodiscard]] bool shares_memory_with(const storage& other) const noexcept
    {
        return block_ != nullptr && block_ == other.block_;
    }
    /// Whether `writable_data()` would write in place: this is the only reference to memory
    /// ruda owns.
    [[nodiscard]] bool writable() const noexcept;
    /// The bytes, for writing. Copies them into memory of this storage's own first unless it
    /// is `writable()`, so no other storage ever sees the write. Throws `std::bad_alloc`.
    [[nodiscard]] std::uint8_t* writable_data();
    /// A copy of the bytes in a vector.
    [[nodiscard]] std::vector<std::uint8_t> to_vector() const { return {begin(), end()}; }

    /// Equal bytes, wherever they live.
    friend bool operator==(const storage& a, const storage& b) noexcept;

private:
    friend storage detail::adopt_block(detail::storage_block* block, const std::uint8_t* data,
                                       std::size_t size) noexcept;
    storage(detail::storage_block* block, const std::uint8_t* data, std::size_t size) noexcept
        : block_(block), data_(data), size_(size)
    {
    }

    detail::storage_block* block_ = nullptr;
    const std::uint8_t* data_ = nullptr;
    std::size_t size_ = 0;
};

/// Writes "storage(owned, 24 bytes)", for logs and test output.
std::ostream& operator<<(std::ostream& os, const storage& s);

} // namespace ruda
