// Exact resume: training stopped in the middle of an accumulation window, snapshotted
// (gradients, weights with their ids, step), serialized, restored into fresh objects and
// continued ends with weights bit-identical to an uninterrupted run; dropping or narrowing the
// accumulated gradients does not, which shows the comparison can fail.
#include "../support/async_test.hpp"

#include <mlp.hpp>

#include <ruda/backend/async_backend.hpp>
#include <ruda/optim/gradients_params.hpp>
#include <ruda/record/precision.hpp>

#include <cereal/archives/binary.hpp>
#include <cereal/archives/json.hpp>
#include <boost/test/unit_test.hpp>

#include <sstream>
#include <string>

namespace {

using namespace std::chrono_literals;
using gpu = ruda::async_backend;

const mlp::config small{.inputs = 8, .hidden = 24, .outputs = 3, .batch = 8, .accumulate = 4};
constexpr std::uint64_t total_steps = 12;
constexpr mlp::position stop_at{.step = 5, .micro_batch = 2}; // mid-window

void train_until(const mlp::dataset& data, mlp::model& m, mlp::position& at, mlp::position until)
{
    while (!(at == until)) {
        mlp::train_micro_batch(small, data, m, at);
    }
}

mlp::model uninterrupted(const mlp::dataset& data)
{
    mlp::model m = mlp::init(small);
    mlp::position at;
    train_until(data, m, at, {total_steps, 0});
    return m;
}

// Trains to `stop_at`, snapshots the device gradients with to_record_async and returns the
// serialized training state; every object of that run is gone when it returns.
template <class OutputArchive>
std::string interrupted_run(const mlp::dataset& data)
{
    mlp::model m = mlp::init(small);
    mlp::position at;
    train_until(data, m, at, stop_at);
    const ruda::async_device device{{.latency = 1ms, .concurrent_transfers = 4}};
    ruda::gradients_params grads;
    mlp::publish_gradients<gpu>(m, grads, device);
    boost::asio::io_context io;
    auto record = ruda::test::run_to_end(io, grads.to_record_async<gpu>());
    BOOST_REQUIRE(record.has_value());
    BOOST_REQUIRE(*record);
    const mlp::training_state state{at, m, std::move(*record).value()};
    std::ostringstream out;
    {
        OutputArchive archive{out};
        archive(state);
    }
    return out.str();
}

template <class InputArchive>
mlp::training_state load_state(const std::string& bytes)
{
    std::istringstream in{bytes};
    InputArchive archive{in};
    mlp::training_state state;
    archive(state);
    return state;
}

// Restores the gradients onto a fresh device and reads them back into the loaded weights
// (matched by the ids the checkpoint carries), then trains to the end.
mlp::model resume(const mlp::dataset& data, mlp::training_state state)
{
    const ruda::async_device device{{.latency = 1ms}};
    auto restored = ruda::gradients_params::from_record<gpu>(std::move(state.gradients), device);
    BOOST_REQUIRE(restored);
    auto on_host = restored.value().try_to_record<gpu>();
    BOOST_REQUIRE(on_host);
    mlp::model m = std::move(state.weights);
    BOOST_REQUIRE(mlp::load_gradients(on_host.value(), m));
    train_until(data, m, state.at, {total_steps, 0});
    return m;
}

} // namespace

BOOST_AUTO_TEST_SUITE(optim_resume)

BOOST_AUTO_TEST_CASE(resuming_mid_window_is_bit_identical)
{
    const ruda::test::watchdog guard{"resuming_mid_window_is_bit_identical"};
    const mlp::dataset data{small};
    const mlp::model expected = uninterrupted(data);

    const auto state = load_state<cereal::BinaryInputArchive>(
        interrupted_run<cereal::BinaryOutputArchive>(data));
    BOOST_TEST((state.at == stop_at));
    BOOST_TEST(state.gradients.entries().size() == 4U);
    const mlp::model resumed = resume(data, state);
    BOOST_TEST(mlp::same_bits(resumed, expected));

    // The same through a text archive.
    const auto from_json = load_state<cereal::JSONInputArchive>(
        interrupted_run<cereal::JSONOutputArchive>(data));
    BOOST_TEST(mlp::same_bits(resume(data, from_json), expected));
}

BOOST_AUTO_TEST_CASE(losing_or_narrowing_the_window_changes_the_result)
{
    const ruda::test::watchdog guard{"losing_or_narrowing_the_window_changes_the_result"};
    const mlp::dataset data{small};
    const mlp::model expected = uninterrupted(data);
    const auto state = load_state<cereal::BinaryInputArchive>(
        interrupted_run<cereal::BinaryOutputArchive>(data));

    // What burn-train does at an epoch boundary: the partial window's gradients are dropped.
    mlp::training_state dropped = state;
    std::vector<ruda::gradient_entry> zeros;
    for (const auto& p : state.weights.params) {
        zeros.push_back({ruda::param_id{p.id}, ruda::dtype::f32(),
                         ruda::tensor_data::from_values(std::vector<float>(p.value.size(), 0.0F),
                                                        ruda::shape(p.shape))
                             .value()});
    }
    dropped.gradients = ruda::gradients_params_record{std::move(zeros)};
    BOOST_TEST(!mlp::same_bits(resume(data, dropped), expected));

    // Stored at half precision, the f32 gradients come back rounded.
    mlp::training_state narrowed = state;
    narrowed.gradients = state.gradients.into_item<ruda::half_precision>().value();
    BOOST_TEST(!mlp::same_bits(resume(data, narrowed), expected));

    // Full precision is lossless for f32.
    mlp::training_state full = state;
    full.gradients = state.gradients.into_item<ruda::full_precision>().value();
    BOOST_TEST(mlp::same_bits(resume(data, full), expected));
}

BOOST_AUTO_TEST_CASE(restored_gradients_keep_their_parameter_ids)
{
    const ruda::test::watchdog guard{"restored_gradients_keep_their_parameter_ids"};
    const mlp::dataset data{small};
    const auto state = load_state<cereal::BinaryInputArchive>(
        interrupted_run<cereal::BinaryOutputArchive>(data));
    // A freshly initialised model mints new ids: the saved gradients match none of them.
    mlp::model fresh = mlp::init(small);
    BOOST_TEST(!mlp::load_gradients(state.gradients, fresh));
    mlp::model loaded = state.weights;
    BOOST_TEST(mlp::load_gradients(state.gradients, loaded));
}

BOOST_AUTO_TEST_SUITE_END()
