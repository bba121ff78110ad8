// The Boost.Test module of the MPI suites, run by every rank under mpirun (1, 2 and 4 ranks).
#define BOOST_TEST_MODULE ruda_mpi
#include "mpi_test_support.hpp"

#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <cstdlib>

namespace {

// MPI for the whole run, with the thread level ruda's communicator needs.
struct mpi_session {
    mpi_session()
    {
        int provided = 0;
        MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
        if (provided < MPI_THREAD_MULTIPLE) {
            std::fprintf(stderr, "this MPI provides thread level %d, not MPI_THREAD_MULTIPLE\n",
                         provided);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    ~mpi_session() { MPI_Finalize(); }
    mpi_session(const mpi_session&) = delete;
    mpi_session& operator=(const mpi_session&) = delete;
};

} // namespace

BOOST_TEST_GLOBAL_FIXTURE(mpi_session);
