// storage and storage_pool: unfilled allocation on both sides of the inline and huge-page
// thresholds, sharing and slicing, copy-on-write, adopted and borrowed memory, pools that
// reuse buffers and outlive nothing they must not; fresh pages mapped in one call.
#include <ruda/tensor/detail/fresh_pages.hpp>
#include <ruda/tensor/storage.hpp>
#include <ruda/tensor/storage_pool.hpp>
#include <ruda/tensor/tensor_data.hpp>

#include <boost/test/unit_test.hpp>

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

namespace {

using ruda::storage;
using ruda::storage_origin;

std::vector<std::uint8_t> pattern(std::size_t size)
{
    std::vector<std::uint8_t> bytes(size);
    for (std::size_t i = 0; i < size; ++i) {
        bytes[i] = static_cast<std::uint8_t>(i * 131 + 7);
    }
    return bytes;
}

// How many of the pages of [data, data + size) are resident.
std::size_t resident_pages(void* data, std::size_t size)
{
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> residency((size + page - 1) / page);
    BOOST_TEST_REQUIRE(::mincore(data, size, residency.data()) == 0);
    std::size_t resident = 0;
    for (const unsigned char r : residency) {
        resident += r & 1U;
    }
    return resident;
}

} // namespace

BOOST_AUTO_TEST_SUITE(tensor_storage)

BOOST_AUTO_TEST_CASE(allocate_gives_writable_memory_of_the_size_asked_on_every_path)
{
    // Empty; inline header; a block of its own; pages mapped in one call; huge pages.
    for (const std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{4097},
                                   (std::size_t{64} << 10U) + 1, (std::size_t{1} << 20U) + 3,
                                   (std::size_t{5} << 20U) + 1}) {
        auto s = storage::allocate(size);
        BOOST_TEST(s.size() == size);
        BOOST_TEST((s.origin() == (size == 0 ? storage_origin::none : storage_origin::owned)));
        BOOST_TEST(s.writable() == (size != 0));
        if (size == 0) {
            continue;
        }
        BOOST_TEST(reinterpret_cast<std::uintptr_t>(s.data()) % 16 == 0);
        const auto* before = s.data();
        const auto expected = pattern(size);
        std::memcpy(s.writable_data(), expected.data(), size);
        BOOST_TEST(s.data() == before); // written in place: the only reference
        BOOST_TEST((s == storage{expected}));
    }
    BOOST_TEST(storage::try_allocate(~std::size_t{0}).error() == ruda::errc::allocation_too_large);
}

BOOST_AUTO_TEST_CASE(copies_share_and_a_write_through_one_copies_first)
{
    auto original = storage::copy_of(pattern(100));
    storage shared = original;
    BOOST_TEST(shared.shares_memory_with(original));
    BOOST_TEST(shared.data() == original.data());
    BOOST_TEST(!original.writable());
    BOOST_TEST(!shared.writable());

    shared.writable_data()[0] = 0xAB; // copy-on-write: the original never sees it
    BOOST_TEST(!shared.shares_memory_with(original));
    BOOST_TEST(shared[0] == 0xAB);
    BOOST_TEST((original == storage{pattern(100)}));
    BOOST_TEST(original.writable()); // the only reference again
    BOOST_TEST(shared.writable());

    storage moved = std::move(shared);
    BOOST_TEST(shared.empty()); // NOLINT(bugprone-use-after-move): moved-from is empty
    BOOST_TEST(moved[0] == 0xAB);
}

BOOST_AUTO_TEST_CASE(slices_share_the_block_and_check_their_bounds)
{
    const auto whole = storage::copy_of(pattern(256));
    const auto part = whole.slice(64, 100);
    BOOST_TEST(part.size() == 100U);
    BOOST_TEST(part.data() == whole.data() + 64);
    BOOST_TEST(part.shares_memory_with(whole));
    BOOST_TEST(!part.writable());
    BOOST_TEST(whole.slice(256, 0).empty());
    BOOST_CHECK_THROW(static_cast<void>(whole.slice(200, 57)), std::out_of_range);
    BOOST_CHECK_THROW(static_cast<void>(whole.slice(257, 0)), std::out_of_range);
    BOOST_CHECK_THROW(static_cast<void>(whole.slice(1, ~std::size_t{0})), std::out_of_range);

    // A slice keeps the whole block alive after every other reference is gone.
    storage last;
    {
        auto temporary = storage::copy_of(pattern(256));
        last = temporary.slice(128, 8);
    }
    const auto expected = pattern(256);
    BOOST_TEST((last == storage::copy_of(std::span(expected).subspan(128, 8))));
}

BOOST_AUTO_TEST_CASE(a_vector_is_adopted_without_a_copy)
{
    auto bytes = pattern(1000);
    const auto* memory = bytes.data();
    const storage s{std::move(bytes)};
    BOOST_TEST(s.data() == memory);
    BOOST_TEST((s.origin() == storage_origin::owned));
    BOOST_TEST((storage{std::vector<std::uint8_t>{}}.origin() == storage_origin::none));
    BOOST_TEST((storage{1, 2, 3}.to_vector() == std::vector<std::uint8_t>{1, 2, 3}));
    // As a vector's bytes were given before: from an iterator range, as a copy.
    const std::vector<std::uint8_t> source{4, 5, 6, 7};
    const ruda::tensor_data data{{source.begin() + 1, source.end()}, {3}, ruda::dtype::u8()};
    BOOST_TEST((data.bytes().to_vector() == std::vector<std::uint8_t>{5, 6, 7}));
}

BOOST_AUTO_TEST_CASE(borrowed_memory_stays_alive_and_is_never_written)
{
    auto owner = std::make_shared<std::vector<std::uint8_t>>(pattern(64));
    const std::weak_ptr<std::vector<std::uint8_t>> watch = owner;
    auto s = storage::borrow(*owner, owner);
    auto copy = s;
    owner.reset();
    BOOST_TEST(!watch.expired()); // the storages hold it
    BOOST_TEST((s.origin() == storage_origin::borrowed));
    BOOST_TEST(!s.writable()); // not ruda's memory, even with one reference
    s.writable_data()[0] = 0; // copies
    BOOST_TEST((s.origin() == storage_origin::owned));
    BOOST_TEST(copy[0] == pattern(64)[0]);
    copy = storage{};
    BOOST_TEST(watch.expired());
}

BOOST_AUTO_TEST_CASE(equality_is_by_content_and_printing_names_the_origin)
{
    BOOST_TEST((storage::copy_of(pattern(10)) == storage{pattern(10)}));
    BOOST_TEST(!(storage::copy_of(pattern(10)) == storage{pattern(11)}));
    BOOST_TEST((storage{} == storage::allocate(0)));
    std::ostringstream text;
    text << storage::copy_of(pattern(24));
    BOOST_TEST(text.str() == "storage(owned, 24 bytes)");
    BOOST_TEST(std::string{ruda::to_string(storage_origin::mapped)} == "mapped");
}

BOOST_AUTO_TEST_CASE(copies_from_many_threads_release_the_block_once)
{
    auto owner = std::make_shared<int>(0);
    const std::weak_ptr<int> watch = owner;
    static const std::uint8_t bytes[16] = {};
    auto shared = storage::borrow(bytes, std::move(owner));
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([shared] {
            for (int i = 0; i < 10000; ++i) {
                const storage copy = shared; // NOLINT(performance-unnecessary-copy-initialization)
                const auto slice = copy.slice(i % 16, 0);
                static_cast<void>(slice);
            }
        });
    }
    for (auto& t : threads) {
        t.join();
    }
    BOOST_TEST(!watch.expired());
    shared = storage{};
    BOOST_TEST(watch.expired());
}

// The bookkeeping of a small tensor's bytes, beyond the bytes: the 24-byte handle, and for a
// buffer of its own a 16-byte header in the same allocation plus the allocator's chunk
// overhead, counted by glibc (mallinfo2). A slice of a shared buffer (as loads make) costs the
// handle alone.
BOOST_AUTO_TEST_CASE(a_small_buffer_costs_at_most_64_bytes_beyond_its_data)
{
    static_assert(sizeof(storage) == 3 * sizeof(void*));
    for (const std::size_t size : {std::size_t{4}, std::size_t{64}, std::size_t{100}, std::size_t{1024}}) {
        constexpr std::size_t count = 10000;
        std::vector<storage> buffers;
        buffers.reserve(count);
        const auto before = ::mallinfo2().uordblks;
        for (std::size_t i = 0; i < count; ++i) {
            buffers.push_back(storage::allocate(size));
        }
        const auto after = ::mallinfo2().uordblks;
        if (after == before) { // a sanitizer's allocator: glibc sees none of it
            BOOST_TEST_MESSAGE("mallinfo2 does not see this allocator; measured in other builds");
            return;
        }
        const auto heap = static_cast<double>(after - before) / count;
        const double bookkeeping = heap + static_cast<double>(sizeof(storage)) - static_cast<double>(size);
        BOOST_TEST(bookkeeping <= 64.0, size << "-byte buffers: " << bookkeeping << " bytes each");
    }
}

BOOST_AUTO_TEST_CASE(prepared_pages_are_mapped_and_keep_their_bytes)
{
    // Memory no one has touched: a mapping of this test's own, 6 MiB (huge pages allowed).
    const std::size_t size = std::size_t{6} << 20U;
    const std::size_t pages = size / static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    void* fresh =
        ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    BOOST_TEST_REQUIRE(fresh != MAP_FAILED);
    BOOST_TEST(resident_pages(fresh, size) == 0U);
    auto* bytes = static_cast<std::uint8_t*>(fresh);
    const auto expected = pattern(1000);
    std::memcpy(bytes + 100, expected.data(), expected.size()); // one page touched, unaligned

    ruda::detail::prepare_pages(bytes + 100, size - 100);
    if (::madvise(fresh, 4096, MADV_POPULATE_WRITE) != 0) { // a kernel before Linux 5.14
        BOOST_TEST_MESSAGE("no MADV_POPULATE_WRITE here: prepare_pages is a no-op");
    } else {
        // Every whole page inside the range, and the touched first page.
        BOOST_TEST(resident_pages(fresh, size) == pages);
    }
    BOOST_TEST(std::memcmp(bytes + 100, expected.data(), expected.size()) == 0);
    BOOST_TEST(bytes[size - 1] == 0U); // prepared, never written: still zero
    ::munmap(fresh, size);

    // Under 1 MiB it maps nothing: such memory usually comes from pages already mapped.
    ruda::detail::prepare_pages(nullptr, 0);
    void* small =
        ::mmap(nullptr, 4 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    BOOST_TEST_REQUIRE(small != MAP_FAILED);
    ruda::detail::prepare_pages(small, 4 * 4096);
    BOOST_TEST(resident_pages(small, 4 * 4096) == 0U);
    ::munmap(small, 4 * 4096);
}

BOOST_AUTO_TEST_CASE(reserve_prepared_reserves_without_adding_elements)
{
    struct entry {
        std::uint64_t id;
        std::uint8_t payload[120];
    };
    std::vector<entry> entries{{7, {1, 2, 3}}};
    ruda::detail::reserve_prepared(entries, 20000); // 2.5 MB
    BOOST_TEST(entries.capacity() >= 20000U);
    BOOST_TEST_REQUIRE(entries.size() == 1U);
    BOOST_TEST(entries[0].id == 7U);
    BOOST_TEST(entries[0].payload[2] == 3U);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(tensor_storage_pool)

namespace {

// A memory source that counts what it hands out and takes back.
struct counting_source {
    std::shared_ptr<std::atomic<int>> allocated = std::make_shared<std::atomic<int>>(0);
    std::shared_ptr<std::atomic<int>> freed = std::make_shared<std::atomic<int>>(0);

    ruda::storage_pool::memory_source source(bool fail = false) const
    {
        return {[allocated = allocated, fail](std::size_t size) -> void* {
                    if (fail) {
                        return nullptr;
                    }
                    ++*allocated;
                    return ::operator new(size, std::align_val_t{64});
                },
                [freed = freed](void* memory, std::size_t) {
                    ++*freed;
                    ::operator delete(memory, std::align_val_t{64});
                },
                "pinned test memory"};
    }
};

} // namespace

BOOST_AUTO_TEST_CASE(a_buffer_comes_back_and_is_reused_for_the_same_size)
{
    const counting_source counts;
    auto pool = ruda::storage_pool::create({.max_cached_bytes = 1 << 20, .source = counts.source()});
    const std::uint8_t* first = nullptr;
    {
        auto s = pool->acquire(5000).value();
        BOOST_TEST((s.origin() == storage_origin::pooled));
        BOOST_TEST(s.size() == 5000U);
        BOOST_TEST(s.writable());
        first = s.data();
        std::memset(s.writable_data(), 7, s.size());
        BOOST_TEST(s.data() == first);
        BOOST_TEST(pool->stats().in_use_bytes == 8192U); // two pages: the size class
    }
    BOOST_TEST(pool->stats().cached_bytes == 8192U);
    BOOST_TEST(pool->stats().in_use_bytes == 0U);
    auto again = pool->acquire(8000).value(); // the same size class
    BOOST_TEST(again.data() == first);
    BOOST_TEST(pool->stats().reuses == 1U);
    BOOST_TEST(pool->stats().allocations == 1U);
    auto other = pool->acquire(100).value(); // another class: a new buffer
    BOOST_TEST(other.data() != first);
    BOOST_TEST(*counts.allocated == 2);
    BOOST_TEST(ruda::storage_pool::size_class(100) == 128U);
    BOOST_TEST(ruda::storage_pool::size_class(4096) == 4096U);
    BOOST_TEST(ruda::storage_pool::size_class(4097) == 8192U);
}

BOOST_AUTO_TEST_CASE(a_shared_pooled_buffer_is_copied_before_a_write)
{
    auto pool = ruda::storage_pool::create();
    auto s = pool->acquire(64).value();
    std::memset(s.writable_data(), 1, 64);
    const auto snapshot = s;
    s.writable_data()[0] = 2;
    BOOST_TEST(snapshot[0] == 1);
    BOOST_TEST((s.origin() == storage_origin::owned)); // its own copy now
    BOOST_TEST((snapshot.origin() == storage_origin::pooled));
}

BOOST_AUTO_TEST_CASE(buffers_past_the_cache_limit_go_back_to_the_source)
{
    const counting_source counts;
    auto pool = ruda::storage_pool::create({.max_cached_bytes = 4096, .source = counts.source()});
    {
        auto a = pool->acquire(4096).value();
        auto b = pool->acquire(4096).value();
    }
    BOOST_TEST(pool->stats().cached_bytes == 4096U);
    BOOST_TEST(*counts.freed == 1);
    pool->trim();
    BOOST_TEST(pool->stats().cached_bytes == 0U);
    BOOST_TEST(*counts.freed == 2);
}

BOOST_AUTO_TEST_CASE(storages_outlive_their_pool_and_free_through_it)
{
    const counting_source counts;
    auto pool = ruda::storage_pool::create({.source = counts.source()});
    auto s = pool->acquire(300).value();
    std::memset(s.writable_data(), 3, s.size());
    pool.reset(); // the storage keeps the pool alive
    BOOST_TEST(*counts.freed == 0);
    BOOST_TEST(s[299] == 3);
    s = storage{};
    BOOST_TEST(*counts.freed == 1); // back to the pool, which died and freed it
}

BOOST_AUTO_TEST_CASE(a_source_without_memory_gives_an_error_naming_it)
{
    const counting_source counts;
    auto pool = ruda::storage_pool::create({.source = counts.source(true)});
    const auto s = pool->acquire(100);
    BOOST_REQUIRE(!s);
    BOOST_TEST(s.error() == ruda::errc::allocation_too_large);
    BOOST_TEST(s.error().message().find("pinned test memory") != std::string::npos);
    BOOST_TEST(pool->acquire(0).value().empty());
}

BOOST_AUTO_TEST_SUITE_END()
