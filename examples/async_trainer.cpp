// The main job: a small MLP trained with gradient accumulation, its accumulated gradients
// living on an asynchronous device (`async_backend`, 2 ms per read). Every N steps, in the
// middle of an accumulation window, a checkpoint coroutine `co_await`s a snapshot of them
// while the training loop keeps going, and a writer thread saves it (cereal binary, written
// to a temporary file, fsynced and renamed). The table shows how long the loop was blocked.
// Afterwards every checkpoint is loaded, restored onto a fresh device and compared with the
// gradients as they were when its snapshot was taken, and training resumed from the latest
// one must end with weights bit-identical to the uninterrupted run. Exits non-zero otherwise.
//
//   async_trainer [--steps N] [--snapshot-every N] [--latency-ms N] [--dir DIR]
#include "mlp.hpp"

#include <ruda/ruda.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cereal/archives/binary.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

namespace {

using gpu = ruda::async_backend;
using clock_type = std::chrono::steady_clock;
namespace fs = std::filesystem;

struct options {
    std::uint64_t steps = 200;
    std::uint64_t snapshot_every = 10;
    long latency_ms = 2;
    std::optional<fs::path> dir; // kept when given; a temporary directory otherwise
};

[[noreturn]] void throw_errno(const std::string& what)
{
    throw std::system_error(errno, std::generic_category(), what);
}

// Atomic and durable: a temporary file in the same directory, fsync, rename, fsync of the
// directory. A crash leaves either the old file or the new one, never a torn one.
void write_durably(const fs::path& path, const std::string& bytes)
{
    const fs::path temporary = path.string() + ".tmp";
    const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        throw_errno("open " + temporary.string());
    }
    std::size_t written = 0;
    while (written < bytes.size()) {
        const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            ::close(fd);
            throw_errno("write " + temporary.string());
        }
        written += static_cast<std::size_t>(n);
    }
    const bool synced = ::fsync(fd) == 0;
    if (::close(fd) != 0 || !synced) {
        throw_errno("fsync " + temporary.string());
    }
    if (::rename(temporary.c_str(), path.c_str()) != 0) {
        throw_errno("rename " + temporary.string());
    }
    const int dir = ::open(path.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) {
        throw_errno("open " + path.parent_path().string());
    }
    const bool dir_synced = ::fsync(dir) == 0;
    ::close(dir);
    if (!dir_synced) {
        throw_errno("fsync " + path.parent_path().string());
    }
}

// A checkpoint on its way to disk: where training stood and the weights, copied when its
// snapshot was taken (their `grad` fields are what the snapshot must hold).
struct checkpoint_job {
    fs::path path;
    mlp::position at;
    mlp::model at_capture;
};

// What the training loop and the checkpoint coroutines share; all on the training thread,
// except `writer`, whose thread only sees what is handed to it.
struct checkpoints {
    explicit checkpoints(const boost::asio::any_io_executor& ex)
        : finished(ex, clock_type::time_point::max())
    {
    }
    boost::asio::thread_pool writer{1};
    boost::asio::steady_timer finished; // cancelled whenever a checkpoint completes
    bool in_flight = false;
    std::uint64_t taken = 0;
    std::uint64_t saved = 0;
    std::vector<checkpoint_job> written; // files on disk, with what they must hold
    std::optional<std::string> failure;
};

// Runs on the writer thread: serialization and the file write never touch the training loop.
boost::asio::awaitable<void> save(fs::path path, mlp::training_state state)
{
    std::ostringstream bytes;
    {
        cereal::BinaryOutputArchive archive{bytes};
        archive(state);
    }
    write_durably(path, bytes.str());
    co_return;
}

boost::asio::awaitable<void>
checkpoint(boost::asio::awaitable<ruda::result<ruda::gradients_params_record>> snapshot,
           checkpoint_job job, checkpoints& shared)
{
    auto record = co_await std::move(snapshot);
    if (!record) {
        shared.failure = "snapshot: " + record.error().message();
    } else {
        mlp::training_state state{job.at, job.at_capture, std::move(record).value()};
        try {
            co_await boost::asio::co_spawn(shared.writer, save(job.path, std::move(state)),
                                           boost::asio::use_awaitable);
            ++shared.saved;
            shared.written.push_back(std::move(job));
        } catch (const std::exception& e) {
            shared.failure = std::string("save: ") + e.what();
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

boost::asio::awaitable<void> train(const mlp::config& c, const options& opts, const fs::path& dir,
                                   checkpoints& shared, run_report& report)
{
    const auto ex = co_await boost::asio::this_coro::executor;
    const ruda::async_device device{{.latency = std::chrono::milliseconds(opts.latency_ms),
                                     .bytes_per_second = 12e9, .concurrent_transfers = 8}};
    const mlp::dataset data{c};
    mlp::model m = mlp::init(c);
    ruda::gradients_params grads;
    mlp::position at;
    double window_loss = 0;
    const auto start = clock_type::now();
    clock_type::duration blocked{};

    std::printf("| step | loss | snapshots taken | saved | loop blocked ms | blocked %% of wall |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|\n");
    while (at.step < opts.steps) {
        window_loss += mlp::train_micro_batch(c, data, m, at);
        mlp::publish_gradients<gpu>(m, grads, device);

        const std::uint64_t current = at.step + 1; // the step this window completes
        if (current % opts.snapshot_every == 0 && at.micro_batch == c.accumulate / 2) {
            const auto t0 = clock_type::now();
            co_await wait_idle(shared); // the previous checkpoint must be done first
            char name[64];
            std::snprintf(name, sizeof name, "step-%06llu-mb%llu.ckpt",
                          static_cast<unsigned long long>(at.step),
                          static_cast<unsigned long long>(at.micro_batch));
            // The handles are captured here; training may change `grads` right after.
            auto snapshot = grads.to_record_async<gpu>();
            shared.in_flight = true;
            ++shared.taken;
            boost::asio::co_spawn(ex, checkpoint(std::move(snapshot), {dir / name, at, m}, shared),
                                  [](std::exception_ptr e) {
                                      if (e) {
                                          std::rethrow_exception(e);
                                      }
                                  });
            blocked += clock_type::now() - t0;
        }
        if (at.micro_batch == 0) { // a step just completed
            if (at.step % opts.snapshot_every == 0) {
                const double wall = std::chrono::duration<double>(clock_type::now() - start).count();
                const double blocked_ms = std::chrono::duration<double, std::milli>(blocked).count();
                std::printf("| %llu | %.5f | %llu | %llu | %.3f | %.3f |\n",
                            static_cast<unsigned long long>(at.step),
                            window_loss / static_cast<double>(c.accumulate),
                            static_cast<unsigned long long>(shared.taken),
                            static_cast<unsigned long long>(shared.saved), blocked_ms,
                            100.0 * blocked_ms / 1e3 / wall);
            }
            window_loss = 0;
        }
        // Let the snapshot's completions run between micro-batches.
        co_await boost::asio::post(ex, boost::asio::use_awaitable);
    }
    report.wall_seconds = std::chrono::duration<double>(clock_type::now() - start).count();
    report.blocked_seconds = std::chrono::duration<double>(blocked).count();
    co_await wait_idle(shared); // the last checkpoint reaches the disk
    report.final_model = std::move(m);
}

std::string read_file(const fs::path& path)
{
    std::ifstream in{path, std::ios::binary};
    std::ostringstream bytes;
    bytes << in.rdbuf();
    return bytes.str();
}

// Loads a checkpoint file, restores its gradients onto a fresh device and reads them back:
// the training state as a restarted trainer would see it.
ruda::result<mlp::training_state> load_checkpoint(const fs::path& path)
{
    mlp::training_state state;
    try {
        std::istringstream in{read_file(path)};
        cereal::BinaryInputArchive archive{in};
        archive(state);
    } catch (const std::exception& e) {
        return ruda::error{ruda::errc::malformed_record, path.string() + ": " + e.what()};
    }
    const ruda::async_device device{{.latency = std::chrono::milliseconds(1)}};
    BOOST_OUTCOME_TRY(auto restored,
                      ruda::gradients_params::from_record<gpu>(std::move(state.gradients), device));
    BOOST_OUTCOME_TRY(auto on_host, restored.try_to_record<gpu>());
    if (!mlp::load_gradients(on_host, state.weights)) {
        return ruda::error{ruda::errc::malformed_record,
                           path.string() + ": gradients do not match the parameters"};
    }
    state.gradients = std::move(on_host);
    return state;
}

bool same_gradients(const mlp::model& a, const mlp::model& b)
{
    for (std::size_t k = 0; k < a.params.size(); ++k) {
        const auto& x = a.params[k].grad;
        const auto& y = b.params[k].grad;
        if (a.params[k].id != b.params[k].id || x.size() != y.size() ||
            std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) != 0) {
            return false;
        }
    }
    return true;
}

std::optional<options> parse(int argc, char** argv)
{
    options opts;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        const bool has_value = i + 1 < argc;
        if (arg == "--steps" && has_value) {
            opts.steps = std::strtoull(argv[++i], nullptr, 10);
        } else if (arg == "--snapshot-every" && has_value) {
            opts.snapshot_every = std::strtoull(argv[++i], nullptr, 10);
        } else if (arg == "--latency-ms" && has_value) {
            opts.latency_ms = std::strtol(argv[++i], nullptr, 10);
        } else if (arg == "--dir" && has_value) {
            opts.dir = argv[++i];
        } else {
            return std::nullopt;
        }
    }
    if (opts.steps == 0 || opts.snapshot_every == 0 || opts.snapshot_every > opts.steps ||
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
                     "usage: %s [--steps N] [--snapshot-every N (1..steps)] [--latency-ms N] "
                     "[--dir DIR]\n",
                     argv[0]);
        return 2;
    }
    fs::path dir;
    if (opts->dir) {
        dir = fs::absolute(*opts->dir);
        fs::create_directories(dir);
    } else {
        std::string pattern = (fs::temp_directory_path() / "ruda-async-trainer-XXXXXX").string();
        if (::mkdtemp(pattern.data()) == nullptr) {
            std::perror("mkdtemp");
            return 1;
        }
        dir = pattern;
    }
    const mlp::config c{};
    std::printf("MLP %zu-%zu-%zu, %zu samples per micro-batch, %zu micro-batches per step, "
                "%llu steps;\ngradients on async_device (%ld ms per read); snapshot mid-window "
                "every %llu steps into %s\n\n",
                c.inputs, c.hidden, c.outputs, c.batch, c.accumulate,
                static_cast<unsigned long long>(opts->steps), opts->latency_ms,
                static_cast<unsigned long long>(opts->snapshot_every), dir.c_str());

    boost::asio::io_context io{1};
    checkpoints shared{io.get_executor()};
    run_report report;
    boost::asio::co_spawn(io, train(c, *opts, dir, shared, report), [](std::exception_ptr e) {
        if (e) {
            std::rethrow_exception(e);
        }
    });
    io.run();
    shared.writer.join();

    int failures = 0;
    if (shared.failure) {
        std::printf("\ncheckpoint failed: %s\n", shared.failure->c_str());
        ++failures;
    }
    std::printf("\n%llu snapshots, %llu checkpoints on disk; training %.3f s, loop blocked "
                "%.3f ms (%.4f%%)\n",
                static_cast<unsigned long long>(shared.taken),
                static_cast<unsigned long long>(shared.saved), report.wall_seconds,
                report.blocked_seconds * 1e3,
                100.0 * report.blocked_seconds / report.wall_seconds);

    // Every checkpoint holds the gradients exactly as they were when its snapshot was taken,
    // although training went on changing them while the reads were in flight.
    std::size_t identical = 0;
    for (const checkpoint_job& job : shared.written) {
        auto loaded = load_checkpoint(job.path);
        if (!loaded) {
            std::printf("cannot load %s: %s\n", job.path.c_str(), loaded.error().message().c_str());
            continue;
        }
        const bool same = loaded.value().at == job.at &&
                          mlp::same_bits(loaded.value().weights, job.at_capture) &&
                          same_gradients(loaded.value().weights, job.at_capture);
        identical += same ? 1 : 0;
        if (!same) {
            std::printf("%s differs from the state at its snapshot\n", job.path.c_str());
        }
    }
    std::printf("checkpoints restored bit-identical to the state at their snapshot: %zu of %zu\n",
                identical, shared.written.size());
    failures += identical == shared.written.size() && !shared.written.empty() ? 0 : 1;

    // A restart: resume from the latest checkpoint, in fresh objects, and finish the run.
    if (!shared.written.empty()) {
        const checkpoint_job& latest = shared.written.back();
        auto state = load_checkpoint(latest.path);
        bool exact = false;
        if (state) {
            const mlp::dataset data{c};
            mlp::model resumed = std::move(state.value().weights);
            mlp::position at = state.value().at;
            while (at.step < opts->steps) {
                mlp::train_micro_batch(c, data, resumed, at);
            }
            exact = mlp::same_bits(resumed, report.final_model);
        }
        std::printf("resumed from %s (step %llu, micro-batch %llu of %zu): final weights %s\n",
                    latest.path.filename().c_str(),
                    static_cast<unsigned long long>(latest.at.step),
                    static_cast<unsigned long long>(latest.at.micro_batch), c.accumulate,
                    exact ? "bit-identical to the uninterrupted run" : "DIFFER");
        failures += exact ? 0 : 1;
    }

    if (!opts->dir) {
        std::error_code ignored;
        fs::remove_all(dir, ignored);
    }
    return failures == 0 ? 0 : 1;
}
