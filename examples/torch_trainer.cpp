// A torch MLP trained with Adam and gradient accumulation; its tensors are real
// `torch::Tensor`s, snapshot through `ruda::torch_backend`. Every N steps, in the middle of an
// accumulation window, the loop `co_await`s a checkpoint of its whole training state
// (`async_snapshot_training_state`: weights, accumulated gradients, Adam's moments and step
// counts, the generators): read into host memory on ruda's read workers (staged), then written
// by the manager's thread while training goes on. Torch changes these tensors in place, so the
// loop waits for the staging (microseconds here), never for the disk. The table shows how long
// it was blocked.
//
// Afterwards every checkpoint kept is restored into a fresh model and optimizer
// (`restore_training_state`), which must hold exactly the weights and gradients of its
// snapshot; then training resumes from the latest one, in the middle of its window, and must
// end with weights bit-identical to the uninterrupted run. Exits non-zero otherwise.
//
// With `--device cuda` the model trains on the GPU (a libtorch with CUDA): the snapshot borrows
// the tensors in place through `ruda::cuda_backend`, and its call copies them on the GPU into a
// device staging buffer. The loop goes on at once: the copies drain to host memory, and the
// checkpoint is queued for writing once they have landed
// (`checkpoint_manager::async_save_record`). The restores upload into the fresh model's own
// tensors.
//
//   torch_trainer [--steps N] [--snapshot-every N] [--dir DIR] [--device cpu|cuda]
#include "common/arguments.hpp"
#include "common/checkpoint_dir.hpp"
#include "common/progress_table.hpp"
#include "common/torch_mlp.hpp"

#include <ruda/backend/torch_backend.hpp>
#include <ruda/optim/torch_training_state.hpp>
#include <ruda/ruda.hpp>

#include <torch/version.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace {

using tb = ruda::torch_backend;
using namespace torch_mlp;
namespace fs = std::filesystem;

struct options {
    std::uint64_t steps = 60;
    std::uint64_t snapshot_every = 10;
    std::optional<fs::path> dir;
    c10::Device device{c10::kCPU};
};

struct run_state {
    run_state(const fs::path& dir, const c10::Device& where,
              std::optional<ruda::cuda_module_device> on_gpu)
        : manager(dir, {.keep_last = 3}), device(where), gpu(std::move(on_gpu))
    {
    }
    ruda::checkpoint_manager manager;
    c10::Device device;
    std::optional<ruda::cuda_module_device> gpu; // with --device cuda
    std::map<std::uint64_t, std::shared_ptr<mlp>> expected; // step -> state at its snapshot
    std::uint64_t durable = 0;
    std::optional<std::string> failure;
    std::shared_ptr<mlp> final_model;
    double wall_seconds = 0;
    double blocked_seconds = 0;
};

// Waits for one staged checkpoint to become durable; notes why a checkpoint was not staged.
boost::asio::awaitable<void> wait_durable(ruda::result<ruda::pending_save> pending, run_state& run)
{
    if (!pending) {
        run.failure = "snapshot: " + pending.error().message();
        co_return;
    }
    auto saved = co_await pending.value().async_wait(boost::asio::use_awaitable);
    if (!saved) {
        run.failure = "save: " + saved.error().message();
    } else {
        ++run.durable;
    }
}

using state_snapshot = boost::asio::awaitable<ruda::result<ruda::checkpoint>>;

// Once the whole state is in host memory: the checkpoint, with where training stands, queued
// on the manager's writer thread.
boost::asio::awaitable<ruda::result<ruda::pending_save>> stage(state_snapshot snapshot,
                                                               position at, run_state& run)
{
    auto state = co_await std::move(snapshot);
    if (!state) {
        co_return state.error();
    }
    state.value().put("position", at).value();
    co_return co_await run.manager.async_save_record(at.step, std::move(state).value(),
                                                     boost::asio::use_awaitable);
}

// The rest of a checkpoint whose tensors the device holds: staged, then durable.
boost::asio::awaitable<void>
finish_in_background(boost::asio::awaitable<ruda::result<ruda::pending_save>> staging,
                     run_state& run)
{
    auto pending = co_await std::move(staging);
    co_await wait_durable(std::move(pending), run);
}

// Takes a checkpoint of the whole training state at `at`. Returns once training may change the
// model's and Adam's tensors again: when they are in host memory, or at once when the call
// copied every tensor into the GPU's staging buffer. Whether the checkpoint was taken.
boost::asio::awaitable<bool> checkpoint_now(mlp& model, const torch::optim::Adam& optimizer,
                                            const position& at, run_state& run)
{
    const auto ex = co_await boost::asio::this_coro::executor;
    const auto unstaged = [&run] { return run.gpu ? run.gpu->device.stats().unstaged_tensors : 0; };
    const auto unstaged_before = unstaged();
    // The tensors are captured by this call, on the GPU copied there too; read when awaited.
    auto snapshot = run.gpu ? ruda::async_snapshot_training_state(model, optimizer, at.step,
                                                                  *run.gpu, {},
                                                                  boost::asio::use_awaitable)
                            : ruda::async_snapshot_training_state(model, optimizer, at.step,
                                                                  boost::asio::use_awaitable);
    auto staging = stage(std::move(snapshot), at, run);
    if (run.gpu && unstaged() == unstaged_before) { // every tensor is in the staging buffer
        boost::asio::co_spawn(ex, finish_in_background(std::move(staging), run),
                              boost::asio::detached);
        co_return true;
    }
    auto pending = co_await std::move(staging); // in host memory: training may go on
    const bool staged = pending.has_value();
    boost::asio::co_spawn(ex, wait_durable(std::move(pending), run), boost::asio::detached);
    co_return staged;
}

boost::asio::awaitable<void> train(const options& opts, run_state& run)
{
    const auto ex = co_await boost::asio::this_coro::executor;
    const dataset data{run.device};
    auto model = fresh_model(run.device);
    torch::optim::Adam optimizer{model->parameters(), torch::optim::AdamOptions(learning_rate)};
    position at;
    double window_loss = 0;
    examples::progress_table table{"checkpoints staged", "durable"};
    while (at.step < opts.steps) {
        window_loss += train_micro_batch(data, *model, optimizer, at);
        if ((at.step + 1) % opts.snapshot_every == 0 &&
            at.micro == static_cast<std::uint64_t>(accumulate / 2)) {
            const auto t0 = examples::progress_table::clock::now();
            const bool staged = co_await checkpoint_now(*model, optimizer, at, run);
            table.blocked_since(t0);
            if (staged) {
                run.expected[at.step] = copy_of(*model, run.device); // what verify() compares
            }
        }
        if (at.micro == 0) {
            if (at.step % 10 == 0) {
                table.row(at.step, window_loss / static_cast<double>(accumulate),
                          run.expected.size(), run.durable);
            }
            window_loss = 0;
        }
        co_await boost::asio::post(ex, boost::asio::use_awaitable); // let completions run
    }
    table.stop();
    run.wall_seconds = table.wall_seconds();
    run.blocked_seconds = table.blocked_seconds();
    run.final_model = model;
}

// A model and an optimizer restored from checkpoint `step`, and where training stood.
struct restored_run {
    std::shared_ptr<mlp> model;
    std::unique_ptr<torch::optim::Adam> optimizer;
    position at;
};

ruda::result<restored_run> restore(const run_state& run, std::uint64_t step)
{
    BOOST_OUTCOME_TRY(auto loaded, run.manager.load(step));
    restored_run out{fresh_model(run.device), nullptr, {}};
    out.optimizer = std::make_unique<torch::optim::Adam>(
        out.model->parameters(), torch::optim::AdamOptions(learning_rate));
    BOOST_OUTCOME_TRY(loaded.get("position", out.at));
    if (run.gpu) { // uploaded into the model's own tensors
        BOOST_OUTCOME_TRY(ruda::restore_training_state(loaded, *out.model, *out.optimizer, *run.gpu));
    } else {
        BOOST_OUTCOME_TRY(ruda::restore_training_state(loaded, *out.model, *out.optimizer));
    }
    return out;
}

int verify(const options& opts, run_state& run)
{
    int failures = 0;
    if (run.failure) {
        std::printf("\ncheckpoint failed: %s\n", run.failure->c_str());
        ++failures;
    }
    const auto on_disk = run.manager.steps().value(); // throws (a failure) if unlistable
    examples::print_summary(run.expected.size(), run.durable, on_disk.size(),
                            run.manager.directory(), run.wall_seconds, run.blocked_seconds);
    std::size_t identical = 0;
    for (const std::uint64_t step : on_disk) {
        auto restored = restore(run, step);
        const auto expected = run.expected.find(step);
        if (!restored || expected == run.expected.end()) {
            std::printf("step %llu: %s\n", static_cast<unsigned long long>(step),
                        restored ? "not a checkpoint of this run"
                                 : restored.error().message().c_str());
            continue;
        }
        const bool same = same_state(*restored.value().model, *expected->second);
        identical += same ? 1 : 0;
        if (!same) {
            std::printf("step %llu differs from the state at its snapshot\n",
                        static_cast<unsigned long long>(step));
        }
    }
    examples::print_restored(identical, on_disk.size());
    failures += identical == on_disk.size() && !on_disk.empty() ? 0 : 1;

    // A restart: resume from the latest checkpoint in a fresh model and optimizer.
    const auto latest = run.manager.latest_step();
    if (!latest || !latest.value()) {
        std::printf("no latest checkpoint\n");
        return failures + 1;
    }
    auto resumed = restore(run, *latest.value());
    if (!resumed) {
        std::printf("cannot restore the latest checkpoint: %s\n",
                    resumed.error().message().c_str());
        return failures + 1;
    }
    auto& [model, optimizer, at] = resumed.value();
    const position from = at;
    const dataset data{run.device};
    while (at.step < opts.steps) {
        train_micro_batch(data, *model, *optimizer, at);
    }
    const bool exact = same_state(*model, *run.final_model);
    examples::print_resumed(from.step, from.micro, accumulate, exact);
    return failures + (exact ? 0 : 1);
}

std::optional<options> parse(int argc, char** argv)
{
    options opts;
    std::string device = "cpu";
    examples::arguments args;
    args.option("--steps", opts.steps)
        .option("--snapshot-every", opts.snapshot_every)
        .option("--dir", opts.dir)
        .option("--device", device);
    if (!args.parse(argc, argv) || (device != "cpu" && device != "cuda") || opts.steps == 0 ||
        opts.snapshot_every == 0 || opts.snapshot_every > opts.steps) {
        return std::nullopt;
    }
    opts.device = device == "cuda" ? c10::Device{c10::kCUDA, 0} : c10::Device{c10::kCPU};
    return opts;
}

} // namespace

int main(int argc, char** argv)
{
    const auto opts = parse(argc, argv);
    if (!opts) {
        std::fprintf(stderr,
                     "usage: %s [--steps N] [--snapshot-every N (1..steps)] [--dir DIR] "
                     "[--device cpu|cuda]\n",
                     argv[0]);
        return 2;
    }
    std::optional<ruda::cuda_module_device> gpu;
    if (opts->device.is_cuda()) {
        if (!ruda::torch_has_cuda()) {
            std::fprintf(stderr, "--device cuda: libtorch %s has no CUDA here\n", TORCH_VERSION);
            return 1;
        }
        // A device staging buffer larger than the model's weights and gradients: a snapshot's
        // calls copy them on the GPU, and the loop goes on without waiting for the transfer.
        auto opened = ruda::cuda_device::open({.ordinal = 0, .device_staging_bytes = 8U << 20U});
        if (!opened) {
            std::fprintf(stderr, "--device cuda: %s\n", opened.error().message().c_str());
            return 1;
        }
        gpu = ruda::cuda_module_device{opened.value()};
    }
    const examples::checkpoint_dir where{opts->dir, "ruda-torch-trainer"};
    if (!where.ok()) {
        return 1;
    }
    const fs::path& dir = where.path();
    std::printf("torch MLP %lld-%lld-%lld-%lld (libtorch %s) on %s, %lld samples per micro-batch, "
                "%lld micro-batches per step, %llu steps;\ncheckpoint mid-window every %llu "
                "steps into %s, %zu read workers\n\n",
                static_cast<long long>(inputs), static_cast<long long>(hidden),
                static_cast<long long>(hidden), static_cast<long long>(outputs), TORCH_VERSION,
                gpu ? (gpu->device.name() + " (" + opts->device.str() + ")").c_str() : "the CPU",
                static_cast<long long>(batch), static_cast<long long>(accumulate),
                static_cast<unsigned long long>(opts->steps),
                static_cast<unsigned long long>(opts->snapshot_every), dir.c_str(),
                tb::read_workers());

    boost::asio::io_context io{1};
    int failures = 0;
    {
        run_state run{dir, opts->device, gpu};
        boost::asio::co_spawn(io, train(*opts, run), [](std::exception_ptr e) {
            if (e) {
                std::rethrow_exception(e);
            }
        });
        io.run(); // ends once training is done and every checkpoint is durable
        failures = verify(*opts, run);
    }
    return failures == 0 ? 0 : 1;
}
