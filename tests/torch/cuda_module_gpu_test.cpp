// from_module and the restores on a real GPU (suite torch_cuda_module_gpu): a real model
// trained there, its gradients and its whole training state round-tripped bit for bit on
// torch's current stream. Runs where libtorch has CUDA and a GPU is present
// (scripts/gpu-check), and is skipped elsewhere; cuda_module_gradients_test.cpp runs the same
// paths against the driver double everywhere.
#include "../backend/cuda_test_support.hpp"
#include "../support/entry_named.hpp"

#include <ruda/optim/cuda_module_gradients.hpp>
#include <ruda/optim/torch_training_state.hpp>

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/types.h>

#include <boost/test/unit_test.hpp>

#include <cstring>

using ruda::test::entry_named;

// A real model on a real GPU: the gradients of a few steps snapshotted in place and compared
// with torch's own copies, then restored into a fresh model, on torch's current stream.
BOOST_AUTO_TEST_SUITE(torch_cuda_module_gpu,
                      *boost::unit_test::precondition([](boost::unit_test::test_unit_id) {
                          return ruda::torch_has_cuda() && ruda::test::gpu_present();
                      }))

BOOST_AUTO_TEST_CASE(gpu_gradients_round_trip_bit_identical_on_the_current_stream)
{
    const c10::Device cuda{c10::kCUDA, 0};
    torch::manual_seed(7);
    torch::nn::Linear model{torch::nn::LinearOptions(256, 128)};
    model->to(cuda);
    const at::Tensor input = torch::randn({64, 256}, at::TensorOptions().device(cuda));
    model->forward(input).square().sum().backward();

    auto gpu = ruda::cuda_device::open().value();
    auto grads = ruda::from_module(*model, {gpu});
    BOOST_REQUIRE(grads.has_value());
    auto record = grads.value().try_to_record<ruda::cuda_backend>();
    BOOST_REQUIRE(record.has_value());
    for (const auto& item : model->named_parameters()) {
        const at::Tensor expected = item.value().grad().cpu().contiguous();
        const auto& e = entry_named(record.value(), item.key());
        BOOST_REQUIRE(e.data.bytes().size() == expected.nbytes());
        BOOST_TEST(std::memcmp(e.data.bytes().data(), expected.data_ptr(), expected.nbytes()) == 0,
                   item.key());
    }

    torch::nn::Linear fresh{torch::nn::LinearOptions(256, 128)};
    fresh->to(cuda);
    BOOST_REQUIRE(ruda::restore_gradients(record.value(), *fresh, {gpu}).has_value());
    BOOST_REQUIRE(ruda::restore_parameters(ruda::parameters_from_module(*model, {gpu})
                                               .value()
                                               .try_to_record<ruda::cuda_backend>()
                                               .value(),
                                           *fresh, {gpu})
                      .has_value());
    for (const auto& item : model->named_parameters()) {
        const at::Tensor& restored = fresh->named_parameters()[item.key()];
        BOOST_TEST(torch::equal(restored.grad().cpu(), item.value().grad().cpu()), item.key());
        BOOST_TEST(torch::equal(restored.cpu(), item.value().cpu()), item.key());
    }
}

// A real model trained with Adam and dropout on the GPU, its whole state snapshot mid-training
// and restored into a fresh model and optimizer on the GPU, which must end training
// bit-identical to the uninterrupted run.
BOOST_AUTO_TEST_CASE(gpu_training_state_resumes_bit_for_bit)
{
    const c10::Device cuda{c10::kCUDA, 0};
    auto gpu = ruda::cuda_device::open().value();
    const auto make = [&] {
        torch::manual_seed(3);
        torch::nn::Sequential model{torch::nn::Linear(32, 64), torch::nn::Tanh(),
                                    torch::nn::Dropout(0.2), torch::nn::Linear(64, 4)};
        model->to(cuda);
        return model;
    };
    const auto train = [&](torch::nn::Sequential& model, torch::optim::Adam& adam, int step) {
        const auto x = torch::sin(torch::arange(0, 256, at::TensorOptions().device(cuda))
                                      .reshape({8, 32}) * (step + 1));
        adam.zero_grad();
        model->forward(x).square().mean().backward();
        adam.step();
    };
    auto model = make();
    torch::optim::Adam adam{model->parameters(), torch::optim::AdamOptions(1e-3)};
    ruda::checkpoint saved;
    for (int step = 0; step < 6; ++step) {
        if (step == 3) {
            saved = ruda::snapshot_training_state(*model, adam, 3, {gpu}).value();
        }
        train(model, adam, step);
    }
    auto resumed = make();
    torch::optim::Adam fresh{resumed->parameters(), torch::optim::AdamOptions(1e-3)};
    torch::manual_seed(99);
    BOOST_REQUIRE(ruda::restore_training_state(saved, *resumed, fresh, {gpu}).has_value());
    for (int step = 3; step < 6; ++step) {
        train(resumed, fresh, step);
    }
    for (const auto& item : model->named_parameters()) {
        BOOST_TEST(torch::equal(resumed->named_parameters()[item.key()].cpu(), item.value().cpu()),
                   item.key());
    }
}

BOOST_AUTO_TEST_SUITE_END()
