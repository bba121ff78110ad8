// storage: reference-counted blocks of tensor memory, allocated without zero-filling, with a
// large buffer's pages mapped (as huge pages where the kernel allows) in one call.
#include <ruda/tensor/storage.hpp>

#include <ruda/tensor/detail/fresh_pages.hpp>

#include <cstdint>
#include <cstring>
#include <new>
#include <ostream>
#include <stdexcept>
#include <string>
#include <utility>

namespace ruda {
namespace detail {

void storage_block::retain() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }

void storage_block::release() noexcept
{
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        destroy();
    }
}

bool storage_block::unique() const noexcept { return refs_.load(std::memory_order_acquire) == 1; }

storage adopt_block(storage_block* block, const std::uint8_t* data, std::size_t size) noexcept
{
    return storage{block, data, size};
}

namespace {

// Small buffers keep their block header in the same allocation, in front of the data.
constexpr std::size_t inline_header = 16;
constexpr std::size_t inline_limit = std::size_t{64} << 10U;

// A small buffer: header and data in one allocation.
class inline_block final : public storage_block {
public:
    static std::pair<storage_block*, std::uint8_t*> create(std::size_t size)
    {
        void* memory = ::operator new(inline_header + size);
        auto* block = new (memory) inline_block;
        return {block, static_cast<std::uint8_t*>(memory) + inline_header};
    }

private:
    inline_block() noexcept = default;
    [[nodiscard]] storage_origin origin() const noexcept override { return storage_origin::owned; }
    void destroy() noexcept override
    {
        void* memory = this;
        this->~inline_block();
        ::operator delete(memory);
    }
};
static_assert(sizeof(inline_block) <= inline_header);

// A large buffer, aligned for huge pages where it is big enough to use them.
class heap_block final : public storage_block {
public:
    static std::pair<storage_block*, std::uint8_t*> create(std::size_t size)
    {
        const std::align_val_t align{size >= huge_threshold ? huge_page : 64};
        auto* data = static_cast<std::uint8_t*>(::operator new(size, align));
        try {
            auto* block = new heap_block(data, align);
            prepare_pages(data, size);
            return {block, data};
        } catch (...) {
            ::operator delete(data, align);
            throw;
        }
    }

private:
    heap_block(std::uint8_t* data, std::align_val_t align) noexcept
        : data_(data), align_(align)
    {
    }
    ~heap_block() { ::operator delete(data_, align_); }
    [[nodiscard]] storage_origin origin() const noexcept override { return storage_origin::owned; }
    void destroy() noexcept override { delete this; }

    std::uint8_t* data_;
    std::align_val_t align_;
};

class vector_block final : public storage_block {
public:
    explicit vector_block(std::vector<std::uint8_t> bytes) noexcept
        : bytes_(std::move(bytes))
    {
    }
    [[nodiscard]] const std::vector<std::uint8_t>& bytes() const noexcept { return bytes_; }

private:
    ~vector_block() = default;
    [[nodiscard]] storage_origin origin() const noexcept override { return storage_origin::owned; }
    void destroy() noexcept override { delete this; }

    std::vector<std::uint8_t> bytes_;
};

class borrowed_block final : public storage_block {
public:
    explicit borrowed_block(std::shared_ptr<const void> owner) noexcept
        : owner_(std::move(owner))
    {
    }

private:
    ~borrowed_block() = default;
    [[nodiscard]] storage_origin origin() const noexcept override
    {
        return storage_origin::borrowed;
    }
    void destroy() noexcept override { delete this; }

    std::shared_ptr<const void> owner_;
};

} // namespace
} // namespace detail

const char* to_string(storage_origin origin) noexcept
{
    switch (origin) {
    case storage_origin::none: return "none";
    case storage_origin::owned: return "owned";
    case storage_origin::borrowed: return "borrowed";
    case storage_origin::mapped: return "mapped";
    case storage_origin::pooled: return "pooled";
    }
    return "unknown";
}

storage::storage(std::vector<std::uint8_t> bytes)
{
    if (bytes.empty()) {
        return;
    }
    auto* block = new detail::vector_block(std::move(bytes));
    block_ = block;
    data_ = block->bytes().data();
    size_ = block->bytes().size();
}

storage::storage(std::initializer_list<std::uint8_t> bytes)
    : storage(copy_of({bytes.begin(), bytes.size()}))
{
}

storage::storage(const storage& other) noexcept
    : block_(other.block_), data_(other.data_), size_(other.size_)
{
    if (block_ != nullptr) {
        block_->retain();
    }
}

storage::storage(storage&& other) noexcept
    : block_(std::exchange(other.block_, nullptr)), data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0))
{
}

storage& storage::operator=(const storage& other) noexcept
{
    if (this != &other) {
        storage copy{other};
        *this = std::move(copy);
    }
    return *this;
}

storage& storage::operator=(storage&& other) noexcept
{
    if (this != &other) {
        if (block_ != nullptr) {
            block_->release();
        }
        block_ = std::exchange(other.block_, nullptr);
        data_ = std::exchange(other.data_, nullptr);
        size_ = std::exchange(other.size_, 0);
    }
    return *this;
}

storage::~storage()
{
    if (block_ != nullptr) {
        block_->release();
    }
}

storage storage::allocate(std::size_t size)
{
    if (size == 0) {
        return {};
    }
    // The aligned operator new rounds the size up to the alignment, which would wrap.
    if (size > static_cast<std::size_t>(PTRDIFF_MAX) - detail::huge_page) {
        throw std::bad_alloc();
    }
    const auto [block, data] = size <= detail::inline_limit ? detail::inline_block::create(size)
                                                            : detail::heap_block::create(size);
    return storage{block, data, size};
}

result<storage> storage::try_allocate(std::size_t size)
{
    try {
        return allocate(size);
    } catch (const std::bad_alloc&) {
        return error{errc::allocation_too_large,
                     "Cannot allocate " + std::to_string(size) + " bytes of tensor storage"};
    }
}

storage storage::copy_of(std::span<const std::uint8_t> bytes)
{
    storage copy = allocate(bytes.size());
    if (!bytes.empty()) {
        std::memcpy(copy.writable_data(), bytes.data(), bytes.size());
    }
    return copy;
}

storage storage::borrow(std::span<const std::uint8_t> bytes, std::shared_ptr<const void> owner)
{
    if (bytes.empty()) {
        return {};
    }
    return storage{new detail::borrowed_block(std::move(owner)), bytes.data(), bytes.size()};
}

storage_origin storage::origin() const noexcept
{
    return block_ != nullptr ? block_->origin() : storage_origin::none;
}

storage storage::slice(std::size_t offset, std::size_t size) const
{
    if (offset > size_ || size > size_ - offset) {
        throw std::out_of_range("ruda::storage::slice: [" + std::to_string(offset) + ", +" +
                                std::to_string(size) + ") is outside " + std::to_string(size_) +
                                " bytes");
    }
    if (size == 0) {
        return {};
    }
    block_->retain();
    return storage{block_, data_ + offset, size};
}

bool storage::writable() const noexcept
{
    return block_ != nullptr && block_->writable() && block_->unique();
}

std::uint8_t* storage::writable_data()
{
    if (block_ != nullptr && !writable()) {
        *this = copy_of(span());
    }
    return const_cast<std::uint8_t*>(data_); // memory ruda owns, referenced only from here
}

bool operator==(const storage& a, const storage& b) noexcept
{
    return a.size() == b.size() &&
           (a.data() == b.data() || a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}

std::ostream& operator<<(std::ostream& os, const storage& s)
{
    return os << "storage(" << to_string(s.origin()) << ", " << s.size() << " bytes)";
}

} // namespace ruda
