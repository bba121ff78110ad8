// Sync-wrapper torture: 1,000 randomized blocking reads and snapshots across every refusal
// case, deadlines on hung devices, injected faults and normal reads. Each call must come back
// with a value or the error its case calls for, soon; none may hang (a watchdog fails the
// test instead).
#include "../support/async_test.hpp"

#include <ruda/backend/async_backend.hpp>
#include <ruda/optim/gradients_params.hpp>
#include <ruda/runtime/try_read_sync.hpp>

#include <boost/test/unit_test.hpp>

#include <array>
#include <random>

namespace {

using namespace std::chrono_literals;
using ruda::errc;
using gpu = ruda::async_backend;

gpu::float_tensor tensor_on(const ruda::async_device& device, float value)
{
    return gpu::float_from_data(
               ruda::tensor_data::from_values(std::vector<float>{value, value}, {2}).value(), device)
        .value();
}

enum class call_case { normal, hung, no_blocking_device, event_loop, refuse_if, nested, fault };
constexpr std::array cases{call_case::normal,   call_case::hung,   call_case::no_blocking_device,
                           call_case::event_loop, call_case::refuse_if, call_case::nested,
                           call_case::fault};

// A nested sync wait: the inner call, made inside the outer one's read, must refuse.
boost::asio::awaitable<ruda::result<ruda::tensor_data>> read_nested(gpu::float_tensor t)
{
    auto inner = ruda::try_read_sync([&t] { return gpu::float_into_data(t); });
    if (inner) {
        co_return ruda::error{errc::read_failed, "the nested sync wait did not refuse"};
    }
    co_return inner.error();
}

} // namespace

BOOST_AUTO_TEST_SUITE(runtime_torture)

BOOST_AUTO_TEST_CASE(a_thousand_random_sync_calls_never_hang)
{
    const ruda::test::watchdog guard{"a_thousand_random_sync_calls_never_hang",
                                     std::chrono::seconds(120)};
    const ruda::async_device normal{{.latency = 200us, .concurrent_transfers = 4}};
    const ruda::async_device hung{{.hang_reads = true}};
    const ruda::async_device web{{.blocking_reads = false}};
    const ruda::async_device faulty{{.latency = 100us, .fail_probability = 0.5, .fault_seed = 9}};
    std::mt19937 random{1203};
    std::array<int, cases.size()> seen{};
    std::uint64_t faults = 0;
    for (int call = 0; call < 1000; ++call) {
        const auto which = cases[random() % cases.size()];
        const bool snapshot = random() % 2 == 0; // try_to_record of 3 tensors, or one read
        ++seen[static_cast<std::size_t>(which)];
        const ruda::async_device& device = which == call_case::hung             ? hung
                                           : which == call_case::no_blocking_device ? web
                                           : which == call_case::fault              ? faulty
                                                                                     : normal;
        const auto value = static_cast<float>(call);
        ruda::sync_read_options options{.blocking_reads = device.blocking_reads()};
        ruda::snapshot_options snap;
        if (which == call_case::hung) {
            options.deadline = snap.deadline = std::chrono::milliseconds(1 + random() % 4);
        }
        if (which == call_case::refuse_if) {
            options.refuse_if = snap.refuse_if = [] { return true; };
        }
        std::optional<ruda::no_blocking_scope> event_loop;
        if (which == call_case::event_loop) {
            event_loop.emplace();
        }
        const auto issued_before = device.stats().reads_issued;
        const auto start = std::chrono::steady_clock::now();
        std::optional<ruda::error> failure;
        if (snapshot && which != call_case::nested) {
            ruda::gradients_params grads;
            for (std::uint64_t id = 1; id <= 3; ++id) {
                grads.insert<gpu>(ruda::param_id{id}, tensor_on(device, value));
            }
            auto record = grads.try_to_record<gpu>(snap);
            if (record) {
                BOOST_REQUIRE_EQUAL(record.value().entries().size(), 3U);
                BOOST_TEST(record.value().entries()[2].data.values<float>().value()[1] == value);
            } else {
                failure = record.error();
            }
        } else {
            const auto t = tensor_on(device, value);
            auto data = which == call_case::nested
                            ? ruda::try_read_sync([&t] { return read_nested(t); }, options)
                            : ruda::try_read_sync([&t] { return gpu::float_into_data(t); }, options);
            if (data) {
                BOOST_TEST(data.value().values<float>().value()[0] == value);
            } else {
                failure = data.error();
            }
        }
        const auto took = std::chrono::steady_clock::now() - start;
        BOOST_TEST_CONTEXT("call " << call << ", case " << static_cast<int>(which))
        {
            BOOST_TEST(took < 2s); // far from a hang: deadlines are at most 4 ms
            switch (which) {
            case call_case::normal: BOOST_TEST(!failure.has_value()); break;
            case call_case::hung:
                BOOST_REQUIRE(failure.has_value());
                BOOST_TEST(*failure == errc::timed_out);
                break;
            case call_case::no_blocking_device:
            case call_case::event_loop:
            case call_case::refuse_if:
                BOOST_REQUIRE(failure.has_value());
                BOOST_TEST(*failure == errc::sync_read_unavailable);
                BOOST_TEST(device.stats().reads_issued == issued_before); // refused unread
                break;
            case call_case::nested:
                BOOST_REQUIRE(failure.has_value());
                BOOST_TEST(*failure == errc::sync_read_unavailable);
                break;
            case call_case::fault:
                if (failure) {
                    BOOST_TEST(*failure == errc::read_failed);
                    ++faults;
                }
                break;
            }
        }
    }
    for (std::size_t k = 0; k < cases.size(); ++k) {
        BOOST_TEST(seen[k] > 100); // every case was exercised
    }
    BOOST_TEST(faults > 20U);
    BOOST_TEST(hung.stats().in_flight == 0U);   // every timed-out read was cancelled
    BOOST_TEST(normal.stats().in_flight == 0U);
}

BOOST_AUTO_TEST_SUITE_END()
