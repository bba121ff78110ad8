// from_module and the way back: ids from parameter names, gradients shared not copied,
// undefined gradients left out, and restores that check everything before changing the module.
#include "../checkpoint/checkpoint_test_support.hpp"
#include "../support/async_test.hpp"

#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/checkpoint/safetensors.hpp>
#include <ruda/optim/module_gradients.hpp>

#include <torch/nn/modules/linear.h>
#include <torch/serialize.h>

#include <boost/test/unit_test.hpp>

#include <cstring>
#include <set>
#include <string>

namespace {

using ruda::errc;
using tb = ruda::torch_backend;

struct net : torch::nn::Module {
    net()
    {
        fc1 = register_module("fc1", torch::nn::Linear(4, 3));
        fc2 = register_module("fc2", torch::nn::Linear(3, 2));
    }
    torch::Tensor forward(const torch::Tensor& x) { return fc2->forward(torch::tanh(fc1->forward(x))); }
    torch::nn::Linear fc1{nullptr};
    torch::nn::Linear fc2{nullptr};
};

void backward_once(net& model, double scale = 1.0)
{
    torch::manual_seed(3);
    const auto x = torch::randn({5, 4});
    (model.forward(x).sum() * scale).backward();
}

ruda::param_id id_of(const char* name) { return ruda::param_id::from_name(name); }

} // namespace

BOOST_AUTO_TEST_SUITE(torch_module)

BOOST_AUTO_TEST_CASE(from_module_keys_every_defined_gradient_by_its_name)
{
    net model;
    BOOST_TEST(ruda::from_module(model).value().empty()); // no backward yet: no gradients
    backward_once(model);
    const auto grads = ruda::from_module(model).value();
    BOOST_TEST(grads.size() == 4U);
    for (const char* name : {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}) {
        BOOST_TEST(grads.get<tb>(id_of(name)).has_value(), name);
        BOOST_TEST(grads.name(id_of(name)) == name); // kept, for checkpoints and exports
    }
    // The entries are the module's gradient tensors themselves.
    const auto entry = grads.get<tb>(id_of("fc1.weight")).value();
    BOOST_TEST(std::get<tb::float_tensor>(entry).get().is_same(model.fc1->weight.grad()));

    model.fc2->bias.mutable_grad() = torch::Tensor{};
    BOOST_TEST(ruda::from_module(model).value().size() == 3U);
}

BOOST_AUTO_TEST_CASE(parameter_names_reach_checkpoints_and_safetensors_exports)
{
    net model;
    backward_once(model);
    const auto record = ruda::from_module(model).value().try_to_record<tb>().value();
    const ruda::test::temp_dir dir;
    // A checkpoint keeps them.
    ruda::save_checkpoint_file(dir / "g.ruda", ruda::checkpoint{record}).value();
    const auto index = ruda::checkpoint_reader::open(dir / "g.ruda").value().index();
    std::set<std::string> names;
    for (const auto& entry : index.entries) {
        BOOST_TEST(entry.id == id_of(entry.name.c_str()), entry.name);
        names.insert(entry.name);
    }
    BOOST_TEST((names == std::set<std::string>{"fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"}));
    // A safetensors export names its tensors by them, as a state dict does, with no id keys,
    // and its import restores into the model.
    ruda::export_safetensors(record, dir / "g.safetensors").value();
    const auto bytes = ruda::test::read_bytes(dir / "g.safetensors");
    const std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(ruda::test::le64(bytes, 0)));
    for (const auto& name : names) {
        BOOST_TEST(header.find("\"" + name + "\":{\"dtype\":\"F32\"") != std::string::npos, name);
    }
    BOOST_TEST(header.find("ruda.id.") == std::string::npos);
    const auto imported = ruda::import_safetensors(dir / "g.safetensors").value();
    BOOST_TEST((imported == record));
    net fresh;
    const auto restored = ruda::gradients_params::from_record<tb>(imported, {}).value();
    ruda::restore_gradients(restored, fresh).value();
    BOOST_TEST(fresh.fc2->weight.grad().equal(model.fc2->weight.grad()));
}

BOOST_AUTO_TEST_CASE(from_module_names_a_gradient_it_cannot_read)
{
    net model;
    backward_once(model);
    model.fc1->bias.mutable_grad() = torch::zeros({3}).to_sparse();
    const auto grads = ruda::from_module(model);
    BOOST_TEST(grads.error() == errc::invalid_tensor);
    BOOST_TEST(grads.error().message().find("fc1.bias") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(restore_gradients_sets_and_clears_to_match_the_snapshot)
{
    boost::asio::io_context io;
    net model;
    backward_once(model);
    model.fc2->bias.mutable_grad() = torch::Tensor{}; // not part of the snapshot
    const auto record = ruda::test::run_to_end(io, ruda::from_module(model).value().to_record_async<tb>());
    BOOST_REQUIRE(record && record->has_value());
    const auto expected = model.fc1->weight.grad().clone();

    net other;
    backward_once(other, 5.0); // different gradients everywhere, fc2.bias included
    const auto restored = ruda::gradients_params::from_record<tb>(record->value(), {}).value();
    BOOST_REQUIRE(ruda::restore_gradients(restored, other).has_value());
    BOOST_TEST(torch::equal(other.fc1->weight.grad(), expected));
    BOOST_TEST(!other.fc2->bias.grad().defined());
    BOOST_TEST(other.fc2->weight.grad().defined());
}

BOOST_AUTO_TEST_CASE(restore_gradients_checks_everything_before_changing_the_module)
{
    net model;
    backward_once(model);
    const auto before = model.fc1->weight.grad().clone();
    auto bias_grad = [] { return tb::float_tensor::wrap(torch::zeros({3})).value(); };

    ruda::gradients_params unknown;
    unknown.insert<tb>(id_of("fc1.bias"), bias_grad());
    unknown.insert<tb>(ruda::param_id{7}, bias_grad());
    const auto unknown_error = ruda::restore_gradients(unknown, model);
    BOOST_TEST(unknown_error.error() == errc::unknown_parameter);
    BOOST_TEST(unknown_error.error().message().find("Parameter 7 ") != std::string::npos);

    ruda::gradients_params shape;
    shape.insert<tb>(id_of("fc1.weight"), tb::float_tensor::wrap(torch::zeros({4, 3})).value());
    const auto shape_error = ruda::restore_gradients(shape, model);
    BOOST_TEST(shape_error.error() == errc::shape_mismatch);
    BOOST_TEST(shape_error.error().message().find("fc1.weight") != std::string::npos);
    BOOST_TEST(shape_error.error().message().find("[4, 3]") != std::string::npos);

    ruda::gradients_params type;
    type.insert<tb>(id_of("fc1.bias"), tb::float_tensor::wrap(torch::zeros({3}, torch::kDouble)).value());
    const auto type_error = ruda::restore_gradients(type, model);
    BOOST_TEST(type_error.error() == errc::invalid_dtype);
    BOOST_TEST(type_error.error().message().find("Double") != std::string::npos);

    ruda::gradients_params quantized;
    quantized.insert<tb>(id_of("fc1.bias"),
                         tb::quantized_tensor::wrap(torch::quantize_per_tensor(
                                                        torch::zeros({3}), 0.1, 0, torch::kQInt8))
                             .value());
    BOOST_TEST(ruda::restore_gradients(quantized, model).error() == errc::backend_mismatch);

    // None of the failed restores touched a gradient.
    BOOST_TEST(torch::equal(model.fc1->weight.grad(), before));
    BOOST_TEST(model.fc1->bias.grad().defined());
    BOOST_TEST(model.fc2->bias.grad().defined());
}

BOOST_AUTO_TEST_CASE(parameters_round_trip_and_every_parameter_needs_a_value)
{
    boost::asio::io_context io;
    net source;
    const auto record =
        ruda::test::run_to_end(io, ruda::parameters_from_module(source).value().to_record_async<tb>());
    BOOST_REQUIRE(record && record->has_value());
    BOOST_TEST(record->value().entries().size() == 4U);

    net target; // other random weights
    BOOST_TEST(!torch::equal(target.fc1->weight, source.fc1->weight));
    const auto values = ruda::gradients_params::from_record<tb>(record->value(), {}).value();
    BOOST_REQUIRE(ruda::restore_parameters(values, target).has_value());
    BOOST_TEST(torch::equal(target.fc1->weight, source.fc1->weight));
    BOOST_TEST(torch::equal(target.fc2->bias, source.fc2->bias));
    BOOST_TEST(target.fc1->weight.requires_grad()); // still a trainable parameter

    auto partial = values;
    partial.remove<tb>(id_of("fc2.bias"));
    const auto missing = ruda::restore_parameters(partial, target);
    BOOST_TEST(missing.error() == errc::not_found);
    BOOST_TEST(missing.error().message().find("fc2.bias") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
