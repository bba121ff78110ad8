// A consumer of ruda::mpi: a world of this process alone, one all-gather through ruda.
#include <ruda/dist/mpi.hpp>
#include <ruda/ruda.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <cstdio>

int main(int argc, char** argv)
{
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int status = 1;
    {
        auto comm = ruda::mpi_communicator::create(MPI_COMM_WORLD);
        if (comm) {
            boost::asio::io_context io;
            boost::asio::co_spawn(
                io,
                [&]() -> boost::asio::awaitable<void> {
                    auto all = co_await comm.value()->all_gather({1, 2, 3});
                    status = all && all.value().size() == 1 && all.value()[0].size() == 3 ? 0 : 1;
                },
                boost::asio::detached);
            io.run();
        }
        std::printf("consumer_mpi: %s\n", status == 0 ? "ok" : "failed");
    }
    MPI_Finalize();
    return status;
}
