// cpu_backend: shared immutable storage, the five float dtypes and quantized data, dtype
// checks on upload and cast, and a cancelled read.
#include "../support/async_test.hpp"

#include <ruda/backend/cpu_backend.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/test/unit_test.hpp>

namespace {

using ruda::errc;
using cpu = ruda::cpu_backend;

ruda::tensor_data f32_data(std::vector<float> values)
{
    const std::size_t n = values.size();
    return ruda::tensor_data::from_values(std::move(values), {n}).value();
}

ruda::tensor_data q8_data()
{
    const ruda::quant_scheme scheme{};
    // 4 int8 values followed by one f32 scale: the native per-tensor layout.
    std::vector<std::uint8_t> bytes{1, 2, 3, 4, 0, 0, 128, 63};
    return {std::move(bytes), {4}, ruda::dtype::qfloat(scheme)};
}

// Waits on a long timer (so a cancel can arrive while suspended), then reads.
boost::asio::awaitable<ruda::result<ruda::tensor_data>> read_after_wait(cpu::float_tensor tensor)
{
    co_await boost::asio::this_coro::throw_if_cancelled(false);
    boost::asio::steady_timer timer{co_await boost::asio::this_coro::executor,
                                    std::chrono::seconds(30)};
    co_await timer.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
    co_return co_await cpu::float_into_data(std::move(tensor));
}

} // namespace

BOOST_AUTO_TEST_SUITE(backend_cpu)

BOOST_AUTO_TEST_CASE(models_the_backend_concept)
{
    static_assert(ruda::backend<cpu>);
    BOOST_TEST(cpu::name() == "cpu");
    BOOST_TEST(cpu::blocking_reads(cpu::device{}));
    BOOST_TEST((cpu::float_device(cpu::float_from_data(f32_data({1}), {}).value()) ==
                cpu::device{}));
}

BOOST_AUTO_TEST_CASE(a_copy_shares_storage_and_a_write_makes_a_new_one)
{
    auto tensor = cpu::float_from_data(f32_data({1, 2}), {}).value();
    const auto snapshot = tensor;
    BOOST_TEST(snapshot.shares_storage_with(tensor));
    tensor = cpu::float_from_data(f32_data({9, 9}), {}).value(); // the trainer writes
    BOOST_TEST(!snapshot.shares_storage_with(tensor));
    BOOST_TEST(snapshot.data().values<float>().value()[0] == 1.0F);
}

BOOST_AUTO_TEST_CASE(reads_every_float_dtype_and_quantized_data)
{
    boost::asio::io_context io;
    for (const auto target : {ruda::dtype::f64(), ruda::dtype::f32(), ruda::dtype::flex32(),
                              ruda::dtype::f16(), ruda::dtype::bf16()}) {
        // Flex32 shares f32's bytes; convert() would keep f32 as the dtype.
        const auto data = target == ruda::dtype::flex32()
                              ? ruda::tensor_data{f32_data({0.5F, -2.0F, 3.25F}).bytes(), {3},
                                                  target}
                              : f32_data({0.5F, -2.0F, 3.25F}).convert(target).value();
        const auto tensor = cpu::float_from_data(data, {}).value();
        BOOST_TEST(cpu::dtype_of(tensor) == target);
        auto read = ruda::test::run_to_end(io, cpu::float_into_data(tensor));
        BOOST_REQUIRE(read.has_value());
        BOOST_REQUIRE(*read);
        BOOST_TEST(read->value() == data);
        // The read shares the tensor's immutable bytes: a snapshot copies nothing.
        BOOST_TEST(read->value().bytes().shares_memory_with(tensor.data().bytes()));
    }
    const auto quantized = cpu::q_from_data(q8_data(), {}).value();
    BOOST_TEST(cpu::dtype_of(quantized).is_quantized());
    auto read = ruda::test::run_to_end(io, cpu::q_into_data(quantized));
    BOOST_REQUIRE(read.has_value());
    BOOST_REQUIRE(*read);
    BOOST_TEST(read->value() == q8_data());
}

BOOST_AUTO_TEST_CASE(uploads_check_the_dtype)
{
    auto ints = ruda::tensor_data::from_values(std::vector<std::int32_t>{1, 2}, {2}).value();
    auto as_float = cpu::float_from_data(ints, {});
    BOOST_REQUIRE(!as_float);
    BOOST_TEST(as_float.error() == errc::invalid_dtype);
    BOOST_TEST(as_float.error().message().find("i32") != std::string::npos);
    auto as_quantized = cpu::q_from_data(f32_data({1}), {});
    BOOST_REQUIRE(!as_quantized);
    BOOST_TEST(as_quantized.error() == errc::invalid_dtype);
    auto quantized_as_float = cpu::float_from_data(q8_data(), {});
    BOOST_REQUIRE(!quantized_as_float);
    BOOST_TEST(quantized_as_float.error() == errc::invalid_dtype);
}

BOOST_AUTO_TEST_CASE(float_cast_converts_into_a_new_storage)
{
    const auto tensor = cpu::float_from_data(f32_data({1.5F, 2.0F}), {}).value();
    const auto half = cpu::float_cast(tensor, ruda::dtype::f16()).value();
    BOOST_TEST(cpu::dtype_of(half) == ruda::dtype::f16());
    BOOST_TEST(!half.shares_storage_with(tensor));
    BOOST_TEST(half.data().bytes().size() == 4U);
    const auto same = cpu::float_cast(tensor, ruda::dtype::f32()).value();
    BOOST_TEST(same.shares_storage_with(tensor));
    auto to_int = cpu::float_cast(tensor, ruda::dtype::i32());
    BOOST_REQUIRE(!to_int);
    BOOST_TEST(to_int.error() == errc::invalid_dtype);
}

BOOST_AUTO_TEST_CASE(a_cancelled_read_reports_cancelled)
{
    const auto tensor = cpu::float_from_data(f32_data({1}), {}).value();
    boost::asio::io_context io;
    boost::asio::cancellation_signal cancel;
    auto out = ruda::test::spawn(io, read_after_wait(tensor), &cancel);
    io.run_for(std::chrono::milliseconds(10)); // reaches the timer
    BOOST_REQUIRE(!out->done);
    cancel.emit(boost::asio::cancellation_type::terminal); // while the timer is pending
    BOOST_REQUIRE(ruda::test::run_until(io, [&] { return out->done.load(); }));
    BOOST_REQUIRE(out->value.has_value());
    BOOST_REQUIRE(!*out->value);
    BOOST_TEST(out->value->error() == errc::cancelled);
    BOOST_TEST(out->value->error().message().find("cpu backend") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
