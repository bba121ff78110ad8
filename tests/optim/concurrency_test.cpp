// Concurrent snapshots of one container from several threads while another thread keeps
// inserting new versions of every gradient: each snapshot must be one consistent state
// (run it under ThreadSanitizer). And snapshots under injected read faults: an error naming
// the parameter or a whole record, never a partial one, nothing leaked, the device still
// usable afterwards.
#include "../support/async_test.hpp"

#include <ruda/backend/async_backend.hpp>
#include <ruda/backend/cpu_backend.hpp>
#include <ruda/optim/gradients_params.hpp>

#include <boost/test/unit_test.hpp>

#include <atomic>
#include <thread>

namespace {

using namespace std::chrono_literals;
using ruda::errc;
using cpu = ruda::cpu_backend;
using gpu = ruda::async_backend;

constexpr std::uint64_t params = 12;
constexpr std::size_t elements = 64;

template <ruda::backend B>
ruda::tensor_primitive<B> version_tensor(std::uint64_t version, const typename B::device& device)
{
    auto data = ruda::tensor_data::from_values(
                    std::vector<float>(elements, static_cast<float>(version)), {elements})
                    .value();
    return B::float_from_data(std::move(data), device).value();
}

// The writer updates parameters 0, 1, ... in order to version v, then starts v + 1. At any
// instant the versions, by id, are v for a prefix and v - 1 for the rest; a snapshot that
// mixed two instants would break that staircase. Every tensor is uniform.
bool consistent(const ruda::gradients_params_record& record, std::uint64_t& newest)
{
    if (record.entries().size() != params) {
        return false;
    }
    std::vector<float> versions;
    for (const auto& entry : record.entries()) {
        const auto values = entry.data.values<float>().value();
        for (const float v : values) {
            if (v != values[0]) {
                return false; // a torn tensor
            }
        }
        versions.push_back(values[0]);
    }
    for (std::size_t k = 1; k < versions.size(); ++k) {
        if (versions[k] > versions[k - 1] || versions[0] - versions[k] > 1) {
            return false;
        }
    }
    newest = static_cast<std::uint64_t>(versions[0]);
    return true;
}

template <ruda::backend B>
void run_concurrently(const typename B::device& device)
{
    ruda::gradients_params grads;
    for (std::uint64_t id = 0; id < params; ++id) {
        grads.insert<B>(ruda::param_id{id}, version_tensor<B>(0, device));
    }
    std::atomic<bool> stop{false};
    std::thread writer{[&] {
        for (std::uint64_t v = 1; !stop; ++v) {
            for (std::uint64_t id = 0; id < params; ++id) {
                grads.insert<B>(ruda::param_id{id}, version_tensor<B>(v, device));
            }
        }
    }};
    std::atomic<int> inconsistent{0};
    std::atomic<std::uint64_t> snapshots{0};
    std::vector<std::thread> readers;
    for (int t = 0; t < 3; ++t) {
        readers.emplace_back([&, t] {
            boost::asio::io_context io;
            std::uint64_t previous = 0;
            for (int k = 0; k < 60; ++k) {
                std::optional<ruda::result<ruda::gradients_params_record>> record;
                if (t == 0) { // one thread through the coroutine form on its own io_context
                    record = ruda::test::run_to_end(io, grads.to_record_async<B>());
                } else {
                    record.emplace(grads.try_to_record<B>({.max_in_flight = 4}));
                }
                std::uint64_t newest = 0;
                if (!record || !*record || !consistent(record->value(), newest) ||
                    newest < previous) {
                    ++inconsistent;
                }
                previous = newest;
                ++snapshots;
            }
        });
    }
    for (auto& r : readers) {
        r.join();
    }
    stop = true;
    writer.join();
    BOOST_TEST(inconsistent.load() == 0);
    BOOST_TEST(snapshots.load() == 180U);
}

} // namespace

BOOST_AUTO_TEST_SUITE(optim_concurrency)

BOOST_AUTO_TEST_CASE(concurrent_snapshots_on_the_host_are_point_in_time)
{
    const ruda::test::watchdog guard{"concurrent_snapshots_on_the_host_are_point_in_time", 60s};
    run_concurrently<cpu>({});
}

BOOST_AUTO_TEST_CASE(concurrent_snapshots_on_a_device_are_point_in_time)
{
    const ruda::test::watchdog guard{"concurrent_snapshots_on_a_device_are_point_in_time", 60s};
    const ruda::async_device device{{.latency = 50us, .concurrent_transfers = 8}};
    run_concurrently<gpu>(device);
}

BOOST_AUTO_TEST_CASE(read_faults_give_an_error_or_a_whole_record)
{
    const ruda::test::watchdog guard{"read_faults_give_an_error_or_a_whole_record"};
    boost::asio::io_context io;
    const ruda::async_device device{{.latency = 100us, .concurrent_transfers = 8,
                                     .fail_probability = 0.05, .fault_seed = 77}};
    ruda::gradients_params grads;
    for (std::uint64_t id = 0; id < params; ++id) {
        grads.insert<gpu>(ruda::param_id{id}, version_tensor<gpu>(id, device));
    }
    int failed = 0;
    int whole_after_a_failure = 0; // the device stays usable
    for (int k = 0; k < 60; ++k) {
        auto record = ruda::test::run_to_end(io, grads.to_record_async<gpu>());
        BOOST_REQUIRE(record.has_value());
        if (*record) {
            BOOST_TEST(record->value().entries().size() == params); // never partial
            whole_after_a_failure += failed > 0 ? 1 : 0;
            continue;
        }
        ++failed;
        BOOST_TEST(record->error() == errc::read_failed);
        BOOST_TEST(record->error().message().find("Reading gradient for parameter ") == 0U);
    }
    BOOST_TEST(failed > 5);
    BOOST_TEST(whole_after_a_failure > 5);
    const auto stats = device.stats();
    BOOST_TEST(stats.in_flight == 0U); // the reads cut short by a fault were all cancelled
    BOOST_TEST(stats.reads_failed > 0U);
    BOOST_TEST(stats.reads_issued == stats.reads_completed + stats.reads_failed + stats.reads_cancelled);
}

BOOST_AUTO_TEST_SUITE_END()
