// A directory of step-numbered checkpoints: durable saves, a "latest" pointer moved only once
// the new checkpoint is on disk, keep-last-N retention, stale temporary files removed, and an
// asynchronous save in two completions: staged (in host memory) and durable (on disk).
#pragma once

#include <ruda/checkpoint/checkpoint.hpp>
#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/checkpoint/detail/save_state.hpp>
#include <ruda/checkpoint/file_ops.hpp>
#include <ruda/checkpoint/saved_checkpoint.hpp>
#include <ruda/error.hpp>
#include <ruda/optim/async_snapshot.hpp>
#include <ruda/optim/detail/snapshot_operation.hpp>
#include <ruda/optim/gradients_params.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace ruda {

/// A checkpoint newer than the one `load_newest_valid` returned, passed over because it does
/// not load.
struct skipped_checkpoint {
    std::uint64_t step;
    error why;
};

/// What `load_newest_valid` found: the newest checkpoint that loads, and the newer ones that
/// did not, newest first.
struct newest_valid_checkpoint {
    std::uint64_t step;
    checkpoint contents;
    std::vector<skipped_checkpoint> skipped;
};

/// A save that is staged: its data is in host memory that training no longer touches, and
/// the write is queued on the manager's writer thread. Copies share one save.
class pending_save {
public:
    using executor_type = boost::asio::any_io_executor;

    pending_save(std::shared_ptr<detail::save_state> state, executor_type executor)
        : state_(std::move(state)), executor_(std::move(executor))
    {
    }

    /// The executor of the `async_save` that staged this save.
    [[nodiscard]] const executor_type& get_executor() const noexcept { return executor_; }

    /// Completes with `void(result<saved_checkpoint>)` once the checkpoint is durable (or the
    /// save failed), through the token's associated executor, `get_executor()` if it has none.
    /// Not cancellable: the write goes on whatever the waiter does.
    template <class CompletionToken>
    auto async_wait(CompletionToken&& token) const
    {
        return boost::asio::async_initiate<CompletionToken, void(result<saved_checkpoint>)>(
            [](auto handler, std::shared_ptr<detail::save_state> state,
               const executor_type& executor) {
                auto work =
                    detail::track_work(boost::asio::get_associated_executor(handler, executor));
                state->add_waiter(std::move(work),
                                  detail::save_state::handler_type{std::move(handler)});
            },
            token, state_, executor_);
    }
    /// Whether the save has finished, successfully or not.
    [[nodiscard]] bool done() const { return state_->done(); }
    /// Blocks until the save has finished. Never call it on the thread of an executor that
    /// the save itself needs (none: the write runs on the manager's own thread).
    [[nodiscard]] result<saved_checkpoint> wait() const { return state_->wait(); }

private:
    std::shared_ptr<detail::save_state> state_;
    executor_type executor_;
};

struct checkpoint_manager_options {
    /// Checkpoints kept: the latest and the newest `keep_last - 1` others (at least 1 in all).
    std::size_t keep_last = 3;
    /// The file operations; `posix_file_ops()` when null. Tests inject failures here.
    file_ops* ops = nullptr;
    /// How each checkpoint file is written (the number of writers).
    checkpoint_save_options save{};
};

/// Manages `directory`: `step-<20 digits>.ruda` files, a `latest` file naming the newest
/// durable one, and `*.tmp` files of writes in progress. One manager per directory: from its
/// first save a manager holds an exclusive lock on `directory/.lock` (`flock`, which the kernel
/// releases when the process ends, however it ends), and a save by a second manager, in this
/// process or another, fails with `errc::directory_in_use` naming the holder's pid and host.
/// Loads take no lock.
///
///     ruda::checkpoint_manager manager{"checkpoints", {.keep_last = 5}};
///     auto pending = co_await manager.async_save<B>(step, grads, std::move(state), {},
///                                                   boost::asio::use_awaitable);   // staged
///     auto saved = co_await pending.value().async_wait(boost::asio::use_awaitable); // durable
class checkpoint_manager {
public:
    explicit checkpoint_manager(std::filesystem::path directory,
                                checkpoint_manager_options options = {});
    checkpoint_manager(const checkpoint_manager&) = delete;
    checkpoint_manager& operator=(const checkpoint_manager&) = delete;
    /// Waits for the saves still queued.
    ~checkpoint_manager();

    [[nodiscard]] const std::filesystem::path& directory() const noexcept { return directory_; }
    [[nodiscard]] std::filesystem::path path_of(std::uint64_t step) const;

    /// Saves `contents` as `step`, durably; then moves "latest" to it, applies retention and
    /// removes stale temporary files. A failure leaves the previous checkpoints and "latest"
    /// as they were. `errc::directory_in_use` if another manager holds the directory.
    [[nodiscard]] result<saved_checkpoint> save(std::uint64_t step, const checkpoint& contents);

    /// Snapshots `grads` (handles captured by this call, like `to_record_async<B>`) into
    /// `state`'s gradients and completes the token with `void(result<pending_save>)` once the
    /// record is in host memory (staged); the write then runs on the manager's writer thread.
    /// `state`'s sections are taken as they are now. The snapshot runs on the token's
    /// associated executor (a coroutine's with `use_awaitable`, the bound one with
    /// `bind_executor`); a token without one does not compile. The token's cancellation slot
    /// cancels the snapshot, for every cancellation type: the save then completes with
    /// `errc::cancelled` and writes nothing. Once staged, the write is not cancellable. The
    /// manager must outlive the save, and the token's execution context the manager (or be run
    /// until it runs out of work): the writer thread may still be returning from its post of a
    /// completion after the handler ran.
    template <backend B, class CompletionToken>
    auto async_save(std::uint64_t step, const gradients_params& grads, checkpoint state,
                    snapshot_options options, CompletionToken&& token);
    /// The same with the default snapshot options.
    template <backend B, class CompletionToken>
        requires(!std::is_same_v<std::decay_t<CompletionToken>, snapshot_options>)
    auto async_save(std::uint64_t step, const gradients_params& grads, checkpoint state,
                    CompletionToken&& token)
    {
        return async_save<B>(step, grads, std::move(state), snapshot_options{},
                             std::forward<CompletionToken>(token));
    }

    /// Queues the write of `contents`, its record and sections already in host memory, on the
    /// writer thread (as `dist_checkpoint_manager::async_save_record` does): the save is staged
    /// at once, and the token completes with `void(result<pending_save>)` (never an error: a
    /// failed write is the pending save's) through its associated executor, never inside this
    /// call. For a checkpoint whose parts were snapshotted apart, such as a model's weights and
    /// its gradients, each fixed on the device at its `to_record_async` call (device staging)
    /// and written once both have landed. A token without an associated executor does not
    /// compile.
    template <class CompletionToken>
    auto async_save_record(std::uint64_t step, checkpoint contents, CompletionToken&& token);

    /// The checkpoint of `step`, verified and validated (see `checkpoint_reader`).
    [[nodiscard]] result<checkpoint> load(std::uint64_t step,
                                          const checkpoint_load_options& options = {}) const;
    /// The checkpoint "latest" names; `errc::not_found` when there is none yet. When that file
    /// does not load (damaged on the disk, say), the error keeps its code and says that it is
    /// the one "latest" names; `load_newest_valid` then finds the newest one that loads.
    [[nodiscard]] result<checkpoint> load_latest(const checkpoint_load_options& options = {}) const;
    /// The newest checkpoint file of the directory that loads completely (every check and
    /// checksum), whatever "latest" says, with each newer one passed over and why. Every file
    /// a save renames into place was complete and durable first, so one newer than "latest"
    /// (a crash before "latest" moved) is as sound as the others. `errc::io_error` when none
    /// loads, naming each failure.
    [[nodiscard]] result<newest_valid_checkpoint>
    load_newest_valid(const checkpoint_load_options& options = {}) const;
    /// The step "latest" names, or nothing when no checkpoint was saved yet.
    [[nodiscard]] result<std::optional<std::uint64_t>> latest_step() const;
    /// Steps of the checkpoint files present, ascending; none before the directory exists.
    /// `errc::io_error` when the directory cannot be listed.
    [[nodiscard]] result<std::vector<std::uint64_t>> steps() const;

private:
    std::shared_ptr<detail::save_state> queue_write(std::uint64_t step, checkpoint contents);
    std::optional<error> after_save(std::uint64_t step);
    result<void> hold_directory();

    std::filesystem::path directory_;
    checkpoint_manager_options options_;
    file_ops& ops_;
    std::mutex save_mutex_; // one save at a time, synchronous or queued
    int lock_fd_ = -1;      // the directory's lock, held from the first save
    boost::asio::thread_pool writer_{1};
};

template <backend B, class CompletionToken>
auto checkpoint_manager::async_save(std::uint64_t step, const gradients_params& grads,
                                    checkpoint state, snapshot_options options,
                                    CompletionToken&& token)
{
    return boost::asio::async_initiate<CompletionToken, void(result<pending_save>)>(
        [this](auto handler, boost::asio::awaitable<result<gradients_params_record>> snapshot,
               std::uint64_t at, checkpoint contents) {
            const auto executor = detail::operation_executor(handler, detail::token_executor{});
            auto slot = boost::asio::get_associated_cancellation_slot(handler);
            auto staged = [this, at, executor, contents = std::move(contents),
                           handler = std::move(handler)](
                              result<gradients_params_record> record) mutable {
                if (!record) {
                    std::move(handler)(result<pending_save>{std::move(record).error()});
                    return;
                }
                contents.set_gradients(std::move(record).value());
                std::move(handler)(result<pending_save>{
                    pending_save{queue_write(at, std::move(contents)), executor}});
            };
            detail::async_run_snapshot(
                std::move(snapshot), executor,
                boost::asio::bind_cancellation_slot(
                    slot, boost::asio::bind_executor(executor, std::move(staged))));
        },
        token, grads.to_record_async<B>(std::move(options)), step, std::move(state));
}

template <class CompletionToken>
auto checkpoint_manager::async_save_record(std::uint64_t step, checkpoint contents,
                                           CompletionToken&& token)
{
    return boost::asio::async_initiate<CompletionToken, void(result<pending_save>)>(
        [this](auto handler, std::uint64_t at, checkpoint ready) {
            const auto executor = detail::operation_executor(handler, detail::token_executor{});
            pending_save pending{queue_write(at, std::move(ready)), executor};
            boost::asio::post(executor, [handler = std::move(handler),
                                         pending = std::move(pending)]() mutable {
                std::move(handler)(result<pending_save>{std::move(pending)});
            });
        },
        token, step, std::move(contents));
}

} // namespace ruda
