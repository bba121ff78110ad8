// What the MPI suites share: the world's rank and size, a communicator per test, a directory
// every rank sees, and a runner with a time limit.
#pragma once

#include <ruda/dist/mpi.hpp>

#include "../checkpoint/checkpoint_test_support.hpp"
#include "../support/async_test.hpp"

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

namespace ruda::test {

inline int world_rank()
{
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
}

inline int world_size()
{
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    return size;
}

/// A ruda communicator over `comm`, with a deadline that ends a test whose peer is lost.
inline std::unique_ptr<mpi_communicator>
communicator_over(MPI_Comm comm, std::chrono::milliseconds timeout = std::chrono::seconds(30))
{
    auto made = mpi_communicator::create(comm, {timeout, std::chrono::microseconds(500)});
    BOOST_REQUIRE(made);
    return std::move(made).value();
}

/// A temporary directory that rank 0 makes and every rank uses; removed by rank 0 when done.
class shared_dir {
public:
    shared_dir()
    {
        std::string path;
        if (world_rank() == 0) {
            path = (dir_.path()).string();
        }
        unsigned long length = path.size();
        MPI_Bcast(&length, 1, MPI_UNSIGNED_LONG, 0, MPI_COMM_WORLD);
        path.resize(length);
        MPI_Bcast(path.data(), static_cast<int>(length), MPI_CHAR, 0, MPI_COMM_WORLD);
        path_ = path;
    }
    ~shared_dir() { MPI_Barrier(MPI_COMM_WORLD); } // nobody still uses it when rank 0 removes it
    shared_dir(const shared_dir&) = delete;
    shared_dir& operator=(const shared_dir&) = delete;
    [[nodiscard]] const std::filesystem::path& path() const { return path_; }
    [[nodiscard]] std::filesystem::path operator/(const std::string& name) const
    {
        return path_ / name;
    }

private:
    temp_dir dir_; // made on every rank, used on rank 0 only
    std::filesystem::path path_;
};

/// Runs `op` to its end, failing the test if it takes longer than a minute.
template <class T>
result<T> run_collective(boost::asio::awaitable<result<T>> op)
{
    boost::asio::io_context io;
    auto out = run_to_end(io, std::move(op), std::chrono::milliseconds(60000));
    BOOST_REQUIRE(out.has_value());
    return std::move(*out);
}

} // namespace ruda::test
