// from_module over a model's CUDA tensors, and the restores into them in place, against the
// test double of the driver API (suite torch_cuda_module). The model's tensors are torch tensors
// over the double's "device memory", as torch's CUDA allocator would give them (this libtorch
// may have no CUDA; a tensor still carries its device and address, and ruda needs nothing more
// of it). cuda_module_gpu_test.cpp runs the same on a real GPU.
#include "../support/entry_named.hpp"
#include "../support/error_text.hpp"
#include "../backend/cuda_test_support.hpp"

#include <ruda/optim/cuda_module_gradients.hpp>
#include <ruda/optim/torch_training_state.hpp>
#include <ruda/record/precision.hpp>

#include <c10/core/TensorImpl.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

using ruda::test::entry_named;
using ruda::test::says;
using ruda::errc;
using ruda::test::fake;
using ruda::test::raw_gpu;
using bytes = std::vector<std::uint8_t>;

bytes pattern(std::size_t n, std::uint8_t seed)
{
    bytes out(n);
    for (std::size_t i = 0; i < n; ++i) {
        out[i] = static_cast<std::uint8_t>(seed + i * 7);
    }
    return out;
}

// A torch tensor over new memory of the double, on cuda:`index`: contiguous unless `strides`
// are given.
at::Tensor device_tensor(const raw_gpu& gpu, const std::vector<std::int64_t>& sizes,
                         c10::ScalarType type, const std::vector<std::int64_t>& strides = {},
                         c10::DeviceIndex index = 0)
{
    const caffe2::TypeMeta meta = c10::scalarTypeToTypeMeta(type);
    std::size_t count = 1;
    for (const std::int64_t d : sizes) {
        count *= static_cast<std::size_t>(d);
    }
    const std::size_t size = count * meta.itemsize();
    using holder = std::shared_ptr<const ruda::cuda_device_ptr>;
    auto* memory = new holder{gpu.alloc(size)};
    c10::DataPtr data{reinterpret_cast<void*>(**memory), memory,
                      [](void* p) { delete static_cast<holder*>(p); },
                      c10::Device{c10::kCUDA, index}};
    c10::Storage storage(c10::Storage::use_byte_size_t{}, size, std::move(data), nullptr, false);
    at::Tensor tensor = at::detail::make_tensor<c10::TensorImpl>(
        std::move(storage), c10::DispatchKeySet{c10::DispatchKey::CUDA}, meta);
    if (strides.empty()) {
        tensor.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
    } else {
        tensor.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides);
    }
    return tensor;
}

ruda::cuda_device_ptr address(const at::Tensor& t)
{
    return reinterpret_cast<ruda::cuda_device_ptr>(t.data_ptr());
}

struct layer : torch::nn::Module {
    layer(const raw_gpu& gpu, std::int64_t out, std::int64_t in, c10::ScalarType type)
    {
        register_parameter("weight", device_tensor(gpu, {out, in}, type));
        register_parameter("bias", device_tensor(gpu, {out}, type));
    }
};

// fc.weight [3, 4] and fc.bias [3] of f32, head.weight [2, 3] and head.bias [2] of f16, all in
// the double's memory.
struct gpu_model : torch::nn::Module {
    explicit gpu_model(const raw_gpu& gpu)
    {
        register_module("fc", std::make_shared<layer>(gpu, 3, 4, c10::kFloat));
        register_module("head", std::make_shared<layer>(gpu, 2, 3, c10::kHalf));
    }
    at::Tensor parameter(const std::string& name) { return named_parameters()[name]; }
};

// The test double with a model on it and a stream standing for the trainer's.
struct model_on_fake : fake {
    raw_gpu gpu{ruda::test::fake_cuda_library()};
    ruda::cuda_stream trainer = gpu.new_stream();
    gpu_model model{gpu};
    ruda::cuda_module_device on{device, trainer};

    ~model_on_fake() { gpu.destroy_stream(trainer); }

    // Gives parameter `name` a new gradient holding pattern(seed), written on the trainer's
    // stream; returns the bytes.
    bytes give_gradient(const std::string& name, std::uint8_t seed)
    {
        at::Tensor parameter = model.parameter(name);
        at::Tensor grad = device_tensor(gpu, parameter.sizes().vec(), parameter.scalar_type());
        const bytes values = pattern(grad.nbytes(), seed);
        gpu.write(address(grad), values, trainer);
        parameter.mutable_grad() = grad;
        return values;
    }
    void set_value(const std::string& name, std::uint8_t seed)
    {
        const at::Tensor parameter = model.parameter(name);
        gpu.write(address(parameter), pattern(parameter.nbytes(), seed), trainer);
    }
    bytes read(const at::Tensor& tensor)
    {
        return gpu.read(address(tensor), tensor.nbytes(), trainer);
    }
};

// A record entry for parameter `name`: `values` of `type` in shape `dims`.
ruda::gradient_entry entry(const std::string& name, ruda::dtype type, ruda::shape dims,
                           bytes values)
{
    return {ruda::param_id::from_name(name), type, ruda::tensor_data{std::move(values), dims, type},
            name};
}

// A record of every parameter of the model: pattern(seed + i) for the i-th.
ruda::gradients_params_record full_record(std::uint8_t seed)
{
    return ruda::gradients_params_record{{
        entry("fc.weight", ruda::dtype::f32(), {3, 4}, pattern(48, seed)),
        entry("fc.bias", ruda::dtype::f32(), {3}, pattern(12, seed + 1)),
        entry("head.weight", ruda::dtype::f16(), {2, 3}, pattern(12, seed + 2)),
        entry("head.bias", ruda::dtype::f16(), {2}, pattern(4, seed + 3)),
    }};
}

bytes stored(const ruda::gradient_entry& e)
{
    return e.data.bytes().to_vector();
}

// For the cases of a libtorch without CUDA: it has no current stream, and ruda makes the
// gradients a module lacks. Where libtorch has CUDA, torch's allocator makes them on the real
// GPU, out of the double's reach; the GPU suite covers that path.
bool libtorch_without_cuda(boost::unit_test::test_unit_id)
{
    return !ruda::torch_has_cuda();
}

} // namespace

BOOST_AUTO_TEST_SUITE(torch_cuda_module)

BOOST_FIXTURE_TEST_CASE(from_module_borrows_every_gradient_in_place_after_the_trainers_stream,
                        model_on_fake)
{
    const bytes fc_weight = give_gradient("fc.weight", 1);
    const bytes fc_bias = give_gradient("fc.bias", 2);
    const bytes head_weight = give_gradient("head.weight", 3);
    // head.bias has no gradient, and is left out.

    auto grads = ruda::from_module(model, on);
    BOOST_REQUIRE(grads.has_value());
    BOOST_TEST(grads.value().size() == 3U);
    const auto id = ruda::param_id::from_name("fc.weight");
    const auto borrowed = grads.value().get<ruda::cuda_backend>(id);
    BOOST_REQUIRE(borrowed.has_value());
    const auto& tensor = std::get<ruda::cuda_backend::float_tensor>(*borrowed);
    BOOST_TEST(tensor.address() == address(model.parameter("fc.weight").grad())); // no copy
    BOOST_TEST(tensor.producer() == trainer);
    BOOST_TEST(tensor.dtype() == ruda::dtype::f32());
    BOOST_TEST((tensor.shape() == ruda::shape{3, 4}));

    auto record = grads.value().try_to_record<ruda::cuda_backend>();
    BOOST_REQUIRE(record.has_value());
    BOOST_TEST(record.value().entries().size() == 3U);
    BOOST_TEST(stored(entry_named(record.value(), "fc.weight")) == fc_weight);
    BOOST_TEST(stored(entry_named(record.value(), "fc.bias")) == fc_bias);
    const auto& half = entry_named(record.value(), "head.weight");
    BOOST_TEST(half.dtype == ruda::dtype::f16());
    BOOST_TEST(stored(half) == head_weight);
}

BOOST_FIXTURE_TEST_CASE(a_snapshot_keeps_the_gradients_alive_after_the_module_lets_go,
                        model_on_fake)
{
    const bytes values = give_gradient("fc.bias", 9);
    auto grads = ruda::from_module(model, on).value();
    const long before = fake::count("fake_cuda_device_allocations");
    // zero_grad(set_to_none): the module drops its gradient; the snapshot still holds it.
    model.parameter("fc.bias").mutable_grad() = at::Tensor{};
    BOOST_TEST(fake::count("fake_cuda_device_allocations") == before);

    auto record = grads.try_to_record<ruda::cuda_backend>();
    BOOST_REQUIRE(record.has_value());
    BOOST_TEST(stored(entry_named(record.value(), "fc.bias")) == values);
    grads = ruda::gradients_params{};
    BOOST_TEST(fake::count("fake_cuda_device_allocations") == before - 1);
}

BOOST_FIXTURE_TEST_CASE(parameters_from_module_borrows_the_values, model_on_fake)
{
    set_value("head.weight", 40);
    auto values = ruda::parameters_from_module(model, on);
    BOOST_REQUIRE(values.has_value());
    BOOST_TEST(values.value().size() == 4U);
    auto record = values.value().try_to_record<ruda::cuda_backend>();
    BOOST_REQUIRE(record.has_value());
    BOOST_TEST(stored(entry_named(record.value(), "head.weight")) == pattern(12, 40));
}

BOOST_FIXTURE_TEST_CASE(gradients_it_cannot_borrow_are_refused_naming_the_parameter,
                        model_on_fake)
{
    at::Tensor parameter = model.parameter("fc.weight");
    const auto refusal = [&](at::Tensor grad) {
        parameter.mutable_grad() = std::move(grad);
        auto grads = ruda::from_module(model, on);
        BOOST_REQUIRE(!grads.has_value());
        BOOST_TEST(says(grads.error(), "parameter fc.weight ("));
        return grads.error();
    };

    const auto on_cpu = refusal(at::zeros({3, 4}));
    BOOST_TEST(on_cpu.code() == errc::unsupported_device);
    BOOST_TEST(says(on_cpu, "the tensor is on cpu, not cuda:0"));

    const auto other_gpu = refusal(device_tensor(gpu, {3, 4}, c10::kFloat, {}, 1));
    BOOST_TEST(other_gpu.code() == errc::unsupported_device);
    BOOST_TEST(says(other_gpu, "on cuda:1, and the device is cuda:0"));

    const auto strided = refusal(device_tensor(gpu, {3, 4}, c10::kFloat, {1, 3}));
    BOOST_TEST(strided.code() == errc::invalid_tensor);
    BOOST_TEST(says(strided, "not contiguous (strides [1, 3])"));

    const auto integers = refusal(device_tensor(gpu, {3, 4}, c10::kInt));
    BOOST_TEST(integers.code() == errc::invalid_dtype);
    BOOST_TEST(says(integers, "Int tensors are not float gradients"));

    parameter.mutable_grad() = device_tensor(gpu, {3, 4}, c10::kFloat);
    auto gone = ruda::from_module(model, {ruda::cuda_device::from_state({}), trainer});
    BOOST_REQUIRE(!gone.has_value());
    BOOST_TEST(gone.error().code() == errc::device_unavailable);
}

BOOST_FIXTURE_TEST_CASE(without_a_stream_a_libtorch_without_cuda_says_to_pass_one,
                        model_on_fake, *boost::unit_test::precondition(libtorch_without_cuda))
{
    give_gradient("fc.bias", 1);
    auto grads = ruda::from_module(model, {device});
    BOOST_REQUIRE(!grads.has_value());
    BOOST_TEST(grads.error().code() == errc::device_unavailable);
    BOOST_TEST(says(grads.error(), "has no CUDA here"));
    BOOST_TEST(says(grads.error(), "pass the trainer's stream"));
    // A module without gradients needs no stream.
    model.parameter("fc.bias").mutable_grad() = at::Tensor{};
    BOOST_TEST(ruda::from_module(model, {device}).has_value());
}

BOOST_FIXTURE_TEST_CASE(restore_gradients_uploads_into_the_gradients_in_place, model_on_fake)
{
    give_gradient("fc.weight", 1);
    give_gradient("head.weight", 2);
    give_gradient("head.bias", 3);
    const at::Tensor fc_weight = model.parameter("fc.weight").grad();
    const at::Tensor head_weight = model.parameter("head.weight").grad();
    // Held here: freeing device memory waits for every stream, the held one too.
    const at::Tensor head_bias = model.parameter("head.bias").grad();
    const auto version = fc_weight._version();
    const ruda::gradients_params_record record{{
        entry("fc.weight", ruda::dtype::f32(), {3, 4}, pattern(48, 100)),
        entry("head.weight", ruda::dtype::f16(), {2, 3}, pattern(12, 101)),
    }};

    // The trainer's own write, still queued on its stream when the restore is asked for, lands
    // before the restored bytes.
    fake::hold_stream(trainer, true);
    gpu.write_async(address(fc_weight), pattern(48, 99), trainer);
    BOOST_REQUIRE(ruda::restore_gradients(record, model, on).has_value());
    fake::hold_stream(trainer, false);
    gpu.finish(trainer);

    // The same tensors, now holding the record's bytes; head.bias is not in the record.
    BOOST_TEST(model.parameter("fc.weight").grad().is_same(fc_weight));
    BOOST_TEST(model.parameter("head.weight").grad().is_same(head_weight));
    BOOST_TEST(read(fc_weight) == pattern(48, 100));
    BOOST_TEST(read(head_weight) == pattern(12, 101));
    BOOST_TEST(fc_weight._version() > version);
    BOOST_TEST(!model.parameter("head.bias").grad().defined());
    BOOST_TEST(!model.parameter("fc.bias").grad().defined());
}

BOOST_FIXTURE_TEST_CASE(restore_gradients_gives_new_gradients_where_the_module_has_none,
                        model_on_fake, *boost::unit_test::precondition(libtorch_without_cuda))
{
    // fc.bias was stored narrower (f16) than its f32 gradient: it is widened on the host.
    const auto narrow = ruda::tensor_data::from_values(std::vector<float>{1.5F, -2.0F, 65504.0F},
                                                       {3})
                            .value()
                            .convert(ruda::dtype::f16())
                            .value();
    const ruda::gradients_params_record record{{
        ruda::gradient_entry{ruda::param_id::from_name("fc.bias"), ruda::dtype::f32(), narrow,
                             "fc.bias"},
        entry("head.bias", ruda::dtype::f16(), {2}, pattern(4, 7)),
    }};
    const long before = fake::count("fake_cuda_device_allocations");

    BOOST_REQUIRE(ruda::restore_gradients(record, model, on).has_value());

    {
        const at::Tensor fc_bias = model.parameter("fc.bias").grad();
        BOOST_REQUIRE(fc_bias.defined());
        BOOST_TEST(fc_bias.is_cuda());
        BOOST_TEST(fc_bias.device().index() == 0);
        BOOST_TEST(fc_bias.scalar_type() == c10::kFloat);
        BOOST_TEST(fc_bias.sizes() == model.parameter("fc.bias").sizes());
        BOOST_TEST(fc_bias.is_contiguous());
        const bytes widened = narrow.convert(ruda::dtype::f32()).value().into_bytes();
        BOOST_TEST(read(fc_bias) == widened);
        BOOST_TEST(read(model.parameter("head.bias").grad()) == pattern(4, 7));
    }
    BOOST_TEST(fake::count("fake_cuda_device_allocations") == before + 2);

    // The memory is the gradient's: it goes when the module lets go of it.
    model.parameter("fc.bias").mutable_grad() = at::Tensor{};
    model.parameter("head.bias").mutable_grad() = at::Tensor{};
    BOOST_TEST(fake::count("fake_cuda_device_allocations") == before);
}

BOOST_FIXTURE_TEST_CASE(a_snapshot_restored_into_a_fresh_model_is_bit_identical,
                        model_on_fake, *boost::unit_test::precondition(libtorch_without_cuda))
{
    std::map<std::string, bytes> values;
    for (const char* name : {"fc.weight", "fc.bias", "head.weight"}) {
        values[name] = give_gradient(name, static_cast<std::uint8_t>(values.size() * 50));
    }
    const auto record = ruda::from_module(model, on).value().try_to_record<ruda::cuda_backend>();
    BOOST_REQUIRE(record.has_value());

    gpu_model fresh{gpu};
    BOOST_REQUIRE(ruda::restore_gradients(record.value(), fresh, on).has_value());
    for (const auto& [name, expected] : values) {
        BOOST_TEST(read(fresh.named_parameters()[name].grad()) == expected, name);
    }
    BOOST_TEST(!fresh.named_parameters()["head.bias"].grad().defined());
}

BOOST_FIXTURE_TEST_CASE(restores_check_everything_before_the_module_changes, model_on_fake)
{
    const bytes kept = give_gradient("fc.weight", 1);
    give_gradient("head.bias", 2);
    const at::Tensor grad = model.parameter("fc.weight").grad();
    const auto refused = [&](std::vector<ruda::gradient_entry> entries) {
        // A good entry first: nothing may be written before the bad one is found.
        entries.insert(entries.begin(), entry("fc.weight", ruda::dtype::f32(), {3, 4},
                                              pattern(48, 200)));
        const ruda::gradients_params_record record{std::move(entries)};
        auto restored = ruda::restore_gradients(record, model, on);
        BOOST_REQUIRE(!restored.has_value());
        BOOST_TEST(model.parameter("fc.weight").grad().is_same(grad));
        BOOST_TEST(read(grad) == kept);
        BOOST_TEST(model.parameter("head.bias").grad().defined());
        return restored.error();
    };

    const auto unknown = refused({entry("fc.scale", ruda::dtype::f32(), {1}, pattern(4, 0))});
    BOOST_TEST(unknown.code() == errc::unknown_parameter);
    BOOST_TEST(says(unknown, "is none of the module's parameters"));

    const auto wider = refused({entry("fc.bias", ruda::dtype::f64(), {3}, pattern(24, 0))});
    BOOST_TEST(wider.code() == errc::invalid_dtype);
    BOOST_TEST(says(wider, "parameter fc.bias ("));
    BOOST_TEST(says(wider, "dtype f64, the parameter's f32"));

    const auto transposed = refused({entry("head.weight", ruda::dtype::f16(), {3, 2},
                                           pattern(12, 0))});
    BOOST_TEST(transposed.code() == errc::shape_mismatch);
    BOOST_TEST(says(transposed, "shape [3, 2], the parameter's [2, 3]"));

    const auto twice = refused({entry("fc.weight", ruda::dtype::f32(), {3, 4}, pattern(48, 0))});
    BOOST_TEST(twice.code() == errc::duplicate_param_id);

    const auto short_bytes = refused({entry("fc.bias", ruda::dtype::f32(), {3}, pattern(8, 0))});
    BOOST_TEST(short_bytes.code() == errc::byte_count_mismatch);

    // A parameter on the CPU cannot take an upload.
    auto cpu = std::make_shared<torch::nn::LinearImpl>(2, 2);
    model.register_module("cpu", cpu);
    const auto on_cpu = refused({entry("cpu.bias", ruda::dtype::f32(), {2}, pattern(8, 0))});
    BOOST_TEST(on_cpu.code() == errc::unsupported_device);
    BOOST_TEST(says(on_cpu, "parameter cpu.bias ("));

    auto gone = ruda::restore_gradients(full_record(0), model,
                                        {ruda::cuda_device::from_state({}), trainer});
    BOOST_REQUIRE(!gone.has_value());
    BOOST_TEST(gone.error().code() == errc::device_unavailable);
    BOOST_TEST(read(grad) == kept);
}

BOOST_FIXTURE_TEST_CASE(restore_parameters_writes_every_value_in_place, model_on_fake)
{
    const at::Tensor weight = model.parameter("head.weight");
    const auto version = weight._version();
    BOOST_REQUIRE(ruda::restore_parameters(full_record(60), model, on).has_value());
    BOOST_TEST(model.parameter("head.weight").is_same(weight));
    BOOST_TEST(read(weight) == pattern(12, 62));
    BOOST_TEST(read(model.parameter("fc.weight")) == pattern(48, 60));
    BOOST_TEST(weight._version() > version);

    // Every parameter needs a value, checked before any is written.
    auto entries = full_record(90).into_entries();
    entries.pop_back();
    auto missing = ruda::restore_parameters(ruda::gradients_params_record{entries}, model, on);
    BOOST_REQUIRE(!missing.has_value());
    BOOST_TEST(missing.error().code() == errc::not_found);
    BOOST_TEST(says(missing.error(), "Missing value for parameter head.bias ("));
    BOOST_TEST(read(weight) == pattern(12, 62));
}

BOOST_FIXTURE_TEST_CASE(a_failed_upload_is_named_and_the_next_restore_goes_through,
                        model_on_fake)
{
    for (const char* name : {"fc.weight", "fc.bias", "head.weight", "head.bias"}) {
        give_gradient(name, 1); // in place, whichever libtorch this is
    }
    fake::fail("cuMemcpyHtoDAsync_v2", 1, 700);
    auto failed = ruda::restore_gradients(full_record(5), model, on);
    BOOST_REQUIRE(!failed.has_value());
    BOOST_TEST(failed.error().code() == errc::read_failed);
    BOOST_TEST(says(failed.error(), "parameter "));

    BOOST_REQUIRE(ruda::restore_gradients(full_record(5), model, on).has_value());
    BOOST_TEST(read(model.parameter("fc.weight").grad()) == pattern(48, 5));
}

// A trainer's whole state on the GPU: the parameters, gradients and Adam's moving averages
// borrowed in place and read after the trainer's stream, the step count and hyper-parameters
// with them; restored into a fresh model and optimizer on the GPU. The restore makes Adam's
// tensors in ruda's memory, as where libtorch has no CUDA (the GPU suite covers torch's).
BOOST_FIXTURE_TEST_CASE(a_whole_training_state_round_trips_on_the_gpu, model_on_fake,
                        *boost::unit_test::precondition(libtorch_without_cuda))
{
    const std::vector<std::string> names{"fc.weight", "fc.bias", "head.weight", "head.bias"};
    for (std::size_t k = 0; k < names.size(); ++k) {
        set_value(names[k], static_cast<std::uint8_t>(10 + k));
    }
    const bytes grad = give_gradient("fc.weight", 9);
    torch::optim::Adam adam{model.parameters(), torch::optim::AdamOptions(0.01)};
    // Adam's state of fc.weight, as torch keeps it: moving averages on the GPU, a step count.
    const at::Tensor weight = model.parameter("fc.weight");
    at::Tensor exp_avg = device_tensor(gpu, {3, 4}, c10::kFloat);
    at::Tensor exp_avg_sq = device_tensor(gpu, {3, 4}, c10::kFloat);
    gpu.write(address(exp_avg), pattern(48, 30), trainer);
    gpu.write(address(exp_avg_sq), pattern(48, 40), trainer);
    auto state = std::make_unique<torch::optim::AdamParamState>();
    state->step(3);
    state->exp_avg(exp_avg);
    state->exp_avg_sq(exp_avg_sq);
    adam.state()[ruda::detail::optimizer_state_key(adam.state(), weight)] = std::move(state);

    auto saved = ruda::snapshot_training_state(model, adam, 3, on);
    BOOST_REQUIRE(saved.has_value());
    const auto& optimizer = *saved.value().group("optimizer");
    BOOST_TEST(stored(entry_named(optimizer, "fc.weight.exp_avg")) == pattern(48, 30));
    BOOST_TEST(stored(entry_named(optimizer, "fc.weight.exp_avg_sq")) == pattern(48, 40));
    BOOST_TEST(entry_named(optimizer, "fc.weight.step").data.values<std::int64_t>().value()[0] == 3);
    BOOST_TEST(stored(entry_named(*saved.value().group("weights"), "head.weight")) == pattern(12, 12));
    BOOST_TEST(stored(entry_named(saved.value().gradients(), "fc.weight")) == grad);

    model_on_fake target;
    torch::optim::Adam fresh{target.model.parameters(), torch::optim::AdamOptions(0.001)};
    const auto step = ruda::restore_training_state(saved.value(), target.model, fresh, target.on);
    BOOST_REQUIRE(step.has_value());
    BOOST_TEST(step.value() == 3U);
    for (std::size_t k = 0; k < names.size(); ++k) {
        const at::Tensor restored = target.model.parameter(names[k]);
        BOOST_TEST(target.read(restored) == pattern(restored.nbytes(), 10 + k), names[k]);
    }
    BOOST_TEST(target.read(target.model.parameter("fc.weight").grad()) == grad);
    BOOST_REQUIRE_EQUAL(fresh.state().size(), 1U);
    const auto& restored = static_cast<const torch::optim::AdamParamState&>(*fresh.state().at(
        ruda::detail::optimizer_state_key(fresh.state(), target.model.parameter("fc.weight"))));
    BOOST_TEST(restored.step() == 3);
    BOOST_TEST(restored.exp_avg().is_cuda());
    BOOST_TEST(target.read(restored.exp_avg()) == pattern(48, 30));
    BOOST_TEST(target.read(restored.exp_avg_sq()) == pattern(48, 40));
    BOOST_TEST(static_cast<const torch::optim::AdamOptions&>(fresh.param_groups()[0].options())
                   .lr() == 0.01);

    // A state tensor on the CPU while the model is on the GPU is named.
    auto& moved = static_cast<torch::optim::AdamParamState&>(
        *adam.state().at(ruda::detail::optimizer_state_key(adam.state(), weight)));
    moved.exp_avg(torch::zeros({3, 4}));
    const auto refused = ruda::snapshot_training_state(model, adam, 3, on);
    BOOST_REQUIRE(!refused.has_value());
    BOOST_TEST(refused.error().code() == errc::unsupported_device);
    BOOST_TEST(says(refused.error(), "Optimizer state fc.weight.exp_avg: the tensor is on cpu"));
}

BOOST_AUTO_TEST_SUITE_END()
