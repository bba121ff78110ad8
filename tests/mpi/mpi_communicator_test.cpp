#include "../support/error_text.hpp"
#include "mpi_test_support.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/steady_timer.hpp>

#include <thread>
#include <vector>

using ruda::errc;
using ruda::test::world_rank;
using ruda::test::says;
using ruda::test::world_size;

BOOST_AUTO_TEST_SUITE(mpi_communicator)

BOOST_AUTO_TEST_CASE(collectives_carry_every_ranks_bytes)
{
    ruda::test::watchdog guard{"mpi collectives", std::chrono::seconds(90)};
    auto comm = ruda::test::communicator_over(MPI_COMM_WORLD);
    const int rank = world_rank();
    const int size = world_size();
    BOOST_TEST(comm->rank() == rank);
    BOOST_TEST(comm->size() == size);

    // Rank r sends 3r bytes of value r: zero bytes from rank 0.
    const ruda::byte_buffer mine(static_cast<std::size_t>(3 * rank),
                                 static_cast<std::uint8_t>(rank));
    const auto all = ruda::test::run_collective(comm->all_gather(mine));
    BOOST_REQUIRE(all);
    BOOST_REQUIRE(all.value().size() == static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r) {
        BOOST_TEST(
            (all.value()[static_cast<std::size_t>(r)] ==
             ruda::byte_buffer(static_cast<std::size_t>(3 * r), static_cast<std::uint8_t>(r))));
    }

    const int root = size - 1;
    const auto told = ruda::test::run_collective(comm->broadcast(
        rank == root ? ruda::byte_buffer{1, 2, 3, 4, 5} : ruda::byte_buffer{}, root));
    BOOST_REQUIRE(told);
    BOOST_TEST((told.value() == ruda::byte_buffer{1, 2, 3, 4, 5}));
    BOOST_TEST((ruda::test::run_collective(comm->broadcast({}, size)).error().code() ==
                std::errc::invalid_argument));

    BOOST_TEST(ruda::test::run_collective(comm->agree(true)).value());
    BOOST_TEST(!ruda::test::run_collective(comm->agree(rank != root)).value());
    BOOST_TEST(ruda::test::run_collective(comm->barrier()).has_value());
}

BOOST_AUTO_TEST_CASE(a_peer_that_never_joins_times_out_and_a_cancel_ends_the_wait)
{
    ruda::test::watchdog guard{"mpi deadline", std::chrono::seconds(90)};
    if (world_size() < 2) {
        BOOST_TEST_MESSAGE("needs 2 ranks: a peer to wait for");
        return;
    }
    using namespace std::chrono_literals;
    // Rank 0 waits 300 ms for a barrier the others join only after 1.5 s.
    {
        auto comm = ruda::test::communicator_over(MPI_COMM_WORLD, 300ms);
        if (world_rank() == 0) {
            const auto started = std::chrono::steady_clock::now();
            const auto waited = ruda::test::run_collective(comm->barrier());
            BOOST_REQUIRE(!waited);
            BOOST_TEST(waited.error() == errc::timed_out);
            BOOST_TEST(says(waited.error(), "did not complete within 300 ms"));
            BOOST_TEST((std::chrono::steady_clock::now() - started < 1400ms));
            // The communicator refuses from now on, at once.
            const auto again = ruda::test::run_collective(comm->agree(true));
            BOOST_TEST(again.error() == errc::timed_out);
            BOOST_TEST(says(again.error(), "cannot be used again"));
        } else {
            std::this_thread::sleep_for(1500ms);
            BOOST_TEST(ruda::test::run_collective(comm->barrier()).has_value());
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    // Rank 0 cancels its wait after 100 ms.
    {
        auto comm = ruda::test::communicator_over(MPI_COMM_WORLD);
        if (world_rank() == 0) {
            boost::asio::io_context io;
            boost::asio::cancellation_signal cancel;
            auto out = ruda::test::spawn(io, comm->barrier(), &cancel);
            boost::asio::steady_timer timer{io, 100ms};
            timer.async_wait([&cancel](boost::system::error_code) {
                cancel.emit(boost::asio::cancellation_type::terminal);
            });
            BOOST_REQUIRE(ruda::test::run_until(io, [&] { return out->done.load(); }));
            BOOST_REQUIRE(out->value.has_value());
            BOOST_TEST(out->value->error() == errc::cancelled);
        } else {
            std::this_thread::sleep_for(1000ms);
            BOOST_TEST(ruda::test::run_collective(comm->barrier()).has_value());
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
}

BOOST_AUTO_TEST_SUITE_END()
