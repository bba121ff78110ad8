// expect: 2 names provided
// as_tuple gives a one-element tuple of the result: there is no error_code to bind.
#include <ruda/ruda.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

boost::asio::awaitable<void> snapshot(const ruda::gradients_params& grads)
{
    auto [ec, record] = co_await ruda::async_snapshot<ruda::cpu_backend>(
        grads, boost::asio::as_tuple(boost::asio::use_awaitable));
    static_cast<void>(ec);
    static_cast<void>(record);
}

int main()
{
    boost::asio::io_context io;
    const ruda::gradients_params grads;
    boost::asio::co_spawn(io, snapshot(grads), boost::asio::detached);
    io.run();
}
