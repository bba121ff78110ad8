// expect: basic_result
// co_spawn of to_record_async: Asio 1.81 default-constructs the value on its exception path,
// and ruda::result has no default. async_snapshot is the way to a completion token.
#include <ruda/ruda.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

int main()
{
    boost::asio::io_context io;
    const ruda::gradients_params grads;
    auto future = boost::asio::co_spawn(io, grads.to_record_async<ruda::cpu_backend>(),
                                        boost::asio::use_future);
    io.run();
    return future.get() ? 0 : 1;
}
