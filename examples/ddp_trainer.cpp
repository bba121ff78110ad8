// The data-parallel trainer: the MLP of the other examples trained on every rank of an MPI job.
// Each rank takes its share of every micro-batch and accumulates its own gradients; at the end
// of each window the ranks all-reduce them (MPI_Allreduce) and take the same optimizer step.
// Every K steps, in the middle of a window, `dist_checkpoint_manager` saves the weights
// (replicated: written once, spread over the ranks), each rank's accumulated gradients
// (rank_local) and the position; the loop is blocked only until the save is staged.
// Then it checks, and exits non-zero unless both hold:
//   1. a restart on the same number of ranks from the latest checkpoint ends training with
//      weights bit-identical to the uninterrupted run;
//   2. a checkpoint taken at a window boundary restores onto one rank fewer (the weights bit for
//      bit, the empty windows summed), and training goes on there.
//
//   mpirun -np 3 ddp_trainer [--steps N] [--checkpoint-every K] [--dir DIR]
#include "common/arguments.hpp"
#include "common/checkpoint_dir.hpp"
#include "common/mlp.hpp"
#include "common/run_to_end.hpp"

#include <ruda/dist/mpi.hpp>
#include <ruda/ruda.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

constexpr std::uint64_t weight_id_offset = 100; // weights go in as ids 101..104

struct options {
    std::uint64_t steps = 24;
    std::uint64_t checkpoint_every = 6;
    std::optional<fs::path> dir;
};

// One rank's part of the training: the model (the same on every rank after each step), its own
// accumulated gradients and where training stands.
struct rank_trainer {
    rank_trainer(MPI_Comm world, const mlp::config& config)
        : comm(world), c(config), data(config), m(mlp::init(config))
    {
        MPI_Comm_rank(comm, &rank);
        MPI_Comm_size(comm, &ranks);
        // The same ids on every rank: they key the checkpoint's gradients.
        for (std::size_t k = 0; k < m.params.size(); ++k) {
            m.params[k].id = k + 1;
        }
    }

    // This rank's share of the next micro-batch; the all-reduce and the step end a window.
    float train_micro_batch()
    {
        const mlp::batch full = data.micro_batch(at.step * c.accumulate + at.micro_batch);
        const auto share = ruda::even_shard(c.batch, rank, ranks);
        const auto rows = [&](const std::vector<float>& all, std::size_t width) {
            return std::vector<float>(all.begin() + static_cast<long>(share.offset * width),
                                      all.begin() + static_cast<long>(share.end() * width));
        };
        const float loss =
            mlp::accumulate_gradients(c, m, {rows(full.x, c.inputs), rows(full.y, c.outputs)});
        if (++at.micro_batch == c.accumulate) {
            for (mlp::parameter& p : m.params) {
                MPI_Allreduce(MPI_IN_PLACE, p.grad.data(), static_cast<int>(p.grad.size()),
                              MPI_FLOAT, MPI_SUM, comm);
            }
            mlp::sgd_step(c, m);
            ++at.step;
            at.micro_batch = 0;
        }
        return loss;
    }

    // The gradients and weights as tensors, the position as a section.
    ruda::gradients_params gradients_and_weights() const
    {
        ruda::gradients_params grads;
        mlp::publish_gradients<ruda::cpu_backend>(m, grads, {});
        for (const mlp::parameter& p : m.params) {
            auto weights = ruda::tensor_data::from_values(p.value, ruda::shape(p.shape)).value();
            grads.insert<ruda::cpu_backend>(
                ruda::param_id{weight_id_offset + p.id},
                ruda::cpu_backend::float_from_data(std::move(weights), {}).value());
        }
        return grads;
    }

    ruda::placement_map placements() const
    {
        ruda::placement_map where;
        for (const mlp::parameter& p : m.params) {
            where[ruda::param_id{p.id}] = ruda::placement::rank_local();
        }
        return where; // the weights take the default: replicated
    }

    // Takes weights, gradients and position from a restored checkpoint.
    bool restore(const ruda::checkpoint& contents)
    {
        std::size_t found = 0;
        for (const ruda::gradient_entry& e : contents.gradients().entries()) {
            for (mlp::parameter& p : m.params) {
                const bool weight = e.id == ruda::param_id{weight_id_offset + p.id};
                if (!weight && e.id != ruda::param_id{p.id}) {
                    continue;
                }
                const auto values = e.data.values<float>();
                if (!values || values.value().size() != p.value.size()) {
                    return false;
                }
                (weight ? p.value : p.grad).assign(values.value().begin(), values.value().end());
                ++found;
            }
        }
        return found == 2 * m.params.size() && contents.get("position", at).has_value();
    }

    MPI_Comm comm;
    int rank = 0;
    int ranks = 1;
    mlp::config c;
    mlp::dataset data;
    mlp::model m;
    mlp::position at;
};

bool everywhere(bool ok, MPI_Comm comm)
{
    int mine = ok ? 1 : 0;
    int all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_LAND, comm);
    return all != 0;
}

double max_over_ranks(double value, MPI_Comm comm)
{
    double most = 0;
    MPI_Allreduce(&value, &most, 1, MPI_DOUBLE, MPI_MAX, comm);
    return most;
}

int fail(int rank, const std::string& why)
{
    std::fprintf(stderr, "ddp_trainer, rank %d: %s\n", rank, why.c_str());
    return 1;
}

std::optional<options> parse(int argc, char** argv)
{
    options o;
    examples::arguments args;
    args.option("--steps", o.steps)
        .option("--checkpoint-every", o.checkpoint_every)
        .option("--dir", o.dir);
    if (!args.parse(argc, argv) || o.steps < 2 || o.checkpoint_every == 0) {
        return std::nullopt;
    }
    return o;
}

// The job: train with checkpoints, then the two restores. Returns the exit status.
int train(const options& o, const fs::path& dir)
{
    int rank = 0;
    int ranks = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    const mlp::config config{};
    // A communicator of its own for each manager: their collectives run concurrently.
    auto for_mid_window = ruda::mpi_communicator::create(MPI_COMM_WORLD);
    auto for_boundary = ruda::mpi_communicator::create(MPI_COMM_WORLD);
    if (!for_mid_window || !for_boundary) {
        return fail(rank, "no MPI communicator for the checkpoints");
    }
    ruda::dist_checkpoint_manager mid_window{*for_mid_window.value(), dir / "mid-window"};
    ruda::dist_checkpoint_manager boundary{*for_boundary.value(), dir / "boundary"};

    // 1. The uninterrupted run, with checkpoints.
    rank_trainer run1{MPI_COMM_WORLD, config};
    std::optional<ruda::pending_save> pending; // one save in flight, whichever manager's
    std::optional<mlp::model> at_boundary;
    double most_blocked_ms = 0;
    int checkpoints = 0;
    std::uint64_t bytes_written = 0;
    // Waits for the save in flight, if any, and counts its bytes; false if it failed.
    const auto finish_pending = [&]() -> bool {
        if (!pending) {
            return true;
        }
        const auto saved = pending->wait();
        pending.reset();
        bytes_written += saved ? saved.value().bytes : 0;
        return saved.has_value();
    };
    const auto save = [&](ruda::dist_checkpoint_manager& manager) -> bool {
        ruda::checkpoint state;
        // The other manager's save may still be committing.
        if (!state.put("position", run1.at) || !finish_pending()) {
            return false;
        }
        const auto started = clock_type::now();
        auto staged = examples::run_to_end(manager.async_save<ruda::cpu_backend>(
            run1.at.step * config.accumulate + run1.at.micro_batch, run1.gradients_and_weights(),
            run1.placements(), std::move(state)));
        const std::chrono::duration<double, std::milli> blocked = clock_type::now() - started;
        most_blocked_ms = std::max(most_blocked_ms, blocked.count());
        if (!staged) {
            fail(rank, staged.error().message());
            return false;
        }
        pending = staged.value();
        ++checkpoints;
        return true;
    };
    bool ok = true;
    while (ok && run1.at.step < o.steps) {
        run1.train_micro_batch();
        if (run1.at.step == o.steps / 2 && run1.at.micro_batch == 0 && !at_boundary) {
            at_boundary = run1.m;
            ok = save(boundary);
        } else if (run1.at.step % o.checkpoint_every == 0 && run1.at.step != 0 &&
                   run1.at.micro_batch == config.accumulate / 2) {
            ok = save(mid_window);
        }
        if (ok && pending && pending->done()) {
            ok = finish_pending();
        }
    }
    ok = ok && finish_pending();
    if (!everywhere(ok, MPI_COMM_WORLD)) {
        return fail(rank, "the training run with checkpoints failed");
    }
    most_blocked_ms = max_over_ranks(most_blocked_ms, MPI_COMM_WORLD);
    std::vector<unsigned long long> bytes(static_cast<std::size_t>(ranks));
    unsigned long long mine = bytes_written;
    MPI_Gather(&mine, 1, MPI_UNSIGNED_LONG_LONG, bytes.data(), 1, MPI_UNSIGNED_LONG_LONG, 0,
               MPI_COMM_WORLD);
    if (rank == 0) {
        std::printf("ddp_trainer: %d ranks, %llu steps of %zu micro-batches, %d checkpoints; "
                    "the loop was blocked at most %.2f ms by one\n",
                    ranks, static_cast<unsigned long long>(o.steps), config.accumulate, checkpoints,
                    most_blocked_ms);
        for (int r = 0; r < ranks; ++r) {
            std::printf("  rank %d wrote %llu bytes\n", r, bytes[static_cast<std::size_t>(r)]);
        }
    }

    // 2. A restart from the latest checkpoint, on the same ranks.
    rank_trainer run2{MPI_COMM_WORLD, config};
    const auto latest = examples::run_to_end(mid_window.load_latest());
    if (!latest) {
        return fail(rank, latest.error().message());
    }
    if (!everywhere(run2.restore(latest.value().contents), MPI_COMM_WORLD)) {
        return fail(rank, "the latest checkpoint does not hold this model's state");
    }
    const auto resumed_at = run2.at;
    while (run2.at.step < o.steps) {
        run2.train_micro_batch();
    }
    if (!everywhere(mlp::same_bits(run1.m, run2.m), MPI_COMM_WORLD)) {
        return fail(rank, "the resumed run's weights differ from the uninterrupted run's");
    }
    if (rank == 0) {
        std::printf("resumed from step %llu, micro-batch %llu on %d ranks: weights "
                    "bit-identical to the uninterrupted run\n",
                    static_cast<unsigned long long>(resumed_at.step),
                    static_cast<unsigned long long>(resumed_at.micro_batch), ranks);
    }

    // 3. The window-boundary checkpoint, onto one rank fewer.
    if (ranks < 2) {
        std::printf("one rank: no smaller world to restore onto (run with -np 2 or more)\n");
        return 0;
    }
    MPI_Comm fewer = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, rank < ranks - 1 ? 0 : MPI_UNDEFINED, rank, &fewer);
    int status = 0;
    if (fewer != MPI_COMM_NULL) {
        auto smaller = ruda::mpi_communicator::create(fewer);
        if (!smaller) {
            return fail(rank, smaller.error().message());
        }
        ruda::dist_checkpoint_manager on_fewer{*smaller.value(), dir / "boundary"};
        ruda::dist_restore_options sum;
        sum.sum_rank_local = true; // the windows are empty at a boundary: the sum is zero
        const auto restored = examples::run_to_end(on_fewer.load_latest(sum));
        rank_trainer run3{fewer, config};
        bool fine = restored && run3.restore(restored.value().contents) &&
                    mlp::same_bits(run3.m, *at_boundary);
        float loss = 0;
        for (std::size_t i = 0; fine && i < 2 * config.accumulate; ++i) {
            loss = run3.train_micro_batch();
        }
        if (!everywhere(fine, fewer)) {
            status = fail(rank, restored ? "the boundary checkpoint did not restore on fewer ranks"
                                         : restored.error().message());
        } else if (rank == 0) {
            std::printf("restored step %llu onto %d ranks: weights bit-identical, 2 more steps "
                        "trained (loss %.5f)\n",
                        static_cast<unsigned long long>(run3.at.step - 2), ranks - 1,
                        static_cast<double>(loss));
        }
        smaller.value().reset();
        MPI_Comm_free(&fewer);
    }
    return everywhere(status == 0, MPI_COMM_WORLD) ? 0 : 1;
}

} // namespace

int main(int argc, char** argv)
{
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int status = 2;
    const auto o = parse(argc, argv);
    if (!o) {
        std::fprintf(
            stderr,
            "usage: mpirun -np N ddp_trainer [--steps N] [--checkpoint-every K] [--dir DIR]\n");
    } else {
        {
            int rank = 0;
            MPI_Comm_rank(MPI_COMM_WORLD, &rank);
            // Rank 0's directory is everyone's: the ranks share one file system here.
            std::optional<examples::checkpoint_dir> dir;
            std::string path;
            if (rank == 0) {
                dir.emplace(o->dir, "ruda-ddp");
                path = dir->ok() ? dir->path().string() : "";
            }
            unsigned long length = path.size();
            MPI_Bcast(&length, 1, MPI_UNSIGNED_LONG, 0, MPI_COMM_WORLD);
            path.resize(length);
            MPI_Bcast(path.data(), static_cast<int>(length), MPI_CHAR, 0, MPI_COMM_WORLD);
            status = path.empty() ? 1 : train(*o, path);
            MPI_Barrier(MPI_COMM_WORLD); // nobody uses the directory when rank 0 removes it
        }
    }
    MPI_Finalize();
    return status;
}
