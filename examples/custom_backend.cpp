// A backend of your own: the ten static calls `ruda::backend` asks for, here for tensors in
// host memory whose reads take a while (a timer), as a device's copies would. A read honours
// cancellation through Asio's per-operation slot; the snapshot's limits, progress and errors
// then come with it, like every other backend's.
#include <ruda/ruda.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include <chrono>
#include <cstdio>
#include <vector>

struct slow_host_backend {
    struct device {};
    using float_tensor = ruda::host_tensor<struct slow_float_tag>;
    using quantized_tensor = ruda::host_tensor<struct slow_quantized_tag>;

    static boost::asio::awaitable<ruda::result<ruda::tensor_data>> read(ruda::tensor_data data)
    {
        boost::asio::steady_timer copy{co_await boost::asio::this_coro::executor,
                                       std::chrono::milliseconds(2)};
        auto [ec] = co_await copy.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
        if (ec) { // cancelled: the snapshot was
            co_return ruda::error{ruda::errc::cancelled, "slow host: read cancelled"};
        }
        co_return data; // shares the immutable bytes
    }
    static auto float_into_data(float_tensor t) { return read(t.data()); }
    static auto q_into_data(quantized_tensor t) { return read(t.data()); }
    static ruda::result<float_tensor> float_from_data(ruda::tensor_data d, const device&)
    {
        return float_tensor{std::move(d)};
    }
    static ruda::result<quantized_tensor> q_from_data(ruda::tensor_data d, const device&)
    {
        return quantized_tensor{std::move(d)};
    }
    static ruda::result<float_tensor> float_cast(const float_tensor& t, ruda::dtype target)
    {
        BOOST_OUTCOME_TRY(auto converted, t.data().convert(target));
        return float_tensor{std::move(converted)};
    }
    static ruda::dtype dtype_of(const float_tensor& t) { return t.get_dtype(); }
    static ruda::dtype dtype_of(const quantized_tensor& t) { return t.get_dtype(); }
    static std::size_t byte_size(const float_tensor& t) { return t.byte_size(); }
    static std::size_t byte_size(const quantized_tensor& t) { return t.byte_size(); }
    static device float_device(const float_tensor&) { return {}; }
    static device q_device(const quantized_tensor&) { return {}; }
    static bool blocking_reads(const device&) { return true; }
    static constexpr std::string_view name() { return "slow host"; }
};
static_assert(ruda::backend<slow_host_backend>);

int main()
{
    using slow = slow_host_backend;
    ruda::gradients_params grads;
    for (std::uint64_t id = 1; id <= 16; ++id) {
        auto values = ruda::tensor_data::from_values(std::vector<float>(8, float(id)), {8});
        grads.insert<slow>(ruda::param_id{id}, slow::float_from_data(values.value(), {}).value());
    }
    boost::asio::io_context io;
    auto future = ruda::async_snapshot<slow>(io.get_executor(), grads, {.max_in_flight = 4},
                                             boost::asio::use_future);
    io.run();
    const auto record = future.get();
    if (!record) {
        std::printf("snapshot failed: %s\n", record.error().message().c_str());
        return 1;
    }
    const auto back = ruda::gradients_params::from_record<slow>(record.value(), {});
    std::printf("%zu gradients through the \"%s\" backend, %zu restored\n",
                record.value().entries().size(), std::string{slow::name()}.c_str(),
                back ? back.value().size() : 0);
    return record.value().entries().size() == 16 && back ? 0 : 1;
}
