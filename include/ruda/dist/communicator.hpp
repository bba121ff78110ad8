// The collectives a distributed checkpoint needs, and nothing else: rank, size, barrier,
// broadcast, all-gather of bytes and agreement on success. `mpi_communicator` (in ruda::mpi,
// <ruda/dist/mpi.hpp>) runs them over MPI; `solo_communicator` is the world of one process.
#pragma once

#include <ruda/error.hpp>

#include <boost/asio/awaitable.hpp>

#include <cstdint>
#include <vector>

namespace ruda {

using byte_buffer = std::vector<std::uint8_t>;

/// Every call is collective: every rank makes the same calls in the same order, one at a time.
/// A call never blocks the caller's executor, honours the coroutine's cancellation and the
/// implementation's deadline (`errc::cancelled`, `errc::timed_out`), and an implementation may
/// refuse every later call after one of those (a collective left half done cannot be reused).
class communicator {
public:
    communicator() = default;
    communicator(const communicator&) = delete;
    communicator& operator=(const communicator&) = delete;
    virtual ~communicator() = default;

    [[nodiscard]] virtual int rank() const noexcept = 0;
    [[nodiscard]] virtual int size() const noexcept = 0;

    /// Completes once every rank has called it.
    virtual boost::asio::awaitable<result<void>> barrier() = 0;
    /// `root`'s bytes, on every rank (the others' `bytes` are ignored).
    virtual boost::asio::awaitable<result<byte_buffer>> broadcast(byte_buffer bytes, int root) = 0;
    /// Every rank's bytes, indexed by rank.
    virtual boost::asio::awaitable<result<std::vector<byte_buffer>>>
    all_gather(byte_buffer bytes) = 0;
    /// Whether every rank passed `ok`.
    virtual boost::asio::awaitable<result<bool>> agree(bool ok) = 0;
};

/// The world of one: rank 0 of 1. Every collective completes at once.
class solo_communicator final : public communicator {
public:
    [[nodiscard]] int rank() const noexcept override { return 0; }
    [[nodiscard]] int size() const noexcept override { return 1; }
    boost::asio::awaitable<result<void>> barrier() override;
    boost::asio::awaitable<result<byte_buffer>> broadcast(byte_buffer bytes, int root) override;
    boost::asio::awaitable<result<std::vector<byte_buffer>>> all_gather(byte_buffer bytes) override;
    boost::asio::awaitable<result<bool>> agree(bool ok) override;
};

} // namespace ruda
