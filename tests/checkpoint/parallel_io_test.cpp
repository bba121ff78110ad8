// Saves and loads with several writers and readers: the file is the same whatever their
// number, every writer's failure fails the save and leaves the previous file, writes really
// overlap, and readers find corruption in the same order as one reader.
#include "checkpoint_test_support.hpp"
#include "../support/async_test.hpp"

#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/checkpoint/checkpoint_manager.hpp>
#include <ruda/checkpoint/detail/io_jobs.hpp>

#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

namespace {

using ruda::errc;
using ruda::test::temp_dir;

// About 22 MiB, over the size from which saves and loads use several threads: a payload of
// 10 MiB and two bytes (written in two pieces), large ones of 0.5 to 2 MiB, hundreds of small
// ones between them, empty ones and sections.
ruda::checkpoint mixed_checkpoint()
{
    std::vector<ruda::gradient_entry> entries;
    std::uint64_t id = 1;
    const auto add = [&](std::size_t halves) {
        entries.push_back({ruda::param_id{id++}, ruda::dtype::f16(),
                           ruda::test::patterned(2 * halves, {halves}, ruda::dtype::f16())});
    };
    add((5U << 20U) + 1);
    for (std::size_t k = 0; k < 4; ++k) {
        add((k + 1) << 18U);
        for (std::size_t small = 0; small < 400; ++small) {
            add(small % 7 == 0 ? 0 : 1 + (small * 37) % 1500);
        }
    }
    add((1U << 19U) - 1); // just under the size written from the record
    ruda::checkpoint c{ruda::gradients_params_record{std::move(entries)}};
    c.put("step", std::uint64_t{42}).value();
    c.put_bytes("blob", std::vector<std::uint8_t>(3U << 20U, 7)).value();
    return c;
}

const ruda::checkpoint& mixed_sample()
{
    static const ruda::checkpoint c = mixed_checkpoint();
    return c;
}

// Fails pwrite number `fail_at` (counting from 1, across all threads); thread-safe.
class failing_pwrite : public ruda::file_ops {
  public:
    explicit failing_pwrite(int fail_at) : fail_at_(fail_at) {}
    std::atomic<int> pwrites{0};

    ruda::result<void> pwrite(int fd, const void* data, std::size_t size,
                              std::uint64_t offset) override
    {
        if (++pwrites == fail_at_) {
            return ruda::error{errc::io_error, "injected: no space left on device"};
        }
        return ruda::file_ops::pwrite(fd, data, size, offset);
    }

  private:
    int fail_at_;
};

// The first pwrite waits (up to a limit) until another thread is inside pwrite too.
class meeting_pwrite : public ruda::file_ops {
  public:
    bool met = false;

    ruda::result<void> pwrite(int fd, const void* data, std::size_t size,
                              std::uint64_t offset) override
    {
        {
            std::unique_lock lock{mutex_};
            threads_.insert(std::this_thread::get_id());
            if (threads_.size() >= 2) {
                met = true;
            }
            arrived_.notify_all();
            arrived_.wait_for(lock, ruda::test::hang_limit, [&] { return met; });
        }
        return ruda::file_ops::pwrite(fd, data, size, offset);
    }

  private:
    std::mutex mutex_;
    std::condition_variable arrived_;
    std::set<std::thread::id> threads_;
};

// Where the payload of parameter `id` lies in a saved file.
ruda::payload_location payload_of(const std::filesystem::path& path, std::uint64_t id)
{
    const auto reader = ruda::checkpoint_reader::open(path).value();
    for (const auto& entry : reader.index().entries) {
        if (entry.id == ruda::param_id{id}) {
            return entry.payload;
        }
    }
    throw std::logic_error("no such parameter");
}

ruda::result<ruda::checkpoint> load_with_readers(const std::filesystem::path& path,
                                                 unsigned readers)
{
    ruda::checkpoint_load_options options;
    options.readers = readers;
    return ruda::load_checkpoint_file(path, options);
}

} // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_parallel)

BOOST_AUTO_TEST_CASE(every_number_of_writers_writes_the_same_file)
{
    const temp_dir dir;
    BOOST_REQUIRE(ruda::save_checkpoint_file(dir / "one.ruda", mixed_sample(), {.writers = 1}));
    const auto one = ruda::test::read_bytes(dir / "one.ruda");
    for (const unsigned writers : {2U, 3U, 8U}) {
        BOOST_TEST_CONTEXT(writers << " writers")
        {
            BOOST_REQUIRE(
                ruda::save_checkpoint_file(dir / "n.ruda", mixed_sample(), {.writers = writers}));
            BOOST_TEST((ruda::test::read_bytes(dir / "n.ruda") == one));
        }
    }
    for (const unsigned readers : {1U, 4U}) {
        BOOST_TEST_CONTEXT(readers << " readers")
        {
            const auto loaded = load_with_readers(dir / "one.ruda", readers);
            BOOST_REQUIRE(loaded);
            BOOST_TEST((loaded.value() == mixed_sample()));
        }
    }
}

BOOST_AUTO_TEST_CASE(writes_overlap)
{
    const temp_dir dir;
    meeting_pwrite ops;
    BOOST_REQUIRE(ruda::save_checkpoint_file(dir / "c.ruda", mixed_sample(), {.writers = 4}, ops));
    BOOST_TEST(ops.met); // two threads were inside pwrite at once
    BOOST_TEST((ruda::load_checkpoint_file(dir / "c.ruda").value() == mixed_sample()));
}

BOOST_AUTO_TEST_CASE(any_failed_write_fails_the_save_and_keeps_the_previous_file)
{
    const temp_dir dir;
    const auto path = dir / "c.ruda";
    BOOST_REQUIRE(ruda::save_checkpoint_file(path, ruda::checkpoint{}));
    const auto previous = ruda::test::read_bytes(path);
    failing_pwrite counting{0};
    BOOST_REQUIRE(
        ruda::save_checkpoint_file(dir / "count.ruda", mixed_sample(), {.writers = 4}, counting));
    const int writes = counting.pwrites;
    BOOST_TEST(writes > 10);
    // The first, one in the middle, the header's and the preamble (the last).
    for (const int k : {1, writes / 2, writes - 2, writes}) {
        BOOST_TEST_CONTEXT("failing pwrite " << k << " of " << writes)
        {
            failing_pwrite ops{k};
            const auto saved = ruda::save_checkpoint_file(path, mixed_sample(), {.writers = 4}, ops);
            BOOST_REQUIRE(!saved);
            BOOST_TEST(saved.error() == errc::io_error);
            BOOST_TEST(saved.error().message().find("Saving " + path.string()) == 0U);
            BOOST_TEST(!std::filesystem::exists(dir / "c.ruda.tmp"));
            BOOST_TEST((ruda::test::read_bytes(path) == previous));
        }
    }
}

BOOST_AUTO_TEST_CASE(the_manager_saves_with_its_writers)
{
    const temp_dir dir;
    ruda::checkpoint_manager manager{dir.path(), {.save = {.writers = 3}}};
    BOOST_REQUIRE(manager.save(7, mixed_sample()));
    BOOST_REQUIRE(ruda::save_checkpoint_file(
        dir / "one.ruda", mixed_sample(),
        {.writers = 1, .identity = ruda::run_identity{manager.run_id(), 7}}));
    BOOST_TEST(
        (ruda::test::read_bytes(manager.path_of(7)) == ruda::test::read_bytes(dir / "one.ruda")));
}

BOOST_AUTO_TEST_CASE(readers_report_the_first_corruption_in_file_order)
{
    const temp_dir dir;
    const auto path = dir / "c.ruda";
    BOOST_REQUIRE(ruda::save_checkpoint_file(path, mixed_sample()));
    const auto big = payload_of(path, 1);     // the 10 MiB payload, first in the file
    const auto small = payload_of(path, 500); // a small one far after it
    auto bytes = ruda::test::read_bytes(path);
    bytes[big.offset + (9U << 20U)] ^= 0x10U; // in its second piece
    bytes[small.offset] ^= 0x01U;
    ruda::test::write_bytes(path, bytes);
    for (int round = 0; round < 3; ++round) {
        const auto loaded = load_with_readers(path, 4);
        BOOST_REQUIRE(!loaded);
        BOOST_TEST(loaded.error() == errc::checksum_mismatch);
        BOOST_TEST(loaded.error().message().find("parameter 1") != std::string::npos);
    }
}

BOOST_AUTO_TEST_CASE(readers_verify_a_mapped_file_in_place)
{
    const temp_dir dir;
    BOOST_REQUIRE(ruda::save_checkpoint_file(dir / "c.ruda", mixed_sample()));
    auto bytes = ruda::test::read_bytes(dir / "c.ruda");
    {
        const ruda::test::sealed_memfd file{bytes};
        BOOST_TEST(ruda::checkpoint_reader::open(file.path()).value().mapping_reason() ==
                   "sealed memfd");
        const auto loaded = load_with_readers(file.path(), 4);
        BOOST_REQUIRE(loaded);
        BOOST_TEST((loaded.value() == mixed_sample()));
    }
    const auto big = payload_of(dir / "c.ruda", 1);
    const auto small = payload_of(dir / "c.ruda", 500);
    bytes[small.offset] ^= 0x01U;
    bytes[big.offset + big.length - 1] ^= 0x01U;
    const ruda::test::sealed_memfd damaged{bytes};
    const auto loaded = load_with_readers(damaged.path(), 4);
    BOOST_REQUIRE(!loaded);
    BOOST_TEST(loaded.error() == errc::checksum_mismatch);
    BOOST_TEST(loaded.error().message().find("parameter 1") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(readers_check_the_padding_between_their_reads)
{
    const temp_dir dir;
    const auto path = dir / "c.ruda";
    BOOST_REQUIRE(ruda::save_checkpoint_file(path, mixed_sample()));
    const auto first = payload_of(path, 1);
    const auto second = payload_of(path, 2);
    BOOST_REQUIRE(second.offset > first.offset + first.length); // 10 MiB + 2 is not aligned
    auto bytes = ruda::test::read_bytes(path);
    bytes[first.offset + first.length] = 0xFF;
    ruda::test::write_bytes(path, bytes);
    const auto loaded = load_with_readers(path, 4);
    BOOST_REQUIRE(!loaded);
    BOOST_TEST(loaded.error() == errc::malformed_record);
    BOOST_TEST(loaded.error().message().find("nonzero padding") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(
    jobs_report_the_lowest_failure_and_rethrow_exceptions_and_small_work_gets_one_thread)
{
    for (int round = 0; round < 20; ++round) {
        std::atomic<int> ran{0};
        std::atomic<bool> worker_in_range{true};
        const auto failed = ruda::detail::run_jobs(
            100, 4, [&](std::size_t k, unsigned worker) -> ruda::result<void> {
                if (worker >= 4U) {
                    worker_in_range = false;
                }
                ++ran;
                if (k == 9 || k == 5) {
                    return ruda::error{errc::io_error, "job " + std::to_string(k)};
                }
                return ruda::success();
            });
        BOOST_REQUIRE(!failed);
        BOOST_TEST(failed.error().message() == "job 5");
        BOOST_TEST(worker_in_range.load());
        BOOST_TEST(ran.load() < 100); // no job starts once a failure is seen
    }
    BOOST_CHECK_THROW(
        (void)ruda::detail::run_jobs(10, 3,
                                     [](std::size_t k, unsigned) -> ruda::result<void> {
                                         if (k == 4) {
                                             throw std::runtime_error("thrown");
                                         }
                                         return ruda::success();
                                     }),
        std::runtime_error);
    BOOST_TEST(ruda::detail::io_threads(8, ruda::detail::parallel_min_bytes - 1) == 1U);
    BOOST_TEST(ruda::detail::io_threads(3, ruda::detail::parallel_min_bytes) == 3U);
    const unsigned automatic = ruda::detail::io_threads(0, ruda::detail::parallel_min_bytes);
    BOOST_TEST((automatic >= 1U && automatic <= 4U));
    BOOST_TEST(ruda::detail::run_jobs(0, 4, [](std::size_t, unsigned) -> ruda::result<void> {
                   throw std::logic_error("no job runs");
               }).has_value());
}

BOOST_AUTO_TEST_SUITE_END()
