// torch_backend: which tensors it takes, reads on the read workers (concurrent, cancellable),
// uploads and casts, and the bit-exact round trip
// torch -> record -> checkpoint file -> torch for every float dtype and for qint8.
#include "../checkpoint/checkpoint_test_support.hpp"
#include "../support/async_test.hpp"

#include <ruda/backend/torch_backend.hpp>
#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/optim/gradients_params.hpp>

#include <torch/serialize.h>
#include <torch/types.h>

#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/post.hpp>
#include <boost/test/unit_test.hpp>

#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <future>

namespace {

using ruda::errc;
using tb = ruda::torch_backend;

// Random bits reinterpreted as `type`: NaN payloads, infinities, subnormals and -0 included.
torch::Tensor random_bits(torch::ScalarType type, const std::vector<std::int64_t>& sizes,
                          std::uint64_t seed)
{
    torch::manual_seed(seed);
    const std::int64_t count = c10::multiply_integers(sizes);
    const auto element = static_cast<std::int64_t>(torch::elementSize(type));
    return torch::randint(0, 256, {count * element}, torch::TensorOptions().dtype(torch::kByte))
        .view(type)
        .reshape(sizes);
}

// Glibc's MALLOC_PERTURB_ (which Meson sets at random for each test) fills every allocation
// with a byte: for a tensor of 512 MiB, a memset that no cancel can stop, taking minutes at
// nice 19 on a loaded machine. Off while it lives, for a test about the copy after it.
class malloc_perturb_off {
public:
    malloc_perturb_off() { mallopt(M_PERTURB, 0); }
    ~malloc_perturb_off()
    {
        if (const char* byte = std::getenv("MALLOC_PERTURB_")) {
            mallopt(M_PERTURB, std::atoi(byte));
        }
    }
    malloc_perturb_off(const malloc_perturb_off&) = delete;
    malloc_perturb_off& operator=(const malloc_perturb_off&) = delete;
};

bool same_bytes(const torch::Tensor& a, const torch::Tensor& b)
{
    const auto x = a.contiguous();
    const auto y = b.contiguous();
    return x.scalar_type() == y.scalar_type() && x.sizes() == y.sizes() &&
           (x.numel() == 0 || // an empty tensor's data pointer may be null
            std::memcmp(x.data_ptr(), y.data_ptr(), x.numel() * x.element_size()) == 0);
}

tb::float_tensor wrap(torch::Tensor t) { return tb::float_tensor::wrap(std::move(t)).value(); }

std::optional<ruda::result<ruda::tensor_data>> read(boost::asio::io_context& io,
                                                    const tb::float_tensor& tensor)
{
    return ruda::test::run_to_end(io, tb::float_into_data(tensor));
}

// Reads `tensor`, then says which thread the coroutine resumed on.
boost::asio::awaitable<ruda::result<std::thread::id>> read_then_thread(tb::float_tensor tensor)
{
    auto data = co_await tb::float_into_data(std::move(tensor));
    if (!data) {
        co_return data.error();
    }
    co_return std::this_thread::get_id();
}

} // namespace

BOOST_AUTO_TEST_SUITE(torch_backend)

BOOST_AUTO_TEST_CASE(models_the_backend_concept)
{
    static_assert(ruda::backend<tb>);
    BOOST_TEST(tb::name() == "torch");
    BOOST_TEST(tb::read_workers() >= 1U);
    BOOST_TEST(tb::read_workers() <= 4U);
    const auto t = wrap(torch::zeros({2, 3}));
    BOOST_TEST((tb::float_device(t) == tb::device{}));
    BOOST_TEST(tb::dtype_of(t) == ruda::dtype::f32());
    BOOST_TEST(tb::byte_size(t) == 24U);
}

BOOST_AUTO_TEST_CASE(takes_float_tensors_and_names_what_it_refuses)
{
    BOOST_TEST(wrap(torch::zeros({1}, torch::kDouble)).dtype() == ruda::dtype::f64());
    BOOST_TEST(wrap(torch::zeros({1}, torch::kHalf)).dtype() == ruda::dtype::f16());
    BOOST_TEST(wrap(torch::zeros({1}, torch::kBFloat16)).dtype() == ruda::dtype::bf16());

    const auto undefined = tb::float_tensor::wrap(torch::Tensor{});
    BOOST_TEST(undefined.error() == errc::invalid_tensor);
    BOOST_TEST(undefined.error().message().find("undefined") != std::string::npos);
    const auto integers = tb::float_tensor::wrap(torch::zeros({1}, torch::kLong));
    BOOST_TEST(integers.error() == errc::invalid_dtype);
    BOOST_TEST(integers.error().message().find("Long") != std::string::npos);
    const auto sparse = tb::float_tensor::wrap(torch::eye(3).to_sparse());
    BOOST_TEST(sparse.error() == errc::invalid_tensor);
    BOOST_TEST(sparse.error().message().find("sparse") != std::string::npos);
    const auto quantized =
        tb::float_tensor::wrap(torch::quantize_per_tensor(torch::ones({2}), 0.5, 0, torch::kQInt8));
    BOOST_TEST(quantized.error() == errc::invalid_dtype);
    BOOST_TEST(tb::quantized_tensor::wrap(torch::ones({2})).error() == errc::invalid_dtype);

    // Another device is a device problem, whatever the dtype: said as such.
    const auto elsewhere = tb::float_tensor::wrap(torch::zeros({2}, torch::device(torch::kMeta)));
    BOOST_TEST(elsewhere.error() == errc::unsupported_device);
    BOOST_TEST(elsewhere.error().message() ==
               "torch backend: the tensor is on meta, and this build of ruda::torch reads CPU "
               "tensors only (move it with .cpu(), or use cuda_backend for GPU memory)");
    const auto upload = tb::float_from_data(
        ruda::tensor_data::from_values(std::vector<float>{1}, {1}).value(),
        tb::device{c10::Device{"cuda:0"}});
    BOOST_TEST(upload.error() == errc::unsupported_device);
    BOOST_TEST(upload.error().message().find("cannot upload to cuda:0") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(reads_copy_the_values_in_torch_layout)
{
    boost::asio::io_context io;
    const auto t = torch::arange(12, torch::kFloat).reshape({3, 4});
    const auto data = read(io, wrap(t));
    BOOST_REQUIRE(data);
    BOOST_REQUIRE(data->has_value());
    BOOST_TEST(data->value().shape() == (ruda::shape{3, 4}));
    BOOST_TEST(data->value().dtype() == ruda::dtype::f32());
    const auto values = data->value().values<float>().value();
    BOOST_TEST(std::vector<float>(values.begin(), values.end()) ==
               (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));

    // A transposed view reads in its own (logical) order, and a scalar has rank 0.
    const auto transposed = read(io, wrap(t.t()));
    BOOST_REQUIRE(transposed && transposed->has_value());
    BOOST_TEST(transposed->value().shape() == (ruda::shape{4, 3}));
    BOOST_TEST(transposed->value().values<float>().value()[1] == 4.0F);
    const auto scalar = read(io, wrap(torch::tensor(2.5)));
    BOOST_REQUIRE(scalar && scalar->has_value());
    BOOST_TEST(scalar->value().rank() == 0U);
    BOOST_TEST(scalar->value().values<float>().value()[0] == 2.5F);
}

BOOST_AUTO_TEST_CASE(reads_run_on_the_workers_and_complete_on_the_readers_executor)
{
    boost::asio::io_context io;
    const auto reader = std::this_thread::get_id();
    const auto resumed_on = ruda::test::run_to_end(io, read_then_thread(wrap(torch::ones({1000}))));
    BOOST_REQUIRE(resumed_on && resumed_on->has_value());
    BOOST_TEST((resumed_on->value() == reader));
}

BOOST_AUTO_TEST_CASE(snapshots_many_tensors_with_reads_in_flight_at_once)
{
    boost::asio::io_context io;
    ruda::gradients_params grads;
    std::vector<torch::Tensor> tensors;
    for (std::uint64_t id = 1; id <= 64; ++id) {
        tensors.push_back(torch::full({256}, static_cast<double>(id)));
        grads.insert<tb>(ruda::param_id{id}, wrap(tensors.back()));
    }
    const auto record = ruda::test::run_to_end(io, grads.to_record_async<tb>({.max_in_flight = 16}));
    BOOST_REQUIRE(record && record->has_value());
    BOOST_TEST(record->value().entries().size() == 64U);
    for (const auto& entry : record->value().entries()) {
        const auto values = entry.data.values<float>().value();
        BOOST_TEST(values.size() == 256U);
        BOOST_TEST(values[255] == static_cast<float>(entry.id.val()));
    }
    // The blocking wrapper works from a plain thread.
    const auto sync = grads.try_to_record<tb>();
    BOOST_REQUIRE(sync.has_value());
    BOOST_TEST(sync.value().entries().size() == 64U);
}

BOOST_AUTO_TEST_CASE(a_cancelled_read_completes_promptly_with_cancelled)
{
    const ruda::test::watchdog guard{"torch read cancel"};
    boost::asio::io_context io;
    // 512 MiB: a copy this size takes well over 10 ms on any machine, so the cancel below
    // arrives while the read is queued or copying, and the copy stops at its next 4 MiB piece.
    // Left unfilled, and not filled by malloc either: filling the tensor and the read's record
    // (2 x 512 MiB that no cancel can stop) was most of the test's time, and under
    // MALLOC_PERTURB_ at nice 19 on a loaded machine took past the 20 s watchdog it had.
    const malloc_perturb_off unfilled;
    const auto big = wrap(torch::empty({128 << 20}));
    boost::asio::cancellation_signal cancel;
    auto out = ruda::test::spawn(io, tb::float_into_data(big), &cancel);
    io.run_for(std::chrono::milliseconds(10));
    BOOST_REQUIRE(!out->done.load());
    cancel.emit(boost::asio::cancellation_type::terminal);
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return out->done.load(); }));
    BOOST_REQUIRE(out->value.has_value());
    BOOST_TEST(out->value->error() == errc::cancelled);

    // The workers are free again: the next read succeeds.
    const auto after = read(io, wrap(torch::ones({4})));
    BOOST_REQUIRE(after && after->has_value());
}

BOOST_AUTO_TEST_CASE(uploads_and_casts)
{
    const auto data = ruda::tensor_data::from_values(std::vector<double>{1.5, -2.25}, {2}).value();
    const auto t = tb::float_from_data(data, {}).value();
    BOOST_TEST((t.get().scalar_type() == torch::kDouble));
    BOOST_TEST(t.get()[1].item<double>() == -2.25);
    const auto half = tb::float_cast(t, ruda::dtype::f16()).value();
    BOOST_TEST(half.dtype() == ruda::dtype::f16());
    BOOST_TEST((half.get().scalar_type() == torch::kHalf));

    BOOST_TEST(tb::float_cast(t, ruda::dtype::flex32()).error() == errc::invalid_dtype);
    BOOST_TEST(tb::float_cast(t, ruda::dtype::i32()).error() == errc::invalid_dtype);
    const ruda::tensor_data flex{std::vector<std::uint8_t>(4), {1}, ruda::dtype::flex32()};
    const auto no_flex = tb::float_from_data(flex, {});
    BOOST_TEST(no_flex.error() == errc::invalid_dtype);
    BOOST_TEST(no_flex.error().message().find("flex32") != std::string::npos);
    const auto ints = ruda::tensor_data::from_values(std::vector<std::int32_t>{1}, {1}).value();
    BOOST_TEST(tb::float_from_data(ints, {}).error() == errc::invalid_dtype);
    const ruda::tensor_data short_bytes{std::vector<std::uint8_t>(6), {2}, ruda::dtype::f32()};
    BOOST_TEST(tb::float_from_data(short_bytes, {}).error() == errc::byte_count_mismatch);

#if !defined(__SANITIZE_THREAD__) // TSan's allocator ends the process instead of failing
    // A cast that cannot be allocated (a 2^40-element view of one float, as doubles: 8 TiB)
    // is an error, not an exception out of the backend.
    const auto vast = wrap(torch::zeros({1}).expand({std::int64_t{1} << 40}));
    const auto cast = tb::float_cast(vast, ruda::dtype::f64());
    BOOST_TEST(cast.error() == errc::allocation_too_large);
    BOOST_TEST(cast.error().message().find("torch backend: ") == 0U, cast.error().message());
#endif
}

BOOST_AUTO_TEST_CASE(qint8_per_tensor_symmetric_is_read_and_others_are_refused)
{
    boost::asio::io_context io;
    const auto q = torch::quantize_per_tensor(torch::tensor({-1.0F, 0.25F, 0.5F, 6.35F}), 0.05,
                                              0, torch::kQInt8);
    const auto wrapped = tb::quantized_tensor::wrap(q).value();
    BOOST_TEST(tb::byte_size(wrapped) == 8U);
    const auto data = ruda::test::run_to_end(io, tb::q_into_data(wrapped));
    BOOST_REQUIRE(data && data->has_value());
    BOOST_TEST(data->value().dtype() == tb::q8s_dtype());
    const auto& bytes = data->value().bytes();
    BOOST_REQUIRE(bytes.size() == 8U);
    BOOST_TEST(static_cast<std::int8_t>(bytes[0]) == -20);
    BOOST_TEST(static_cast<std::int8_t>(bytes[3]) == 127);
    float scale = 0;
    std::memcpy(&scale, bytes.data() + 4, sizeof scale);
    BOOST_TEST(scale == 0.05F);

    const auto back = tb::q_from_data(data->value(), {}).value();
    BOOST_TEST(torch::equal(back.get().int_repr(), q.int_repr()));
    BOOST_TEST(back.get().q_scale() == static_cast<double>(0.05F));

    const auto per_channel = torch::quantize_per_channel(
        torch::ones({2, 2}), torch::tensor({0.1, 0.2}), torch::tensor({0, 0}), 0, torch::kQInt8);
    const auto channel_error = tb::quantized_tensor::wrap(per_channel);
    BOOST_TEST(channel_error.error() == errc::invalid_quantization);
    BOOST_TEST(channel_error.error().message().find("per_channel") != std::string::npos);
    const auto unsigned_q = tb::quantized_tensor::wrap(
        torch::quantize_per_tensor(torch::ones({2}), 0.1, 0, torch::kQUInt8));
    BOOST_TEST(unsigned_q.error() == errc::invalid_quantization);
    BOOST_TEST(unsigned_q.error().message().find("QUInt8") != std::string::npos);
    const auto offset = tb::quantized_tensor::wrap(
        torch::quantize_per_tensor(torch::ones({2}), 0.1, 3, torch::kQInt8));
    BOOST_TEST(offset.error() == errc::invalid_quantization);
    BOOST_TEST(offset.error().message().find("zero point 3") != std::string::npos);

    ruda::quant_scheme other{};
    const ruda::tensor_data packed{std::vector<std::uint8_t>(8), {4}, ruda::dtype::qfloat(other)};
    BOOST_TEST(tb::q_from_data(packed, {}).error() == errc::invalid_quantization);
    const ruda::tensor_data short_q{std::vector<std::uint8_t>(5), {4}, tb::q8s_dtype()};
    BOOST_TEST(tb::q_from_data(short_q, {}).error() == errc::byte_count_mismatch);
}

BOOST_AUTO_TEST_CASE(round_trip_through_a_checkpoint_file_is_bit_exact_for_every_dtype)
{
    const ruda::test::temp_dir dir;
    boost::asio::io_context io;
    ruda::gradients_params grads;
    std::map<std::uint64_t, torch::Tensor> originals;
    std::uint64_t id = 1;
    for (const auto type : {torch::kDouble, torch::kFloat, torch::kHalf, torch::kBFloat16}) {
        for (const auto& sizes : std::vector<std::vector<std::int64_t>>{{}, {0}, {7}, {3, 5, 2}}) {
            originals[id] = random_bits(type, sizes, id);
            grads.insert<tb>(ruda::param_id{id}, wrap(originals[id]));
            ++id;
        }
    }
    const auto q = torch::quantize_per_tensor(torch::randn({4, 4}), 0.125, 0, torch::kQInt8);
    grads.insert<tb>(ruda::param_id{id}, tb::quantized_tensor::wrap(q).value());

    auto record = ruda::test::run_to_end(io, grads.to_record_async<tb>());
    BOOST_REQUIRE(record && record->has_value());
    const auto file = dir.path() / "torch.ruda";
    BOOST_REQUIRE(ruda::save_checkpoint_file(file, ruda::checkpoint{record->value()}).has_value());
    auto loaded = ruda::load_checkpoint_file(file);
    BOOST_REQUIRE(loaded.has_value());
    const auto restored =
        ruda::gradients_params::from_record<tb>(std::move(loaded).value().gradients(), {});
    BOOST_REQUIRE(restored.has_value());
    BOOST_TEST(restored.value().size() == originals.size() + 1);
    for (const auto& [key, original] : originals) {
        const auto back = restored.value().get<tb>(ruda::param_id{key});
        BOOST_REQUIRE(back.has_value());
        const auto& tensor = std::get<tb::float_tensor>(*back).get();
        BOOST_TEST(same_bytes(tensor, original), "parameter " << key << ", " << original.dtype());
    }
    const auto q_back = restored.value().get<tb>(ruda::param_id{id});
    BOOST_REQUIRE(q_back.has_value());
    const auto& q_tensor = std::get<tb::quantized_tensor>(*q_back).get();
    BOOST_TEST(torch::equal(q_tensor.int_repr(), q.int_repr()));
    BOOST_TEST(q_tensor.q_scale() == q.q_scale());
    BOOST_TEST(q_tensor.q_zero_point() == 0);
}

BOOST_AUTO_TEST_SUITE_END()
