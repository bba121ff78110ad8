// A consumer of ruda::mpi: a world of this process alone, one all-gather through ruda.
#include <ruda/dist/mpi.hpp>
#include <ruda/ruda.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <cstdio>

namespace {

boost::asio::awaitable<void> gather_once(ruda::communicator& comm, bool& ok)
{
    const ruda::byte_buffer mine(3, 7); // no braced list in a coroutine: GCC 12 rejects it
    auto all = co_await comm.all_gather(mine);
    ok = all && all.value().size() == 1 && all.value()[0] == mine;
}

} // namespace

int main(int argc, char** argv)
{
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    bool ok = false;
    {
        auto comm = ruda::mpi_communicator::create(MPI_COMM_WORLD);
        if (comm) {
            boost::asio::io_context io;
            boost::asio::co_spawn(io, gather_once(*comm.value(), ok), boost::asio::detached);
            io.run();
        }
    }
    std::printf("ruda mpi consumer: %s\n", ok ? "ok" : "failed");
    MPI_Finalize();
    return ok ? 0 : 1;
}
