// async_device and async_backend: latency, bandwidth and the transfer limit, resumption on
// the reader's executor, counters, cancellation of queued and running reads, and a device
// destroyed with reads pending.
#include "../support/async_test.hpp"

#include <ruda/backend/async_backend.hpp>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/test/unit_test.hpp>

#include <thread>

namespace {

using namespace std::chrono_literals;
using ruda::errc;
using gpu = ruda::async_backend;

gpu::float_tensor tensor_of(const ruda::async_device& device, std::size_t elements)
{
    std::vector<float> values(elements, 1.0F);
    return gpu::float_from_data(ruda::tensor_data::from_values(std::move(values), {elements}).value(),
                                device)
        .value();
}

// Reports where the read resumed.
boost::asio::awaitable<ruda::result<bool>> resumes_on_reader(gpu::float_tensor tensor,
                                                            ruda::async_device device)
{
    auto data = co_await gpu::float_into_data(std::move(tensor));
    if (!data) {
        co_return data.error();
    }
    const auto ex = co_await boost::asio::this_coro::executor;
    const auto* io = ex.target<boost::asio::io_context::executor_type>();
    co_return io != nullptr && io->running_in_this_thread() && !device.running_in_worker_thread();
}

} // namespace

BOOST_AUTO_TEST_SUITE(backend_async)

BOOST_AUTO_TEST_CASE(models_the_backend_concept)
{
    static_assert(ruda::backend<gpu>);
    const ruda::async_device device;
    const ruda::async_device other;
    const auto tensor = tensor_of(device, 4);
    BOOST_TEST((gpu::float_device(tensor) == device));
    BOOST_TEST(!(gpu::float_device(tensor) == other));
    BOOST_TEST(gpu::blocking_reads(device));
    BOOST_TEST(!gpu::blocking_reads(ruda::async_device{{.blocking_reads = false}}));
    auto ints = ruda::tensor_data::from_values(std::vector<std::int8_t>{1}, {1}).value();
    BOOST_TEST(gpu::float_from_data(ints, device).error() == errc::invalid_dtype);
    BOOST_TEST(gpu::q_from_data(ints, device).error() == errc::invalid_dtype);
    const auto cast = gpu::float_cast(tensor, ruda::dtype::bf16()).value();
    BOOST_TEST(gpu::dtype_of(cast) == ruda::dtype::bf16());
    BOOST_TEST((gpu::float_device(cast) == device));
}

BOOST_AUTO_TEST_CASE(a_read_resumes_on_the_readers_executor)
{
    const ruda::test::watchdog guard{"a_read_resumes_on_the_readers_executor"};
    boost::asio::io_context io;
    const ruda::async_device device{{.latency = 2ms}};
    auto where = ruda::test::run_to_end(io, resumes_on_reader(tensor_of(device, 8), device));
    BOOST_REQUIRE(where.has_value());
    BOOST_REQUIRE(*where);
    BOOST_TEST(where->value());
}

// The storage a GPU backend's pinned record buffers stand on: reads land in the pool's
// buffers, which come back when a snapshot is dropped and serve the next one.
BOOST_AUTO_TEST_CASE(reads_land_in_the_record_pool_and_its_buffers_are_reused)
{
    const ruda::test::watchdog guard{"reads_land_in_the_record_pool_and_its_buffers_are_reused"};
    boost::asio::io_context io;
    auto pool = ruda::storage_pool::create();
    const ruda::async_device device{{.record_pool = pool}};
    const auto tensor = tensor_of(device, 1000);
    const std::uint8_t* first = nullptr;
    for (int snapshot = 0; snapshot < 3; ++snapshot) {
        auto read = ruda::test::run_to_end(io, gpu::float_into_data(tensor));
        BOOST_REQUIRE(read.has_value());
        BOOST_REQUIRE(*read);
        const auto& bytes = read->value().bytes();
        BOOST_TEST((bytes.origin() == ruda::storage_origin::pooled));
        BOOST_TEST(read->value().values<float>().value()[999] == 1.0F);
        if (snapshot == 0) {
            first = bytes.data();
        }
        BOOST_TEST(bytes.data() == first); // the same buffer, back from the last snapshot
    }
    BOOST_TEST(pool->stats().allocations == 1U);
    BOOST_TEST(pool->stats().reuses == 2U);

    // A pool without memory fails the read, with the pool's code.
    auto empty = ruda::storage_pool::create(
        {.source = {[](std::size_t) -> void* { return nullptr; }, [](void*, std::size_t) {}, "none"}});
    const ruda::async_device starved{{.record_pool = empty}};
    auto failed = ruda::test::run_to_end(io, gpu::float_into_data(tensor_of(starved, 4)));
    BOOST_REQUIRE(failed.has_value());
    BOOST_REQUIRE(!*failed);
    BOOST_TEST(failed->error() == errc::allocation_too_large);
}

BOOST_AUTO_TEST_CASE(latency_and_bandwidth_set_the_transfer_time)
{
    const ruda::test::watchdog guard{"latency_and_bandwidth_set_the_transfer_time"};
    boost::asio::io_context io;
    // 40 000 bytes at 1 MB/s is 40 ms, plus 10 ms latency.
    const ruda::async_device device{{.latency = 10ms, .bytes_per_second = 1e6}};
    const auto start = std::chrono::steady_clock::now();
    auto data = ruda::test::run_to_end(io, gpu::float_into_data(tensor_of(device, 10000)));
    BOOST_TEST((std::chrono::steady_clock::now() - start >= 50ms));
    BOOST_REQUIRE(data.has_value());
    BOOST_REQUIRE(*data);
    BOOST_TEST(data->value().num_elements() == 10000U);
    const auto stats = device.stats();
    BOOST_TEST(stats.bytes_read == 40000U);
    BOOST_TEST(stats.reads_completed == 1U);
}

BOOST_AUTO_TEST_CASE(reads_beyond_the_transfer_limit_queue)
{
    const ruda::test::watchdog guard{"reads_beyond_the_transfer_limit_queue"};
    boost::asio::io_context io;
    // Two engines, six 20 ms reads: three rounds, so at least 60 ms.
    const ruda::async_device device{{.latency = 20ms, .concurrent_transfers = 2}};
    std::vector<std::shared_ptr<ruda::test::spawned<ruda::tensor_data>>> reads;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 6; ++i) {
        reads.push_back(ruda::test::spawn(io, gpu::float_into_data(tensor_of(device, 1))));
    }
    BOOST_REQUIRE(ruda::test::run_until(io, [&] {
        return std::all_of(reads.begin(), reads.end(), [](const auto& r) { return r->done.load(); });
    }));
    BOOST_TEST((std::chrono::steady_clock::now() - start >= 60ms));
    for (const auto& read : reads) {
        BOOST_REQUIRE(read->value.has_value());
        BOOST_TEST(bool(*read->value));
    }
    BOOST_TEST(device.stats().peak_in_flight == 6U); // issued at once; two transferring
}

BOOST_AUTO_TEST_CASE(cancelling_a_queued_or_running_read)
{
    const ruda::test::watchdog guard{"cancelling_a_queued_or_running_read"};
    boost::asio::io_context io;
    const ruda::async_device device{{.concurrent_transfers = 1, .hang_reads = true}};
    boost::asio::cancellation_signal running_cancel;
    boost::asio::cancellation_signal queued_cancel;
    auto running = ruda::test::spawn(io, gpu::float_into_data(tensor_of(device, 1)), &running_cancel);
    auto queued = ruda::test::spawn(io, gpu::float_into_data(tensor_of(device, 1)), &queued_cancel);
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return device.stats().in_flight == 2; }));
    queued_cancel.emit(boost::asio::cancellation_type::terminal);
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return queued->done.load(); }));
    BOOST_TEST(queued->value->error() == errc::cancelled);
    BOOST_TEST(!running->done);
    running_cancel.emit(boost::asio::cancellation_type::terminal);
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return running->done.load(); }));
    BOOST_TEST(running->value->error() == errc::cancelled);
    const auto stats = device.stats();
    BOOST_TEST(stats.reads_cancelled == 2U);
    BOOST_TEST(stats.in_flight == 0U);
}

BOOST_AUTO_TEST_CASE(destroying_the_device_cancels_pending_reads)
{
    const ruda::test::watchdog guard{"destroying_the_device_cancels_pending_reads"};
    std::optional<ruda::async_device> device{ruda::async_device{{.latency = 10s,
                                                                 .concurrent_transfers = 2}}};
    boost::asio::io_context io;
    std::vector<std::shared_ptr<ruda::test::spawned<ruda::tensor_data>>> reads;
    for (int i = 0; i < 5; ++i) { // two transferring, three queued
        reads.push_back(ruda::test::spawn(io, gpu::float_into_data(tensor_of(*device, 16))));
    }
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return device->stats().in_flight == 5; }));
    const auto tensor = tensor_of(*device, 1);
    device.reset(); // the last handle: the device shuts down
    BOOST_REQUIRE(ruda::test::run_until(io, [&] {
        return std::all_of(reads.begin(), reads.end(), [](const auto& r) { return r->done.load(); });
    }));
    for (const auto& read : reads) {
        BOOST_REQUIRE(read->value.has_value());
        BOOST_REQUIRE(!*read->value);
        BOOST_TEST(read->value->error() == errc::cancelled);
    }
    // A tensor that outlived its device reads as cancelled, at once.
    auto late = ruda::test::run_to_end(io, gpu::float_into_data(tensor));
    BOOST_REQUIRE(late.has_value());
    BOOST_TEST(late->error() == errc::cancelled);
    BOOST_TEST(gpu::float_device(tensor).stats().reads_issued == 0U);
}

BOOST_AUTO_TEST_CASE(works_with_other_completion_tokens)
{
    const ruda::test::watchdog guard{"works_with_other_completion_tokens"};
    boost::asio::io_context io;
    const ruda::async_device device{{.latency = 1ms}};
    const auto tensor = tensor_of(device, 3);
    std::optional<std::size_t> got;
    device.async_read(tensor, boost::asio::bind_executor(io, [&](ruda::result<ruda::tensor_data> data) {
                          got = data ? data.value().bytes().size() : 0;
                      }));
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return got.has_value(); }));
    BOOST_TEST(*got == 12U);

    // A future, resolved by a thread that runs the context.
    auto work = boost::asio::make_work_guard(io);
    std::thread runner{[&] { io.restart(); io.run(); }};
    auto future = device.async_read(tensor, boost::asio::bind_executor(io, boost::asio::use_future));
    BOOST_TEST(future.get().value().bytes().size() == 12U);
    work.reset();
    runner.join();

    // A tensor of another device: refused, not read there.
    const ruda::async_device other;
    std::optional<ruda::result<ruda::tensor_data>> refused;
    other.async_read(tensor, boost::asio::bind_executor(io, [&](auto r) { refused.emplace(std::move(r)); }));
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return refused.has_value(); }));
    BOOST_TEST(refused->error() == errc::unsupported_device);
    BOOST_TEST(refused->error().message() == "async device: the tensor lives on another device");
    BOOST_TEST(other.stats().reads_issued == 0U);
}

BOOST_AUTO_TEST_CASE(counters_add_up_under_faults)
{
    const ruda::test::watchdog guard{"counters_add_up_under_faults"};
    boost::asio::io_context io;
    const ruda::async_device device{{.fail_read = 2}};
    for (int i = 0; i < 4; ++i) {
        auto read = ruda::test::run_to_end(io, gpu::float_into_data(tensor_of(device, 2)));
        BOOST_REQUIRE(read.has_value());
        BOOST_TEST(bool(*read) == (i != 1));
    }
    const auto stats = device.stats();
    BOOST_TEST(stats.reads_issued == 4U);
    BOOST_TEST(stats.reads_completed == 3U);
    BOOST_TEST(stats.reads_failed == 1U);
    BOOST_TEST(stats.bytes_read == 24U);
    BOOST_TEST(stats.peak_in_flight == 1U);
    device.reset_peak();
    BOOST_TEST(device.stats().peak_in_flight == 0U);
}

BOOST_AUTO_TEST_SUITE_END()
