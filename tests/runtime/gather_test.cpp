// gather: input order, the window bound, the first failure cancelling the rest, and
// cancellation of the gather itself reaching the reads in flight.
#include "../support/async_test.hpp"

#include <ruda/backend/async_backend.hpp>
#include <ruda/backend/cpu_backend.hpp>
#include <ruda/runtime/gather.hpp>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/test/unit_test.hpp>

#include <stdexcept>
#include <thread>

namespace {

using namespace std::chrono_literals;
using ruda::errc;

std::vector<ruda::async_backend::float_tensor> device_tensors(const ruda::async_device& device,
                                                              std::size_t count)
{
    std::vector<ruda::async_backend::float_tensor> tensors;
    for (std::size_t i = 0; i < count; ++i) {
        auto data = ruda::tensor_data::from_values(std::vector<float>{static_cast<float>(i)}, {1});
        tensors.push_back(ruda::async_backend::float_from_data(std::move(data).value(), device).value());
    }
    return tensors;
}

boost::asio::awaitable<ruda::result<std::vector<ruda::tensor_data>>>
read_all(std::vector<ruda::async_backend::float_tensor> tensors, std::size_t window)
{
    // A named factory: GCC 12 mishandles capturing lambdas inside a co_await expression.
    const auto read_one = [&tensors](std::size_t i) {
        return ruda::async_backend::float_into_data(tensors[i]);
    };
    co_return co_await ruda::gather(tensors.size(), window, read_one);
}

// Reads `slow` and then `failing` (one tensor), all at once.
boost::asio::awaitable<ruda::result<std::vector<ruda::tensor_data>>>
read_mixed(std::vector<ruda::async_backend::float_tensor> slow,
           ruda::async_backend::float_tensor failing)
{
    const auto read_one = [&](std::size_t i) {
        return i < slow.size() ? ruda::async_backend::float_into_data(slow[i])
                               : ruda::async_backend::float_into_data(failing);
    };
    co_return co_await ruda::gather(slow.size() + 1, slow.size() + 1, read_one);
}

float first_value(const ruda::tensor_data& data) { return data.values<float>().value()[0]; }

// What the weighted operations below saw in flight.
struct weight_log {
    std::vector<std::size_t> weights;
    std::size_t ops = 0;
    std::size_t weight = 0;
    std::size_t peak_weight = 0;
    std::size_t peak_ops = 0;
    bool heavy_ran_alone = true; // every operation over the budget was the only one in flight
    std::vector<std::size_t> start_order;
};

// Operation `i`: takes 1 ms on a timer and records what is in flight with it.
boost::asio::awaitable<ruda::result<std::size_t>> weighed_op(weight_log& log, std::size_t i,
                                                             std::size_t budget)
{
    log.start_order.push_back(i);
    ++log.ops;
    log.weight += log.weights[i];
    log.peak_ops = std::max(log.peak_ops, log.ops);
    log.peak_weight = std::max(log.peak_weight, log.weight);
    if (log.weights[i] > budget && log.ops != 1) {
        log.heavy_ran_alone = false;
    }
    boost::asio::steady_timer timer{co_await boost::asio::this_coro::executor, 1ms};
    co_await timer.async_wait(boost::asio::use_awaitable);
    --log.ops;
    log.weight -= log.weights[i];
    co_return i;
}

boost::asio::awaitable<ruda::result<std::vector<std::size_t>>>
gather_weighed(weight_log& log, ruda::gather_limits limits)
{
    const auto weight = [&log](std::size_t i) { return log.weights[i]; };
    const auto op = [&log, limits](std::size_t i) {
        return weighed_op(log, i, limits.max_in_flight_weight);
    };
    co_return co_await ruda::gather(log.weights.size(), limits, weight, op);
}

} // namespace

BOOST_AUTO_TEST_SUITE(runtime_gather)

BOOST_AUTO_TEST_CASE(results_come_back_in_input_order)
{
    const ruda::test::watchdog guard{"results_come_back_in_input_order"};
    boost::asio::io_context io;
    // Varied sizes make later reads finish before earlier ones.
    const ruda::async_device device{{.latency = 1ms, .bytes_per_second = 4e6,
                                     .concurrent_transfers = 8}};
    std::vector<ruda::async_backend::float_tensor> tensors;
    for (std::size_t i = 0; i < 24; ++i) {
        std::vector<float> values((24 - i) * 64, static_cast<float>(i));
        const std::size_t n = values.size();
        tensors.push_back(ruda::async_backend::float_from_data(
                              ruda::tensor_data::from_values(std::move(values), {n}).value(), device)
                              .value());
    }
    auto all = ruda::test::run_to_end(io, read_all(tensors, 8));
    BOOST_REQUIRE(all.has_value());
    BOOST_REQUIRE(*all);
    BOOST_REQUIRE_EQUAL(all->value().size(), 24U);
    for (std::size_t i = 0; i < 24; ++i) {
        BOOST_TEST(first_value(all->value()[i]) == static_cast<float>(i));
        BOOST_TEST(all->value()[i].num_elements() == (24 - i) * 64);
    }
}

BOOST_AUTO_TEST_CASE(peak_in_flight_never_exceeds_the_window)
{
    const ruda::test::watchdog guard{"peak_in_flight_never_exceeds_the_window"};
    for (const std::size_t window : {1U, 3U, 5U, 16U}) {
        boost::asio::io_context io;
        const ruda::async_device device{{.latency = 1ms, .concurrent_transfers = 64}};
        auto all = ruda::test::run_to_end(io, read_all(device_tensors(device, 40), window));
        BOOST_REQUIRE(all.has_value());
        BOOST_REQUIRE(*all);
        const auto stats = device.stats();
        BOOST_TEST(stats.reads_issued == 40U);
        BOOST_TEST(stats.peak_in_flight <= window);
        BOOST_TEST(stats.peak_in_flight >= 1U);
    }
}

BOOST_AUTO_TEST_CASE(the_weight_budget_bounds_what_is_in_flight)
{
    const ruda::test::watchdog guard{"the_weight_budget_bounds_what_is_in_flight"};
    weight_log log;
    log.weights = {4, 4, 4, 25, 1, 1, 1, 1, 9, 2, 0, 0, 7, 3, 3, 3};
    boost::asio::io_context io;
    auto all = ruda::test::run_to_end(
        io, gather_weighed(log, {.max_in_flight = 8, .max_in_flight_weight = 10}));
    BOOST_REQUIRE(all.has_value());
    BOOST_REQUIRE(*all);
    for (std::size_t i = 0; i < log.weights.size(); ++i) {
        BOOST_TEST(all->value()[i] == i);
        BOOST_TEST(log.start_order[i] == i); // started in index order
    }
    BOOST_TEST(log.heavy_ran_alone);    // 25 > 10: it ran, alone
    BOOST_TEST(log.peak_weight == 25U); // only while it ran alone
    BOOST_TEST(log.peak_ops >= 4U); // the four weights of 1 fit together
    BOOST_TEST(log.peak_ops <= 8U);
    BOOST_TEST(log.ops == 0U);
    BOOST_TEST(log.weight == 0U);

    // Without the heavy operation the peak stays within the budget.
    weight_log light;
    light.weights = {4, 4, 4, 1, 1, 1, 1, 9, 2, 0, 0, 7, 3, 3, 3};
    auto again = ruda::test::run_to_end(
        io, gather_weighed(light, {.max_in_flight = 8, .max_in_flight_weight = 10}));
    BOOST_REQUIRE(again.has_value());
    BOOST_REQUIRE(*again);
    BOOST_TEST(light.peak_weight <= 10U);
    BOOST_TEST(light.peak_weight >= 9U);

    // The count limit still holds when weights are no constraint.
    weight_log many;
    many.weights.assign(20, 1);
    auto counted = ruda::test::run_to_end(
        io, gather_weighed(many, {.max_in_flight = 3, .max_in_flight_weight = 1000}));
    BOOST_REQUIRE(counted.has_value());
    BOOST_REQUIRE(*counted);
    BOOST_TEST(many.peak_ops == 3U);
}

BOOST_AUTO_TEST_CASE(cancelling_a_gather_with_parked_workers)
{
    const ruda::test::watchdog guard{"cancelling_a_gather_with_parked_workers"};
    boost::asio::io_context io;
    // Each read weighs 1; a budget of 2 parks six of the eight workers behind two hung reads.
    const ruda::async_device device{{.concurrent_transfers = 64, .hang_reads = true}};
    const auto tensors = device_tensors(device, 30);
    boost::asio::cancellation_signal cancel;
    const auto weight = [](std::size_t) { return std::size_t{1}; };
    const auto read = [&tensors](std::size_t i) {
        return ruda::async_backend::float_into_data(tensors[i]);
    };
    auto out = ruda::test::spawn(
        io, ruda::gather(tensors.size(), {.max_in_flight = 8, .max_in_flight_weight = 2}, weight,
                         read),
        &cancel);
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return device.stats().in_flight == 2; }));
    ruda::test::run_until(io, [] { return false; }, 20ms); // nothing more may start
    BOOST_TEST(device.stats().reads_issued == 2U);
    cancel.emit(boost::asio::cancellation_type::terminal);
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return out->done.load(); }));
    BOOST_REQUIRE(out->value.has_value());
    BOOST_TEST(out->value->error() == errc::cancelled);
    BOOST_TEST(device.stats().reads_cancelled == 2U);
    BOOST_TEST(device.stats().in_flight == 0U);
}

BOOST_AUTO_TEST_CASE(the_window_is_filled)
{
    const ruda::test::watchdog guard{"the_window_is_filled"};
    boost::asio::io_context io;
    // Hung reads cannot finish, so every worker must have issued one before anything ends.
    const ruda::async_device device{{.concurrent_transfers = 64, .hang_reads = true}};
    boost::asio::cancellation_signal cancel;
    auto out = ruda::test::spawn(io, read_all(device_tensors(device, 40), 6), &cancel);
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return device.stats().in_flight == 6; }));
    cancel.emit(boost::asio::cancellation_type::terminal);
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return out->done.load(); }));
    BOOST_TEST(device.stats().peak_in_flight == 6U);
}

BOOST_AUTO_TEST_CASE(cancelling_the_gather_cancels_reads_in_flight)
{
    const ruda::test::watchdog guard{"cancelling_the_gather_cancels_reads_in_flight"};
    boost::asio::io_context io;
    const ruda::async_device device{{.concurrent_transfers = 16, .hang_reads = true}};
    boost::asio::cancellation_signal cancel;
    auto out = ruda::test::spawn(io, read_all(device_tensors(device, 100), 4), &cancel);
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return device.stats().in_flight == 4; }));
    cancel.emit(boost::asio::cancellation_type::terminal);
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return out->done.load(); }));
    BOOST_REQUIRE(!out->failure);
    BOOST_REQUIRE(out->value.has_value());
    BOOST_REQUIRE(!*out->value);
    BOOST_TEST(out->value->error() == errc::cancelled);
    const auto stats = device.stats();
    BOOST_TEST(stats.reads_issued == 4U); // no read started after the cancel
    BOOST_TEST(stats.reads_cancelled == 4U);
    BOOST_TEST(stats.in_flight == 0U);
}

BOOST_AUTO_TEST_CASE(an_injected_fault_fails_the_gather_and_cancels_the_rest)
{
    const ruda::test::watchdog guard{"an_injected_fault_fails_the_gather_and_cancels_the_rest"};
    boost::asio::io_context io;
    // Read 3 fails after 1 ms; the others would take 10 s, so only cancellation ends them.
    const ruda::async_device device{{.latency = 10s, .concurrent_transfers = 16, .fail_read = 3}};
    const ruda::async_device fast{{.latency = 1ms, .fail_read = 3}};
    auto failed = ruda::test::run_to_end(io, read_all(device_tensors(fast, 10), 1));
    BOOST_REQUIRE(failed.has_value());
    BOOST_REQUIRE(!*failed);
    BOOST_TEST(failed->error() == errc::read_failed);
    BOOST_TEST(failed->error().message().find("injected fault") != std::string::npos);
    BOOST_TEST(fast.stats().reads_issued == 3U); // nothing issued after the failure
    BOOST_TEST(fast.stats().reads_failed == 1U);

    // Mixed: reads on a slow device in flight when a fast device's read fails.
    const ruda::async_device failing{{.latency = 1ms, .fail_read = 1}};
    auto outcome = ruda::test::run_to_end(
        io, read_mixed(device_tensors(device, 4), device_tensors(failing, 1)[0]), 5000ms);
    BOOST_REQUIRE(outcome.has_value());
    BOOST_REQUIRE(!*outcome);
    BOOST_TEST(outcome->error() == errc::read_failed);
    BOOST_TEST(device.stats().reads_cancelled == 4U);
    BOOST_TEST(device.stats().in_flight == 0U);
}

BOOST_AUTO_TEST_CASE(seeded_fault_probability_is_reproducible)
{
    const ruda::test::watchdog guard{"seeded_fault_probability_is_reproducible"};
    const auto failures = [](std::uint64_t seed) {
        boost::asio::io_context io;
        const ruda::async_device device{{.fail_probability = 0.25, .fault_seed = seed}};
        auto tensors = device_tensors(device, 200);
        std::vector<bool> failed;
        for (const auto& tensor : tensors) {
            auto one = ruda::test::run_to_end(io, ruda::async_backend::float_into_data(tensor));
            BOOST_REQUIRE(one.has_value());
            failed.push_back(!*one);
        }
        BOOST_TEST(device.stats().reads_failed ==
                   static_cast<std::uint64_t>(std::count(failed.begin(), failed.end(), true)));
        return failed;
    };
    const auto first = failures(42);
    const auto again = failures(42);
    const auto other = failures(43);
    BOOST_TEST(first == again);
    BOOST_TEST(first != other);
    const auto count = std::count(first.begin(), first.end(), true);
    BOOST_TEST(count > 20);
    BOOST_TEST(count < 80);
}

BOOST_AUTO_TEST_CASE(an_exception_in_an_operation_is_an_error)
{
    const ruda::test::watchdog guard{"an_exception_in_an_operation_is_an_error"};
    boost::asio::io_context io;
    auto op = [](std::size_t i) -> boost::asio::awaitable<ruda::result<int>> {
        if (i == 2) {
            throw std::runtime_error("bad index");
        }
        co_return static_cast<int>(i);
    };
    auto outcome = ruda::test::run_to_end(io, ruda::gather(5, 2, op));
    BOOST_REQUIRE(outcome.has_value());
    BOOST_REQUIRE(!*outcome);
    BOOST_TEST(outcome->error() == errc::read_failed);
    BOOST_TEST(outcome->error().message().find("bad index") != std::string::npos);
    BOOST_TEST(outcome->error().message().find("operation 2") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(empty_and_zero_window)
{
    const ruda::test::watchdog guard{"empty_and_zero_window"};
    boost::asio::io_context io;
    auto op = [](std::size_t i) -> boost::asio::awaitable<ruda::result<int>> {
        co_return static_cast<int>(i * 2);
    };
    auto none = ruda::test::run_to_end(io, ruda::gather(0, 4, op));
    BOOST_REQUIRE(none.has_value());
    BOOST_REQUIRE(*none);
    BOOST_TEST(none->value().empty());
    auto serial = ruda::test::run_to_end(io, ruda::gather(3, 0, op)); // a window of 0 acts as 1
    BOOST_REQUIRE(serial.has_value());
    BOOST_REQUIRE(*serial);
    BOOST_TEST(serial->value() == (std::vector<int>{0, 2, 4}));
}

BOOST_AUTO_TEST_CASE(runs_on_a_multithreaded_executor)
{
    const ruda::test::watchdog guard{"runs_on_a_multithreaded_executor"};
    boost::asio::io_context io{2};
    const ruda::async_device device{{.latency = 1ms, .concurrent_transfers = 8}};
    auto out = ruda::test::spawn(io, read_all(device_tensors(device, 64), 8));
    auto work = boost::asio::make_work_guard(io);
    std::thread second{[&] { io.run(); }};
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return out->done.load(); }));
    work.reset();
    io.stop();
    second.join();
    BOOST_REQUIRE(out->value.has_value());
    BOOST_REQUIRE(*out->value);
    for (std::size_t i = 0; i < 64; ++i) {
        BOOST_TEST(first_value(out->value->value()[i]) == static_cast<float>(i));
    }
}

BOOST_AUTO_TEST_CASE(cpu_reads_through_gather)
{
    const ruda::test::watchdog guard{"cpu_reads_through_gather"};
    std::vector<ruda::cpu_backend::float_tensor> tensors;
    for (int i = 0; i < 10; ++i) {
        tensors.push_back(ruda::cpu_backend::float_from_data(
                              ruda::tensor_data::from_values(std::vector<double>{i * 0.5}, {1}).value(), {})
                              .value());
    }
    boost::asio::io_context io;
    auto all = ruda::test::run_to_end(io, ruda::gather(tensors.size(), 3, [&](std::size_t i) {
                                          return ruda::cpu_backend::float_into_data(tensors[i]);
                                      }));
    BOOST_REQUIRE(all.has_value());
    BOOST_REQUIRE(*all);
    for (std::size_t i = 0; i < 10; ++i) {
        BOOST_TEST(all->value()[i] == tensors[i].data());
    }
}

BOOST_AUTO_TEST_SUITE_END()
