// A rank killed (SIGKILL) in the middle of a save, and the restart after it, run by
// kill_during_save.sh as two mpirun jobs of 2 ranks sharing a directory:
//   kill_during_save save DIR     commits step 1, then rank 1 dies while writing step 2;
//   kill_during_save restart DIR  finds step 1 as "latest", restores it bit for bit, and its
//                                 next save commits and removes step 2's partial directory.
// Exit status 0 when every check holds; the save job itself must not succeed.
#include <ruda/dist/dist_checkpoint_manager.hpp>
#include <ruda/dist/mpi.hpp>

#include <run_to_end.hpp>

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>

namespace {

// Kills its own process at the first fsync once armed: a rank lost in the middle of its write.
class dying_ops : public ruda::file_ops {
public:
    bool armed = false;
    ruda::result<void> fsync(int fd) override
    {
        if (armed) {
            ::kill(::getpid(), SIGKILL);
        }
        return ruda::file_ops::fsync(fd);
    }
};

ruda::checkpoint contents(int rank, float value)
{
    std::vector<ruda::gradient_entry> entries{
        {ruda::param_id{1}, ruda::dtype::f32(),
         ruda::tensor_data::from_values(std::vector<float>(1000, value), {1000}).value(), ""},
        {ruda::param_id{2}, ruda::dtype::f32(),
         ruda::tensor_data::from_values(std::vector<float>(3, value + static_cast<float>(rank)),
                                        {3})
             .value(),
         ""}};
    return ruda::checkpoint{ruda::gradients_params_record{std::move(entries)}};
}

const ruda::placement_map where{{ruda::param_id{2}, ruda::placement::rank_local()}};

int fail(int rank, const std::string& why)
{
    std::fprintf(stderr, "kill_during_save, rank %d: %s\n", rank, why.c_str());
    return 1;
}

ruda::result<ruda::saved_checkpoint> save(ruda::dist_checkpoint_manager& manager,
                                          std::uint64_t step, ruda::checkpoint c)
{
    auto pending = examples::run_to_end(manager.async_save_record(step, std::move(c), where));
    if (!pending) {
        return pending.error();
    }
    return pending.value().wait();
}

int save_then_die(ruda::communicator& comm, const std::filesystem::path& dir)
{
    dying_ops ops;
    ruda::dist_checkpoint_manager manager{comm, dir, {.ops = &ops}};
    if (auto saved = save(manager, 1, contents(comm.rank(), 1.0F)); !saved) {
        return fail(comm.rank(), saved.error().message());
    }
    ops.armed = comm.rank() == 1;
    const auto second = save(manager, 2, contents(comm.rank(), 2.0F));
    // Rank 1 is dead by now; rank 0 must not have committed (mpirun usually ends it first).
    return fail(comm.rank(), second ? "step 2 committed without rank 1"
                                    : "step 2 failed: " + second.error().message());
}

int restart(ruda::communicator& comm, const std::filesystem::path& dir)
{
    const int rank = comm.rank();
    ruda::dist_checkpoint_manager manager{comm, dir};
    if (manager.latest_step().value() != std::optional<std::uint64_t>{1}) {
        return fail(rank, "\"latest\" does not name step 1");
    }
    if (!std::filesystem::exists(dir / "step-00000000000000000002") ||
        std::filesystem::exists(dir / "step-00000000000000000002/manifest.ruda")) {
        return fail(rank, "step 2 should be a partial directory, without a manifest");
    }
    auto restored = examples::run_to_end(manager.load_latest());
    if (!restored) {
        return fail(rank, restored.error().message());
    }
    if (!(restored.value().contents.gradients() == contents(rank, 1.0F).gradients())) {
        return fail(rank, "step 1 did not come back bit for bit");
    }
    if (auto saved = save(manager, 3, contents(rank, 3.0F)); !saved) {
        return fail(rank, saved.error().message());
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (std::filesystem::exists(dir / "step-00000000000000000002")) {
        return fail(rank, "the next save left step 2's partial directory");
    }
    if (manager.steps().value() != std::vector<std::uint64_t>{1, 3}) {
        return fail(rank, "steps 1 and 3 should be the committed ones");
    }
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int status = 2;
    {
        auto comm = ruda::mpi_communicator::create(MPI_COMM_WORLD, {std::chrono::seconds(30)});
        if (!comm) {
            status = fail(-1, comm.error().message());
        } else if (argc == 3 && std::strcmp(argv[1], "save") == 0) {
            status = save_then_die(*comm.value(), argv[2]);
        } else if (argc == 3 && std::strcmp(argv[1], "restart") == 0) {
            status = restart(*comm.value(), argv[2]);
        } else {
            std::fprintf(stderr, "usage: kill_during_save save|restart DIR\n");
        }
    }
    MPI_Finalize();
    return status;
}
