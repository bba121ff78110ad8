// The MPI communicator, in the optional ruda::mpi library (pkg-config ruda-mpi): the only ruda
// header that includes <mpi.h>.
#pragma once

#include <ruda/dist/communicator.hpp>
#include <ruda/error.hpp>

// The C API only: MPI's C++ bindings were removed in MPI-3, and Open MPI's still warn.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <chrono>
#include <memory>

namespace ruda {

struct mpi_options {
    /// How long one collective may take before it fails with `errc::timed_out` (a peer that
    /// hangs, or never calls it). The communicator refuses every later call after that.
    std::chrono::milliseconds timeout{std::chrono::minutes{10}};
    /// How often an unfinished collective is tested; the wait between tests grows from a tenth
    /// of this to this.
    std::chrono::microseconds poll_interval{1000};
};

/// Collectives over a duplicate of an MPI communicator, so that checkpoint traffic never mixes
/// with the trainer's; an MPI error on it fails the collective (`MPI_ERRORS_RETURN`) instead of
/// aborting the job. Each collective is non-blocking MPI (`MPI_Iallgather`, `MPI_Ibcast`,
/// `MPI_Ibarrier`, `MPI_Iallreduce`), started and tested on the communicator's own progress
/// thread, never on the caller's executor, and completes into the caller's coroutine. A
/// cancelled or timed-out collective cannot be taken back (MPI has no such call), so it is left
/// to finish on its own and every later call fails with the same error; such a communicator's
/// buffers and duplicate are let go only if it finishes before the destructor runs.
///
/// MPI must be initialised with `MPI_THREAD_MULTIPLE` (`create` checks): the trainer's own
/// MPI calls and the progress thread's run at once.
class mpi_communicator final : public communicator {
public:
    /// Duplicates `comm` (collective over `comm`).
    [[nodiscard]] static result<std::unique_ptr<mpi_communicator>> create(MPI_Comm comm,
                                                                          mpi_options options = {});
    ~mpi_communicator() override;

    [[nodiscard]] int rank() const noexcept override;
    [[nodiscard]] int size() const noexcept override;
    boost::asio::awaitable<result<void>> barrier() override;
    boost::asio::awaitable<result<byte_buffer>> broadcast(byte_buffer bytes, int root) override;
    boost::asio::awaitable<result<std::vector<byte_buffer>>> all_gather(byte_buffer bytes) override;
    boost::asio::awaitable<result<bool>> agree(bool ok) override;

    /// The duplicate the collectives run on.
    [[nodiscard]] MPI_Comm native() const noexcept;

private:
    struct impl;
    explicit mpi_communicator(std::unique_ptr<impl> state);
    std::unique_ptr<impl> impl_;
};

} // namespace ruda
