// A LibTorch trainer's whole state: the optimizers libtorch ships read and restored exactly,
// generators, buffers, the one-call snapshot and restore resuming bit for bit, and every bad
// input (an unknown optimizer, parameters that do not match, another optimizer's state, other
// hyper-parameters, a generator state of another size) refused before anything changes.
#include "../checkpoint/checkpoint_test_support.hpp"
#include "../support/async_test.hpp"

#include <ruda/checkpoint/checkpoint_manager.hpp>
#include <ruda/optim/module_gradients.hpp>
#include <ruda/optim/torch_training_state.hpp>

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/lbfgs.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <boost/asio/use_awaitable.hpp>
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <functional>
#include <memory>

namespace {

using ruda::errc;

// A model with every kind of state: parameters, a BatchNorm's float buffers and its int64
// count, and dropout, which draws from the CPU generator.
struct stateful_net : torch::nn::Module {
    stateful_net()
    {
        torch::manual_seed(11);
        fc1 = register_module("fc1", torch::nn::Linear(6, 8));
        norm = register_module("norm", torch::nn::BatchNorm1d(8));
        drop = register_module("drop", torch::nn::Dropout(0.25));
        fc2 = register_module("fc2", torch::nn::Linear(8, 2));
    }
    torch::Tensor forward(const torch::Tensor& x)
    {
        return fc2->forward(drop->forward(torch::tanh(norm->forward(fc1->forward(x)))));
    }
    torch::nn::Linear fc1{nullptr};
    torch::nn::BatchNorm1d norm{nullptr};
    torch::nn::Dropout drop{nullptr};
    torch::nn::Linear fc2{nullptr};
};

// One optimizer step on a batch the step number decides; the dropout mask comes from the
// generator, so a resume without its state diverges.
void train_step(stateful_net& model, torch::optim::Optimizer& optimizer, int step)
{
    const auto x = torch::sin(torch::arange(0, 24, torch::kFloat).reshape({4, 6}) * (step + 1));
    const auto y = torch::cos(torch::arange(0, 8, torch::kFloat).reshape({4, 2}) * (step + 1));
    optimizer.zero_grad();
    torch::mse_loss(model.forward(x), y).backward();
    optimizer.step();
}

bool same_bits(const torch::Tensor& a, const torch::Tensor& b)
{
    if (a.defined() != b.defined()) {
        return false;
    }
    if (!a.defined()) {
        return true;
    }
    const auto ha = a.contiguous();
    const auto hb = b.contiguous();
    return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() &&
           std::memcmp(ha.data_ptr(), hb.data_ptr(),
                       static_cast<std::size_t>(a.numel()) * a.element_size()) == 0;
}

// Parameters, gradients and buffers, bit for bit.
bool same_model(stateful_net& a, stateful_net& b)
{
    const auto pa = a.named_parameters();
    const auto pb = b.named_parameters();
    for (const auto& item : pa) {
        if (!same_bits(item.value(), pb[item.key()]) ||
            !same_bits(item.value().grad(), pb[item.key()].grad())) {
            return false;
        }
    }
    const auto ba = a.named_buffers();
    const auto bb = b.named_buffers();
    for (const auto& item : ba) {
        if (!same_bits(item.value(), bb[item.key()])) {
            return false;
        }
    }
    return pa.size() == pb.size() && ba.size() == bb.size();
}

using make_optimizer = std::function<std::unique_ptr<torch::optim::Optimizer>(stateful_net&)>;

// Each optimizer libtorch ships, with options that give it every part of its state.
std::vector<std::pair<std::string, make_optimizer>> optimizers()
{
    return {
        {"SGD",
         [](stateful_net& m) {
             return std::make_unique<torch::optim::SGD>(
                 m.parameters(),
                 torch::optim::SGDOptions(0.05).momentum(0.9).dampening(0.1).nesterov(false));
         }},
        {"Adam",
         [](stateful_net& m) {
             return std::make_unique<torch::optim::Adam>(
                 m.parameters(), torch::optim::AdamOptions(0.01).amsgrad(true).weight_decay(1e-3));
         }},
        {"AdamW",
         [](stateful_net& m) {
             return std::make_unique<torch::optim::AdamW>(m.parameters(),
                                                          torch::optim::AdamWOptions(0.01));
         }},
        {"RMSprop",
         [](stateful_net& m) {
             return std::make_unique<torch::optim::RMSprop>(
                 m.parameters(),
                 torch::optim::RMSpropOptions(0.01).momentum(0.5).centered(true));
         }},
        {"Adagrad",
         [](stateful_net& m) {
             return std::make_unique<torch::optim::Adagrad>(
                 m.parameters(), torch::optim::AdagradOptions(0.1).lr_decay(0.01));
         }},
    };
}

void expect(const ruda::result<std::uint64_t>& r, errc code, const std::string& text)
{
    BOOST_REQUIRE_MESSAGE(!r, "expected: " << text);
    BOOST_TEST(r.error() == code, r.error().message());
    BOOST_TEST(r.error().message().find(text) != std::string::npos, r.error().message());
}

} // namespace

BOOST_AUTO_TEST_SUITE(torch_training_state)

BOOST_AUTO_TEST_CASE(every_optimizer_libtorch_ships_resumes_bit_for_bit)
{
    for (const auto& [name, make] : optimizers()) {
        BOOST_TEST_CONTEXT(name)
        {
            // The uninterrupted run: 6 steps. The checkpoint: after 3, mid-training.
            stateful_net model;
            auto optimizer = make(model);
            ruda::checkpoint saved;
            for (int step = 0; step < 6; ++step) {
                if (step == 3) {
                    saved = ruda::snapshot_training_state(model, *optimizer, step).value();
                }
                train_step(model, *optimizer, step);
            }
            // A new process: a fresh model and optimizer, restored, trained on.
            torch::manual_seed(999); // whatever the new process drew: the checkpoint decides
            stateful_net resumed;
            auto fresh = make(resumed);
            const auto step = ruda::restore_training_state(saved, resumed, *fresh);
            BOOST_REQUIRE(step.has_value());
            BOOST_TEST(step.value() == 3U);
            for (int s = 3; s < 6; ++s) {
                train_step(resumed, *fresh, s);
            }
            BOOST_TEST(same_model(model, resumed));
            BOOST_TEST(saved.group("optimizer")->entries().size() > 0U);
            BOOST_TEST(saved.group("buffers")->entries().size() == 3U); // with the i64 count
        }
    }
}

BOOST_AUTO_TEST_CASE(the_optimizer_state_is_named_by_parameter_and_state)
{
    stateful_net model;
    torch::optim::Adam adam{model.parameters(), torch::optim::AdamOptions(0.01)};
    BOOST_TEST(ruda::optimizer_state_of(adam, model).value().tensors.empty()); // before a step
    train_step(model, adam, 0);
    train_step(model, adam, 1);
    const auto state = ruda::optimizer_state_of(adam, model).value();
    BOOST_TEST(state.description.type == "Adam");
    BOOST_REQUIRE_EQUAL(state.description.groups.size(), 1U);
    BOOST_TEST(state.description.groups[0].parameters.size() == 6U);
    BOOST_TEST(state.description.groups[0].options[0].first == "lr");
    BOOST_TEST(state.description.groups[0].options[0].second == 0.01);
    BOOST_TEST(state.tensors.size() == 12U); // exp_avg and exp_avg_sq of 6 parameters
    const auto id = ruda::param_id::from_name("fc1.weight.exp_avg");
    BOOST_TEST(state.tensors.name(id) == "fc1.weight.exp_avg");
    // Shared with the optimizer, not copied: a snapshot reads them when it runs.
    const auto entry = state.tensors.get<ruda::torch_backend>(id).value();
    const auto& held = std::get<ruda::torch_backend::float_tensor>(entry).get();
    const auto& adam_state = static_cast<const torch::optim::AdamParamState&>(
        *adam.state().at(ruda::detail::optimizer_state_key(adam.state(), model.fc1->weight)));
    BOOST_TEST(held.is_same(adam_state.exp_avg()));
    BOOST_REQUIRE_EQUAL(state.counters.entries().size(), 6U);
    const auto& step = state.counters.entries()[0];
    BOOST_TEST(step.dtype == ruda::dtype::i64());
    BOOST_TEST(step.data.shape().empty());
    BOOST_TEST(step.data.values<std::int64_t>().value()[0] == 2);
}

BOOST_AUTO_TEST_CASE(the_async_snapshot_captures_the_state_at_its_call)
{
    const ruda::test::watchdog guard{"the_async_snapshot_captures_the_state_at_its_call"};
    stateful_net model;
    torch::optim::Adam adam{model.parameters(), torch::optim::AdamOptions(0.01)};
    train_step(model, adam, 0);
    const ruda::test::temp_dir dir;
    ruda::checkpoint_manager manager{dir.path()};
    boost::asio::io_context io;
    const auto taken = ruda::test::run_to_end(
        io, [&]() -> boost::asio::awaitable<ruda::result<ruda::saved_checkpoint>> {
            auto state = co_await ruda::async_snapshot_training_state(
                model, adam, 1, boost::asio::use_awaitable);
            if (!state) {
                co_return state.error();
            }
            auto pending = co_await manager.async_save_record(1, std::move(state).value(),
                                                              boost::asio::use_awaitable);
            co_return co_await pending.value().async_wait(boost::asio::use_awaitable);
        }());
    BOOST_REQUIRE(taken.has_value() && taken->has_value());
    const auto expected = model.fc1->weight.clone();
    train_step(model, adam, 1); // training goes on: the file keeps step 1's state

    stateful_net resumed;
    torch::optim::Adam fresh{resumed.parameters(), torch::optim::AdamOptions(0.01)};
    BOOST_TEST(ruda::restore_training_state(manager.load_latest().value(), resumed, fresh)
                   .value() == 1U);
    BOOST_TEST(same_bits(resumed.fc1->weight, expected));
    train_step(resumed, fresh, 1);
    BOOST_TEST(same_model(model, resumed));
}

BOOST_AUTO_TEST_CASE(hyper_parameters_are_restored_or_checked)
{
    stateful_net model;
    torch::optim::Adam adam{model.parameters(), torch::optim::AdamOptions(0.01).betas({0.8, 0.9})};
    train_step(model, adam, 0);
    const auto saved = ruda::snapshot_training_state(model, adam, 1).value();

    stateful_net other;
    torch::optim::Adam lower{other.parameters(), torch::optim::AdamOptions(0.001)};
    auto checked = ruda::restore_training_state(
        saved, other, lower, {.optimizer_options = ruda::hyperparameters::check});
    expect(checked, errc::optimizer_mismatch, "param group 0 has lr 0.001, the checkpoint 0.01");
    BOOST_TEST(lower.state().empty()); // nothing changed
    BOOST_TEST(ruda::restore_training_state(saved, other, lower).has_value());
    const auto& options =
        static_cast<const torch::optim::AdamOptions&>(lower.param_groups()[0].options());
    BOOST_TEST(options.lr() == 0.01);
    BOOST_TEST(std::get<0>(options.betas()) == 0.8);
    BOOST_TEST(!lower.state().empty());
}

BOOST_AUTO_TEST_CASE(bad_input_is_refused_before_anything_changes)
{
    stateful_net model;
    torch::optim::Adam adam{model.parameters(), torch::optim::AdamOptions(0.01)};
    train_step(model, adam, 0);
    const auto saved = ruda::snapshot_training_state(model, adam, 1).value();

    // An optimizer ruda does not know, named.
    torch::optim::LBFGS lbfgs{model.parameters()};
    const auto unknown = ruda::snapshot_training_state(model, lbfgs, 1);
    BOOST_REQUIRE(!unknown);
    BOOST_TEST(unknown.error() == errc::unsupported_optimizer);
    BOOST_TEST(unknown.error().message().find("LBFGS") != std::string::npos,
               unknown.error().message());

    // An optimizer over parameters that are not the model's.
    stateful_net stranger;
    torch::optim::Adam foreign{stranger.parameters(), torch::optim::AdamOptions(0.01)};
    const auto mismatched = ruda::optimizer_state_of(foreign, model);
    BOOST_TEST(mismatched.error() == errc::unknown_parameter);
    BOOST_TEST(mismatched.error().message().find("parameter 0 of param group 0") !=
               std::string::npos);

    stateful_net target;
    const auto fc1_before = target.fc1->weight.clone();
    const auto unchanged = [&] { return same_bits(target.fc1->weight, fc1_before); };
    // Another optimizer's state.
    torch::optim::SGD sgd{target.parameters(), torch::optim::SGDOptions(0.1)};
    expect(ruda::restore_training_state(saved, target, sgd), errc::optimizer_mismatch,
           "the checkpoint holds the state of Adam, the optimizer is SGD");
    BOOST_TEST(unchanged());
    // Other param groups.
    torch::optim::Adam half{std::vector<torch::Tensor>{target.fc1->weight},
                            torch::optim::AdamOptions(0.01)};
    expect(ruda::restore_training_state(saved, target, half), errc::optimizer_mismatch,
           "param group 0 holds [fc1.weight], the checkpoint's [fc1.weight, fc1.bias");
    BOOST_TEST(unchanged());

    torch::optim::Adam fresh{target.parameters(), torch::optim::AdamOptions(0.01)};
    const auto forged = [&](const std::function<void(ruda::checkpoint&)>& edit) {
        ruda::checkpoint c = saved;
        edit(c);
        return ruda::restore_training_state(c, target, fresh);
    };
    const auto edit_group = [](ruda::checkpoint& c, std::string_view group,
                               const std::function<void(ruda::gradient_entry&)>& edit_entry) {
        auto entries = c.take_group(group).value().into_entries();
        for (auto& entry : entries) {
            edit_entry(entry);
        }
        c.put_group(std::string{group}, ruda::gradients_params_record{std::move(entries)})
            .value();
    };
    // A generator state of another size.
    expect(forged([&](auto& c) {
               edit_group(c, "rng", [](auto& e) {
                   e.data = ruda::tensor_data{std::vector<std::uint8_t>(100, 0), {100},
                                              ruda::dtype::u8()};
               });
           }),
           errc::byte_count_mismatch, "Generator cpu: a state of 100 bytes");
    expect(forged([&](auto& c) { edit_group(c, "rng", [](auto& e) { e.name = "cuda:7"; }); }),
           errc::unknown_parameter, "Generator cuda:7 is none of this process's");
    // An optimizer state of another shape, another parameter, another part.
    expect(forged([&](auto& c) {
               edit_group(c, "optimizer", [](auto& e) {
                   if (e.dtype.is_float()) {
                       e.data = ruda::tensor_data::from_values(std::vector<float>{1}, {1}).value();
                   }
               });
           }),
           errc::shape_mismatch, "shape [1], not");
    expect(forged([&](auto& c) {
               edit_group(c, "optimizer", [](auto& e) { e.name = "fc9.weight.exp_avg"; });
           }),
           errc::unknown_parameter, "fc9.weight is none of the optimizer's parameters");
    expect(forged([&](auto& c) {
               edit_group(c, "optimizer", [](auto& e) { e.name = "fc1.weight.velocity"; });
           }),
           errc::optimizer_mismatch, "Adam has no state velocity");
    expect(forged([](auto& c) { BOOST_REQUIRE(c.take_group("weights")); }), errc::not_found,
           "no group weights");
    expect(forged([](auto& c) { c.put("torch.optimizer", std::string{"x"}).value(); }),
           errc::malformed_record, "torch.optimizer");
    BOOST_TEST(unchanged());
    BOOST_TEST(fresh.state().empty());
    BOOST_TEST(ruda::restore_training_state(saved, target, fresh).has_value());
}

BOOST_AUTO_TEST_CASE(module_holders_and_records_are_taken_as_modules_are)
{
    torch::nn::Linear layer{3, 2};
    torch::manual_seed(5);
    layer->forward(torch::randn({4, 3})).sum().backward();
    const auto grads = ruda::from_module(layer).value();
    BOOST_TEST(grads.size() == 2U);
    const auto values = ruda::parameters_from_module(layer).value();
    const auto record = values.try_to_record<ruda::torch_backend>().value();
    const auto grad_record = grads.try_to_record<ruda::torch_backend>().value();

    torch::nn::Linear copy{3, 2};
    BOOST_TEST(ruda::restore_parameters(record, copy).has_value()); // a record, as on the GPU
    BOOST_TEST(ruda::restore_gradients(grad_record, copy).has_value());
    BOOST_TEST(same_bits(copy->weight, layer->weight));
    BOOST_TEST(same_bits(copy->bias.grad(), layer->bias.grad()));
    torch::nn::Linear wider{3, 4};
    BOOST_TEST(ruda::restore_parameters(record, wider).error() == errc::shape_mismatch);
}

BOOST_AUTO_TEST_SUITE_END()
