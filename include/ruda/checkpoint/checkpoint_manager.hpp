// A directory of step-numbered checkpoints of one run: durable saves, a "latest" pointer moved
// only once the new checkpoint is on disk, keep-last-N retention, stale temporary files
// removed, steps that only go up (or a deliberate rollback), and saves in two completions:
// staged (in host memory) and durable (on disk), from a coroutine or a plain loop.
#pragma once

#include <ruda/checkpoint/checkpoint.hpp>
#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/checkpoint/detail/directory_lock.hpp>
#include <ruda/checkpoint/detail/save_state.hpp>
#include <ruda/checkpoint/file_ops.hpp>
#include <ruda/checkpoint/newest_valid.hpp>
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
#include <boost/asio/system_executor.hpp>
#include <boost/asio/thread_pool.hpp>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace ruda {

/// One group of tensors for a save to snapshot: its name and the tensors.
struct tensor_group_source {
    std::string name;
    const gradients_params& tensors;
};

/// What a save does when the directory already holds a checkpoint of its step or a newer one.
enum class newer_checkpoints : std::uint8_t {
    /// Refuse the save with `errc::step_not_newer`, writing nothing: the directory holds
    /// another run's checkpoints, or this run went back, and either could later resume the
    /// wrong state.
    refuse,
    /// A deliberate rollback: write the checkpoint, move "latest" to it, then remove every
    /// newer checkpoint, each step durable before the next.
    discard,
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
    /// The run id every checkpoint of this manager records, with its step; empty: a random
    /// one, made when the manager is created (`run_id()`). 1 to 128 bytes of UTF-8 without
    /// control characters, else every save fails with `errc::malformed_record`.
    std::string run_id{};
    /// What a save of a step not above the directory's newest does.
    newer_checkpoints on_newer = newer_checkpoints::refuse;
    /// How many saves `queue_save` lets wait for or use the writer thread at once (at least
    /// 1); a call beyond that blocks until one is durable.
    std::size_t max_queued_saves = 2;
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
    /// The run id this manager's checkpoints record.
    [[nodiscard]] const std::string& run_id() const noexcept { return options_.run_id; }
    /// The run this manager resumed: the run of the last checkpoint of another run it loaded
    /// (`load`, `load_latest`, `load_newest_valid`), which its saves record as their parent, so
    /// that a restarted trainer's checkpoints continue the line of the run it resumed. Empty
    /// until then.
    [[nodiscard]] std::string resumed_run_id() const;

    /// Saves `contents` as `step` of this manager's run, the run it resumed as the parent
    /// (recorded in the file, whatever `contents.identity()` says), durably; then moves
    /// "latest" to it, applies retention and removes stale temporary files. A failure leaves
    /// the previous checkpoints and "latest" as they were. `errc::directory_in_use` if another
    /// manager holds the directory;
    /// `errc::step_not_newer`, writing nothing, when the directory holds `step` or a newer
    /// step, unless the options say `newer_checkpoints::discard`.
    [[nodiscard]] result<saved_checkpoint> save(std::uint64_t step, const checkpoint& contents);

    /// Queues the write of `contents`, already in host memory, on the writer thread and
    /// returns with the save staged: a plain training loop's save, with no executor of its
    /// own. At most `max_queued_saves` saves wait for or use the writer at once; this call
    /// blocks while that many do (back-pressure: a loop that checkpoints faster than the disk
    /// writes waits for the disk rather than piling snapshots up in memory). The pending
    /// save's `wait()` gives the durable outcome; its `async_wait` runs a handler without an
    /// executor of its own on Asio's system executor. The manager's destructor waits for every
    /// queued save, which is then durable (or failed).
    [[nodiscard]] pending_save queue_save(std::uint64_t step, checkpoint contents);

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

    /// Snapshots each group's tensors as one point in time (every handle captured by this call,
    /// with one bound on the reads and bytes in flight for them all, and the device's staging
    /// hook run once for them all) into `state`'s groups of those names, then queues the write
    /// like the call above. Weights are read from the device like gradients. A group name that
    /// is invalid (`check_item_name`), given twice, or already a non-empty group of `state` is
    /// `errc::malformed_record` at the staged completion, and nothing is read.
    template <backend B, class CompletionToken>
    auto async_save(std::uint64_t step, const std::vector<tensor_group_source>& groups,
                    checkpoint state, snapshot_options options, CompletionToken&& token);
    /// The same with the default snapshot options.
    template <backend B, class CompletionToken>
        requires(!std::is_same_v<std::decay_t<CompletionToken>, snapshot_options>)
    auto async_save(std::uint64_t step, const std::vector<tensor_group_source>& groups,
                    checkpoint state, CompletionToken&& token)
    {
        return async_save<B>(step, groups, std::move(state), snapshot_options{},
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
    /// checksum), whatever step "latest" names, with each newer one passed over and why. Every
    /// file a save renames into place was complete and durable first, so one newer than
    /// "latest" (a crash before "latest" moved) is as sound as the others. Where "latest"
    /// names a run, only the checkpoints of that run's line (`lineage_of`: the runs it resumed
    /// and the runs resumed from it) count: the others are passed over (`errc::other_run`)
    /// while one of the line loads; when none does, the newest of another run that loads is
    /// returned with `other_run` set. `errc::io_error` when none loads, naming each failure.
    [[nodiscard]] result<newest_valid_checkpoint>
    load_newest_valid(const checkpoint_load_options& options = {}) const;
    /// The step "latest" names, or nothing when no checkpoint was saved yet.
    [[nodiscard]] result<std::optional<std::uint64_t>> latest_step() const;
    /// The run of the checkpoint "latest" names: what "latest" records, or else what that
    /// checkpoint's file records; nothing when neither says (or there is no "latest").
    [[nodiscard]] std::optional<std::string> latest_run_id() const;
    /// Steps of the checkpoint files present, ascending; none before the directory exists.
    /// `errc::io_error` when the directory cannot be listed.
    [[nodiscard]] result<std::vector<std::uint64_t>> steps() const;

private:
    std::shared_ptr<detail::save_state> queue_write(std::uint64_t step, checkpoint contents);
    result<void> check_step(std::uint64_t step, const std::vector<std::uint64_t>& present) const;
    std::optional<error> discard_newer(std::uint64_t step);
    std::optional<error> after_save(std::uint64_t step);
    void note_resumed(const checkpoint& loaded) const;

    std::filesystem::path directory_;
    checkpoint_manager_options options_;
    file_ops& ops_;
    std::mutex save_mutex_; // one save at a time, synchronous or queued
    detail::directory_lock lock_; // held from the first save
    mutable std::mutex resumed_mutex_;
    mutable std::string resumed_from_; // the run of the last checkpoint of another run loaded
    std::mutex queue_mutex_;
    std::condition_variable queue_room_;
    std::size_t queued_ = 0; // saves queued on the writer and not yet finished
    boost::asio::thread_pool writer_{1};
};

namespace detail {

/// The records of several groups' snapshot, put into `state` under their names.
[[nodiscard]] result<checkpoint> with_groups(checkpoint state, std::vector<std::string> names,
                                             std::vector<gradients_params_record> records);
/// `errc::malformed_record` for a group name that is invalid, given twice, or the name of a
/// non-empty group of `state`.
[[nodiscard]] result<void> check_group_sources(const std::vector<tensor_group_source>& groups,
                                               const checkpoint& state);

} // namespace detail

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

template <backend B, class CompletionToken>
auto checkpoint_manager::async_save(std::uint64_t step,
                                    const std::vector<tensor_group_source>& groups,
                                    checkpoint state, snapshot_options options,
                                    CompletionToken&& token)
{
    using records = std::vector<gradients_params_record>;
    std::vector<std::string> names;
    std::vector<const gradients_params*> sources;
    auto checked = detail::check_group_sources(groups, state);
    for (const tensor_group_source& g : groups) {
        names.push_back(g.name);
        sources.push_back(&g.tensors);
    }
    return boost::asio::async_initiate<CompletionToken, void(result<pending_save>)>(
        [this](auto handler, boost::asio::awaitable<result<records>> snapshot, std::uint64_t at,
               checkpoint contents, std::vector<std::string> group_names) {
            const auto executor = detail::operation_executor(handler, detail::token_executor{});
            auto slot = boost::asio::get_associated_cancellation_slot(handler);
            auto staged = [this, at, executor, contents = std::move(contents),
                           group_names = std::move(group_names),
                           handler = std::move(handler)](result<records> taken) mutable {
                auto ready = taken ? detail::with_groups(std::move(contents),
                                                         std::move(group_names),
                                                         std::move(taken).value())
                                   : result<checkpoint>{std::move(taken).error()};
                if (!ready) {
                    std::move(handler)(result<pending_save>{std::move(ready).error()});
                    return;
                }
                std::move(handler)(result<pending_save>{
                    pending_save{queue_write(at, std::move(ready).value()), executor}});
            };
            detail::async_run_snapshot(
                std::move(snapshot), executor,
                boost::asio::bind_cancellation_slot(
                    slot, boost::asio::bind_executor(executor, std::move(staged))));
        },
        token,
        checked ? gradients_params::to_records_async<B>(sources, names, std::move(options))
                : detail::failed_snapshot<records>(std::move(checked).error()),
        step, std::move(state), std::move(names));
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
