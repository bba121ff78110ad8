// expect: there is no error_code for redirect_error to redirect
// redirect_error would leave `ec` clear on a failed snapshot: refused at compile time.
#include <ruda/ruda.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

boost::asio::awaitable<void> snapshot(const ruda::gradients_params& grads)
{
    boost::system::error_code ec;
    auto record = co_await ruda::async_snapshot<ruda::cpu_backend>(
        grads, boost::asio::redirect_error(boost::asio::use_awaitable, ec));
    static_cast<void>(record);
}

int main()
{
    boost::asio::io_context io;
    const ruda::gradients_params grads;
    boost::asio::co_spawn(io, snapshot(grads), boost::asio::detached);
    io.run();
}
