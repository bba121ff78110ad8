// The main job: a small MLP trained with gradient accumulation, its accumulated gradients
// living on an asynchronous device (`async_backend`, 2 ms per read). Every N steps, in the
// middle of an accumulation window, a checkpoint coroutine `co_await`s the save of a snapshot
// of them (with the position and the weights as sections) through `checkpoint_manager`: first
// staged in host memory, then durable on disk, written by the manager's own thread, while the
// training loop keeps going. The table shows how long the loop was blocked. Afterwards every
// checkpoint kept is loaded, restored onto a fresh device and compared with the state as it
// was when its snapshot was taken, and training resumed from the latest one must end with
// weights bit-identical to the uninterrupted run. Exits non-zero otherwise.
// --snapshot-every 0 trains without snapshots (the baseline bench/run compares with); --json
// writes the run's figures for bench/run.
//
//   async_trainer [--steps N] [--snapshot-every N] [--latency-ms N] [--dir DIR] [--json PATH]
#include "common/arguments.hpp"
#include "common/checkpoint_dir.hpp"
#include "common/mlp.hpp"
#include "common/progress_table.hpp"

#include <ruda/ruda.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

namespace {

using gpu = ruda::async_backend;
using clock_type = examples::progress_table::clock;
namespace fs = std::filesystem;

struct options {
    std::uint64_t steps = 200;
    std::uint64_t snapshot_every = 10; // 0: never
    long latency_ms = 2;
    std::optional<fs::path> dir; // kept when given; a temporary directory otherwise
    std::optional<std::string> json;

    std::uint64_t report_every() const { return snapshot_every != 0 ? snapshot_every : 10; }
};

// A checkpoint on its way to disk: where training stood and the model, copied when its
// snapshot was taken (their `grad` fields are what the snapshot must hold).
struct checkpoint_job {
    std::uint64_t step;
    mlp::position at;
    mlp::model at_capture;
};

// What the training loop and the checkpoint coroutines share, all on the training thread.
struct checkpoints {
    checkpoints(const boost::asio::any_io_executor& ex, const fs::path& dir)
        : manager(dir, {.keep_last = 5}), finished(ex, clock_type::time_point::max())
    {
    }
    ruda::checkpoint_manager manager;   // writes on its own thread
    boost::asio::steady_timer finished; // cancelled whenever a checkpoint completes
    bool in_flight = false;
    std::uint64_t taken = 0;
    std::uint64_t staged = 0;
    std::uint64_t saved = 0;
    std::vector<checkpoint_job> written; // on disk, with what they must hold
    std::optional<std::string> failure;
};

// Awaits the two completions of one save: staged (the gradients are in host memory) and
// durable (the checkpoint is on disk and "latest" names it).
boost::asio::awaitable<void>
save_checkpoint(boost::asio::awaitable<ruda::result<ruda::pending_save>> staging,
                checkpoint_job job, checkpoints& shared)
{
    auto staged = co_await std::move(staging);
    if (!staged) {
        shared.failure = "snapshot: " + staged.error().message();
    } else {
        ++shared.staged;
        auto saved = co_await staged.value().async_wait(boost::asio::use_awaitable);
        if (!saved) {
            shared.failure = "save: " + saved.error().message();
        } else {
            ++shared.saved;
            shared.written.push_back(std::move(job));
        }
    }
    shared.in_flight = false;
    shared.finished.cancel();
}

// Waits until no checkpoint is in flight.
boost::asio::awaitable<void> wait_idle(checkpoints& shared)
{
    while (shared.in_flight) {
        co_await shared.finished.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
    }
}

struct run_report {
    mlp::model final_model;
    double wall_seconds = 0;
    double blocked_seconds = 0;
};

boost::asio::awaitable<void> train(const mlp::config& c, const options& opts, checkpoints& shared,
                                   run_report& report)
{
    const auto ex = co_await boost::asio::this_coro::executor;
    const ruda::async_device device{{.latency = std::chrono::milliseconds(opts.latency_ms),
                                     .bytes_per_second = 12e9, .concurrent_transfers = 8}};
    const mlp::dataset data{c};
    mlp::model m = mlp::init(c);
    ruda::gradients_params grads;
    mlp::position at;
    double window_loss = 0;
    examples::progress_table table{"snapshots taken", "on disk"};
    while (at.step < opts.steps) {
        window_loss += mlp::train_micro_batch(c, data, m, at);
        mlp::publish_gradients<gpu>(m, grads, device);

        const std::uint64_t current = at.step + 1; // the step this window completes
        if (opts.snapshot_every != 0 && current % opts.snapshot_every == 0 &&
            at.micro_batch == c.accumulate / 2) {
            const auto t0 = clock_type::now();
            co_await wait_idle(shared); // at most one checkpoint in flight
            ruda::checkpoint state;     // the position and the weights, as they are now
            state.put("position", at).value();
            state.put("model", m).value();
            // The gradient handles are captured here; training may change `grads` right after.
            auto staging = shared.manager.async_save<gpu>(at.step, grads, std::move(state), {},
                                                          boost::asio::use_awaitable);
            shared.in_flight = true;
            ++shared.taken;
            boost::asio::co_spawn(ex,
                                  save_checkpoint(std::move(staging), {at.step, at, m}, shared),
                                  [](std::exception_ptr e) {
                                      if (e) {
                                          std::rethrow_exception(e);
                                      }
                                  });
            table.blocked_since(t0);
        }
        if (at.micro_batch == 0) { // a step just completed
            if (at.step % opts.report_every() == 0) {
                table.row(at.step, window_loss / static_cast<double>(c.accumulate), shared.taken,
                          shared.saved);
            }
            window_loss = 0;
        }
        // Let the snapshot's completions run between micro-batches.
        co_await boost::asio::post(ex, boost::asio::use_awaitable);
    }
    table.stop();
    report.wall_seconds = table.wall_seconds();
    report.blocked_seconds = table.blocked_seconds();
    co_await wait_idle(shared); // the last checkpoint reaches the disk
    report.final_model = std::move(m);
}

// Loads a checkpoint, restores its gradients onto a fresh device and reads them back: the
// training state as a restarted trainer would see it.
ruda::result<mlp::training_state> load_state(const ruda::checkpoint_manager& manager,
                                             std::uint64_t step)
{
    BOOST_OUTCOME_TRY(auto loaded, manager.load(step));
    mlp::training_state state;
    BOOST_OUTCOME_TRY(loaded.get("position", state.at));
    BOOST_OUTCOME_TRY(loaded.get("model", state.weights));
    const ruda::async_device device{{.latency = std::chrono::milliseconds(1)}};
    BOOST_OUTCOME_TRY(auto restored, ruda::gradients_params::from_record<gpu>(
                                         std::move(loaded).gradients(), device));
    BOOST_OUTCOME_TRY(auto on_host, restored.try_to_record<gpu>());
    if (!mlp::load_gradients(on_host, state.weights)) {
        return ruda::error{ruda::errc::malformed_record,
                           "checkpoint of step " + std::to_string(step) +
                               ": gradients do not match the parameters"};
    }
    state.gradients = std::move(on_host);
    return state;
}

// Every checkpoint still on disk holds the state exactly as it was when its snapshot was taken
// (training went on changing the gradients while the reads were in flight); resuming from the
// latest one ends bit-identical to the uninterrupted run. Returns the number of failures.
int verify(const mlp::config& c, const options& opts, const checkpoints& shared,
           const run_report& report)
{
    int failures = 0;
    if (shared.failure) {
        std::printf("\ncheckpoint failed: %s\n", shared.failure->c_str());
        ++failures;
    }
    const auto on_disk = shared.manager.steps().value(); // throws (a failure) if unlistable
    examples::print_summary(shared.staged, shared.saved, on_disk.size(),
                            shared.manager.directory(), report.wall_seconds,
                            report.blocked_seconds);

    std::size_t identical = 0;
    std::size_t checked = 0;
    for (const checkpoint_job& job : shared.written) {
        if (std::find(on_disk.begin(), on_disk.end(), job.step) == on_disk.end()) {
            continue; // removed by retention
        }
        ++checked;
        auto loaded = load_state(shared.manager, job.step);
        if (!loaded) {
            std::printf("cannot load step %llu: %s\n", static_cast<unsigned long long>(job.step),
                        loaded.error().message().c_str());
            continue;
        }
        const bool same = loaded.value().at == job.at &&
                          mlp::same_bits(loaded.value().weights, job.at_capture) &&
                          mlp::same_gradients(loaded.value().weights, job.at_capture);
        identical += same ? 1 : 0;
        if (!same) {
            std::printf("step %llu differs from the state at its snapshot\n",
                        static_cast<unsigned long long>(job.step));
        }
    }
    examples::print_restored(identical, checked);
    failures += identical == checked && checked == on_disk.size() && checked > 0 ? 0 : 1;

    // A restart: resume from the latest checkpoint, in fresh objects, and finish the run.
    const auto latest = shared.manager.latest_step();
    if (!latest || !latest.value()) {
        std::printf("no latest checkpoint\n");
        return failures + 1;
    }
    auto state = load_state(shared.manager, *latest.value());
    bool exact = false;
    if (state) {
        const mlp::dataset data{c};
        mlp::model resumed = std::move(state.value().weights);
        mlp::position at = state.value().at;
        while (at.step < opts.steps) {
            mlp::train_micro_batch(c, data, resumed, at);
        }
        exact = mlp::same_bits(resumed, report.final_model);
        examples::print_resumed(state.value().at.step, state.value().at.micro_batch, c.accumulate,
                                exact);
    } else {
        std::printf("cannot load the latest checkpoint: %s\n", state.error().message().c_str());
    }
    return failures + (exact ? 0 : 1);
}

// The run's figures as one flat JSON object, for bench/run.
void write_figures(const fs::path& path, std::uint64_t steps, std::uint64_t snapshots,
                   const run_report& report)
{
    std::FILE* out = std::fopen(path.c_str(), "w");
    if (out == nullptr) {
        std::perror(path.c_str());
        std::exit(1);
    }
    std::fprintf(out,
                 "{\n  \"steps\": %llu,\n  \"snapshots\": %llu,\n  \"wall_s\": %.9g,\n"
                 "  \"blocked_s\": %.9g\n}\n",
                 static_cast<unsigned long long>(steps), static_cast<unsigned long long>(snapshots),
                 report.wall_seconds, report.blocked_seconds);
    if (std::fclose(out) != 0) {
        std::perror(path.c_str());
        std::exit(1);
    }
}

std::optional<options> parse(int argc, char** argv)
{
    options opts;
    examples::arguments args;
    args.option("--steps", opts.steps)
        .option("--snapshot-every", opts.snapshot_every)
        .option("--latency-ms", opts.latency_ms)
        .option("--dir", opts.dir)
        .option("--json", opts.json);
    if (!args.parse(argc, argv) || opts.steps == 0 || opts.snapshot_every > opts.steps ||
        opts.latency_ms < 0) {
        return std::nullopt;
    }
    return opts;
}

} // namespace

int main(int argc, char** argv)
{
    const auto opts = parse(argc, argv);
    if (!opts) {
        std::fprintf(stderr,
                     "usage: %s [--steps N] [--snapshot-every N (0..steps)] [--latency-ms N] "
                     "[--dir DIR] [--json PATH]\n",
                     argv[0]);
        return 2;
    }
    const examples::checkpoint_dir where{opts->dir, "ruda-async-trainer"};
    if (!where.ok()) {
        return 1;
    }
    const fs::path& dir = where.path();
    const mlp::config c{};
    std::printf("MLP %zu-%zu-%zu, %zu samples per micro-batch, %zu micro-batches per step, "
                "%llu steps;\ngradients on async_device (%ld ms per read); snapshot mid-window "
                "every %llu steps into %s\n\n",
                c.inputs, c.hidden, c.outputs, c.batch, c.accumulate,
                static_cast<unsigned long long>(opts->steps), opts->latency_ms,
                static_cast<unsigned long long>(opts->snapshot_every), dir.c_str());

    boost::asio::io_context io{1};
    run_report report;
    int failures = 0;
    {
        checkpoints shared{io.get_executor(), dir};
        boost::asio::co_spawn(io, train(c, *opts, shared, report), [](std::exception_ptr e) {
            if (e) {
                std::rethrow_exception(e);
            }
        });
        io.run();
        if (opts->snapshot_every != 0) {
            failures += verify(c, *opts, shared, report);
        } else {
            std::printf("\ntraining without snapshots: %.3f s\n", report.wall_seconds);
        }
        if (opts->json) {
            write_figures(*opts->json, opts->steps, shared.taken, report);
        }
    }
    return failures == 0 ? 0 : 1;
}
