// try_read_sync: completes real reads on a private loop, refuses (reading nothing) wherever
// blocking could never finish, honours its deadline and maps exceptions to errors.
#include "../support/async_test.hpp"

#include <ruda/backend/async_backend.hpp>
#include <ruda/backend/cpu_backend.hpp>
#include <ruda/runtime/detail/post_completion.hpp>
#include <ruda/runtime/try_read_sync.hpp>

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/test/unit_test.hpp>

#include <future>
#include <stdexcept>
#include <thread>

namespace {

using namespace std::chrono_literals;
using ruda::errc;

ruda::tensor_data tensor_of(std::vector<float> values)
{
    const std::size_t n = values.size();
    return ruda::tensor_data::from_values(std::move(values), {n}).value();
}

ruda::async_backend::float_tensor on_device(const ruda::async_device& device,
                                            std::vector<float> values)
{
    return ruda::async_backend::float_from_data(tensor_of(std::move(values)), device).value();
}

} // namespace

BOOST_AUTO_TEST_SUITE(runtime_sync)

BOOST_AUTO_TEST_CASE(reads_a_cpu_tensor)
{
    const ruda::test::watchdog guard{"reads_a_cpu_tensor"};
    const auto tensor = ruda::cpu_backend::float_from_data(tensor_of({1, 2, 3}), {}).value();
    auto data = ruda::try_read_sync([&] { return ruda::cpu_backend::float_into_data(tensor); });
    BOOST_REQUIRE(data);
    BOOST_TEST(data.value() == tensor.data());
    BOOST_TEST(!data.value().bytes().empty());
}

BOOST_AUTO_TEST_CASE(reads_an_async_device_tensor_after_its_latency)
{
    const ruda::test::watchdog guard{"reads_an_async_device_tensor_after_its_latency"};
    const ruda::async_device device{{.latency = 20ms}};
    const auto tensor = on_device(device, {4, 5});
    const auto start = std::chrono::steady_clock::now();
    auto data =
        ruda::try_read_sync([&] { return ruda::async_backend::float_into_data(tensor); });
    BOOST_TEST((std::chrono::steady_clock::now() - start >= 20ms));
    BOOST_REQUIRE(data);
    BOOST_TEST(data.value().values<float>().value()[1] == 5.0F);
    const auto stats = device.stats();
    BOOST_TEST(stats.reads_issued == 1U);
    BOOST_TEST(stats.reads_completed == 1U);
    BOOST_TEST(stats.in_flight == 0U);
}

BOOST_AUTO_TEST_CASE(the_factory_gets_the_private_executor)
{
    const ruda::test::watchdog guard{"the_factory_gets_the_private_executor"};
    auto value = ruda::try_read_sync(
        [](const boost::asio::io_context::executor_type& ex) -> boost::asio::awaitable<ruda::result<int>> {
            // A timer on the private context: its I/O objects belong to it.
            boost::asio::steady_timer timer{ex, 5ms};
            co_await timer.async_wait(boost::asio::use_awaitable);
            co_return ex.running_in_this_thread() ? 7 : -1;
        });
    BOOST_REQUIRE(value);
    BOOST_TEST(value.value() == 7);
}

BOOST_AUTO_TEST_CASE(refuses_a_device_without_blocking_reads)
{
    const ruda::test::watchdog guard{"refuses_a_device_without_blocking_reads"};
    const ruda::async_device device{{.blocking_reads = false}};
    const auto tensor = on_device(device, {1});
    bool called = false;
    auto data = ruda::try_read_sync(
        [&] {
            called = true;
            return ruda::async_backend::float_into_data(tensor);
        },
        {.blocking_reads = ruda::async_backend::blocking_reads(device)});
    BOOST_REQUIRE(!data);
    BOOST_TEST(data.error() == errc::sync_read_unavailable);
    BOOST_TEST(data.error().message().find("cannot complete a blocking read") !=
               std::string::npos);
    BOOST_TEST(!called);
    BOOST_TEST(device.stats().reads_issued == 0U);
}

BOOST_AUTO_TEST_CASE(refuses_on_the_device_worker_thread)
{
    const ruda::test::watchdog guard{"refuses_on_the_device_worker_thread"};
    const ruda::async_device device;
    const auto tensor = on_device(device, {1});
    std::promise<ruda::result<ruda::tensor_data>> outcome;
    bool on_worker = false;
    boost::asio::post(device.executor(), [&] {
        on_worker = device.running_in_worker_thread();
        outcome.set_value(
            ruda::try_read_sync([&] { return ruda::async_backend::float_into_data(tensor); }));
    });
    auto data = outcome.get_future().get();
    BOOST_TEST(on_worker);
    BOOST_REQUIRE(!data);
    BOOST_TEST(data.error() == errc::sync_read_unavailable);
    BOOST_TEST(device.stats().reads_issued == 0U);
}

BOOST_AUTO_TEST_CASE(a_nested_sync_wait_refuses_and_the_outer_one_completes)
{
    const ruda::test::watchdog guard{"a_nested_sync_wait_refuses_and_the_outer_one_completes"};
    const ruda::async_device device{{.latency = 1ms}};
    const auto tensor = on_device(device, {3});
    std::optional<ruda::result<ruda::tensor_data>> inner;
    auto outer = ruda::try_read_sync([&] {
        inner.emplace(
            ruda::try_read_sync([&] { return ruda::async_backend::float_into_data(tensor); }));
        return ruda::async_backend::float_into_data(tensor);
    });
    BOOST_REQUIRE(inner.has_value());
    BOOST_REQUIRE(!*inner);
    BOOST_TEST(inner->error() == errc::sync_read_unavailable);
    BOOST_REQUIRE(outer);
    BOOST_TEST(device.stats().reads_issued == 1U);
}

BOOST_AUTO_TEST_CASE(refuses_inside_a_no_blocking_scope)
{
    const ruda::test::watchdog guard{"refuses_inside_a_no_blocking_scope"};
    const auto tensor = ruda::cpu_backend::float_from_data(tensor_of({1}), {}).value();
    {
        const ruda::no_blocking_scope event_loop;
        BOOST_TEST(ruda::blocking_forbidden_on_this_thread());
        auto data =
            ruda::try_read_sync([&] { return ruda::cpu_backend::float_into_data(tensor); });
        BOOST_REQUIRE(!data);
        BOOST_TEST(data.error() == errc::sync_read_unavailable);
    }
    BOOST_TEST(!ruda::blocking_forbidden_on_this_thread());
    BOOST_TEST(bool(
        ruda::try_read_sync([&] { return ruda::cpu_backend::float_into_data(tensor); })));
}

BOOST_AUTO_TEST_CASE(refuses_when_the_predicate_says_so)
{
    const ruda::test::watchdog guard{"refuses_when_the_predicate_says_so"};
    const ruda::async_device device;
    const auto tensor = on_device(device, {1});
    bool asked = false;
    auto data = ruda::try_read_sync([&] { return ruda::async_backend::float_into_data(tensor); },
                                    {.refuse_if = [&] {
                                        asked = true;
                                        return true;
                                    }});
    BOOST_TEST(asked);
    BOOST_REQUIRE(!data);
    BOOST_TEST(data.error() == errc::sync_read_unavailable);
    BOOST_TEST(data.error().message().find("predicate") != std::string::npos);
    BOOST_TEST(device.stats().reads_issued == 0U);
}

BOOST_AUTO_TEST_CASE(a_deadline_on_a_hung_read_times_out_and_leaves_nothing_running)
{
    const ruda::test::watchdog guard{
        "a_deadline_on_a_hung_read_times_out_and_leaves_nothing_running"};
    const ruda::async_device device{{.hang_reads = true}};
    const auto tensor = on_device(device, {1, 2});
    const auto start = std::chrono::steady_clock::now();
    auto data = ruda::try_read_sync([&] { return ruda::async_backend::float_into_data(tensor); },
                                    {.deadline = 50ms});
    BOOST_TEST((std::chrono::steady_clock::now() - start >= 50ms));
    BOOST_REQUIRE(!data);
    BOOST_TEST(data.error() == errc::timed_out);
    BOOST_TEST(data.error().message().find("was cancelled") != std::string::npos);
    const auto stats = device.stats();
    BOOST_TEST(stats.reads_issued == 1U);
    BOOST_TEST(stats.reads_cancelled == 1U);
    BOOST_TEST(stats.in_flight == 0U);
}

BOOST_AUTO_TEST_CASE(a_read_within_its_deadline_succeeds)
{
    const ruda::test::watchdog guard{"a_read_within_its_deadline_succeeds"};
    const ruda::async_device device{{.latency = 1ms}};
    const auto tensor = on_device(device, {1});
    BOOST_TEST(bool(ruda::try_read_sync(
        [&] { return ruda::async_backend::float_into_data(tensor); }, {.deadline = 10s})));
}

namespace {

// Completes only when a caller-owned event fires and filters out every cancellation, like a
// broken backend.
boost::asio::awaitable<ruda::result<int>> wait_ignoring_cancel(std::shared_ptr<std::promise<void>> gate)
{
    co_await boost::asio::this_coro::reset_cancellation_state(
        [](boost::asio::cancellation_type) { return boost::asio::cancellation_type::none; });
    co_await boost::asio::this_coro::throw_if_cancelled(false);
    auto ready = gate->get_future();
    auto ex = co_await boost::asio::this_coro::executor;
    boost::asio::steady_timer poll{ex};
    while (ready.wait_for(0s) != std::future_status::ready) {
        poll.expires_after(1ms);
        boost::system::error_code ignored;
        co_await poll.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ignored));
    }
    co_return 1;
}

} // namespace

BOOST_AUTO_TEST_CASE(a_read_that_ignores_cancellation_is_abandoned_not_awaited)
{
    const ruda::test::watchdog guard{"a_read_that_ignores_cancellation_is_abandoned_not_awaited"};
    auto gate = std::make_shared<std::promise<void>>();
    boost::asio::awaitable<ruda::result<int>> (*op)(std::shared_ptr<std::promise<void>>) =
        wait_ignoring_cancel;
    auto value = ruda::try_read_sync([&] { return op(gate); },
                                     {.deadline = 20ms, .unwind_grace = 20ms});
    BOOST_REQUIRE(!value);
    BOOST_TEST(value.error() == errc::timed_out);
    BOOST_TEST(value.error().message().find("abandoned") != std::string::npos);
}

namespace {

// A thread that completed a read and goes on holding work on the reader's context until
// `leave` is set: a device thread starved inside its post() of the completion.
struct lingering_thread {
    std::promise<void> leave;
    std::thread thread;
};

// Not a coroutine: one that took the future by value had a reference to its state released once
// too often in the GCC 12 (TSan) build. The read's initiation starts the thread when awaited.
boost::asio::awaitable<ruda::result<int>> complete_and_linger(lingering_thread& lingering)
{
    return boost::asio::async_initiate<const boost::asio::use_awaitable_t<>&,
                                       void(ruda::result<int>)>(
        [&lingering](auto handler) {
            auto work = ruda::detail::track_work(boost::asio::get_associated_executor(handler));
            lingering.thread = std::thread{[work, leave = lingering.leave.get_future(),
                                            h = std::move(handler)]() mutable {
                boost::asio::post(work, [h = std::move(h)]() mutable { std::move(h)(7); });
                leave.wait(); // still holding `work`
            }};
        },
        boost::asio::use_awaitable);
}

} // namespace

BOOST_AUTO_TEST_CASE(a_context_a_thread_still_holds_work_on_is_abandoned_not_destroyed)
{
    const ruda::test::watchdog guard{"a_context_a_thread_still_holds_work_on"};
    lingering_thread lingering;
    auto value = ruda::try_read_sync([&] { return complete_and_linger(lingering); },
                                     {.unwind_grace = 20ms});
    BOOST_REQUIRE(value);
    BOOST_TEST(value.value() == 7);
    // The context outlived the grace with the thread's work on it: destroyed then, the thread's
    // last touch of it below would be a use after free (ASan reports it; Release may crash).
    lingering.leave.set_value();
    lingering.thread.join();
}

BOOST_AUTO_TEST_CASE(exceptions_become_errors)
{
    const ruda::test::watchdog guard{"exceptions_become_errors"};
    auto thrown = ruda::try_read_sync([]() -> boost::asio::awaitable<ruda::result<int>> {
        throw std::runtime_error("device on fire");
        co_return 0;
    });
    BOOST_REQUIRE(!thrown);
    BOOST_TEST(thrown.error() == errc::read_failed);
    BOOST_TEST(thrown.error().message().find("device on fire") != std::string::npos);

    auto from_value = ruda::try_read_sync([]() -> boost::asio::awaitable<ruda::result<int>> {
        const ruda::result<int> failed = ruda::error{errc::io_error, "disk gone"};
        co_return failed.value() + 1; // throws std::system_error carrying the message
    });
    BOOST_REQUIRE(!from_value);
    BOOST_TEST(from_value.error() == errc::io_error);
    BOOST_TEST(from_value.error().message().find("disk gone") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_device_destroyed_during_a_sync_read_cancels_it)
{
    const ruda::test::watchdog guard{"a_device_destroyed_during_a_sync_read_cancels_it"};
    std::optional<ruda::async_device> device{ruda::async_device{{.hang_reads = true}}};
    const auto tensor = on_device(*device, {1});
    std::thread destroyer{[&] {
        while (device->stats().in_flight == 0) {
            std::this_thread::sleep_for(1ms);
        }
        device.reset();
    }};
    auto data = ruda::try_read_sync([&] { return ruda::async_backend::float_into_data(tensor); });
    destroyer.join();
    BOOST_REQUIRE(!data);
    BOOST_TEST(data.error() == errc::cancelled);
    // The tensor outlives its device; reading it now fails at once.
    auto late = ruda::try_read_sync([&] { return ruda::async_backend::float_into_data(tensor); });
    BOOST_REQUIRE(!late);
    BOOST_TEST(late.error() == errc::cancelled);
}

BOOST_AUTO_TEST_SUITE_END()
