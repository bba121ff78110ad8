// Data-parallel checkpoints: every rank writes its part of a step directory, and the step counts
// only once every part is durable and every rank agrees (two-phase commit over a communicator).
// A restore onto any number of ranks re-slices what was saved.
#pragma once

#include <ruda/checkpoint/checkpoint.hpp>
#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/checkpoint/checkpoint_manager.hpp>
#include <ruda/checkpoint/file_ops.hpp>
#include <ruda/dist/communicator.hpp>
#include <ruda/dist/dist_manifest.hpp>
#include <ruda/dist/placement.hpp>
#include <ruda/error.hpp>
#include <ruda/optim/gradients_params.hpp>
#include <ruda/optim/snapshot_options.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/thread_pool.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <vector>

namespace ruda {

struct dist_manager_options {
    /// Checkpoints kept: the latest and the newest `keep_last - 1` others (at least 1 in all).
    std::size_t keep_last = 3;
    /// The placement of a gradient that the save's placement map does not list.
    placement default_placement = placement::replicated();
    /// The file operations; `posix_file_ops()` when null. Tests inject failures here.
    file_ops* ops = nullptr;
    /// How each rank's file is written.
    checkpoint_save_options save{};
};

struct dist_restore_options {
    /// Rank-local gradients saved by another number of ranks: `errc::world_size_mismatch`, or,
    /// when set, the element-wise sum of every rank's (float dtypes only).
    bool sum_rank_local = false;
    /// The slice each sharded gradient should hold on this rank; `even_shard` over the ranks
    /// restoring for those not listed.
    std::map<param_id, element_range> slices{};
    /// Whether payload checksums are verified (they are, unless told otherwise).
    bool verify_checksums = true;
};

struct dist_restored {
    std::uint64_t step = 0;
    std::uint32_t saved_world_size = 0;
    /// The gradients for this rank (sharded ones flat, holding `slices[id]`), and the sections
    /// this rank saved (rank 0's when the number of ranks changed).
    checkpoint contents;
    std::map<param_id, element_range> slices;
};

/// Manages `directory` for every rank of `comm`: `step-<20 digits>/` directories, each with
/// `rank-<5 digits>.ruda` per rank and `manifest.ruda`, and a `latest` file naming the newest
/// committed one. Every rank makes the same calls in the same order; one save is in flight at a
/// time (a save or load first waits for the one before). A communicator serves one manager: two
/// managers' collectives would interleave in orders the ranks need not agree on, so give each
/// its own (`mpi_communicator::create` duplicates one). The commit:
///   1. the ranks gather their declarations and agree on a plan (or all fail alike);
///   2. the save is staged (the snapshot is in host memory): `async_save` completes;
///   3. each rank writes its file durably on the manager's writer thread;
///   4. the ranks exchange outcomes: if any failed, every rank reports it and removes its file;
///   5. rank 0 writes the manifest (atomically) and moves `latest`, and tells the others.
/// A rank that dies or fails before 5 leaves `latest` where it was; the next save removes the
/// partial directory.
class dist_checkpoint_manager {
public:
    dist_checkpoint_manager(communicator& comm, std::filesystem::path directory,
                            dist_manager_options options = {});
    dist_checkpoint_manager(const dist_checkpoint_manager&) = delete;
    dist_checkpoint_manager& operator=(const dist_checkpoint_manager&) = delete;
    /// Waits for the save in flight.
    ~dist_checkpoint_manager();

    [[nodiscard]] const std::filesystem::path& directory() const noexcept { return directory_; }
    [[nodiscard]] std::filesystem::path path_of(std::uint64_t step) const;

    /// Snapshots `grads` (handles captured now), then saves them as `step` with this rank's
    /// `state` sections. Completes once staged, with the pending save whose `async_wait` or
    /// `wait` gives the commit's outcome (the same on every rank).
    template <backend B>
    boost::asio::awaitable<result<pending_save>>
    async_save(std::uint64_t step, const gradients_params& grads, placement_map placements,
               checkpoint state = {}, snapshot_options options = {})
    {
        auto record = co_await grads.to_record_async<B>(std::move(options));
        if (!record) {
            co_return std::move(record).error();
        }
        state.set_gradients(std::move(record).value());
        co_return co_await async_save_record(step, std::move(state), std::move(placements));
    }

    /// The same for gradients already in host memory (`contents`' record).
    boost::asio::awaitable<result<pending_save>>
    async_save_record(std::uint64_t step, checkpoint contents, placement_map placements);

    /// Step `step`'s gradients for this rank, re-sliced to this communicator's ranks; every
    /// rank fails if one does.
    boost::asio::awaitable<result<dist_restored>> load(std::uint64_t step,
                                                       dist_restore_options options = {});
    /// The step `latest` names; `errc::not_found` when there is none yet.
    boost::asio::awaitable<result<dist_restored>> load_latest(dist_restore_options options = {});

    /// The step `latest` names, or nothing when no checkpoint was committed yet.
    [[nodiscard]] result<std::optional<std::uint64_t>> latest_step() const;
    /// Steps with a manifest (committed), ascending.
    [[nodiscard]] result<std::vector<std::uint64_t>> steps() const;

private:
    struct staged_save;
    boost::asio::awaitable<void> finish_previous();
    boost::asio::awaitable<void> commit(std::shared_ptr<staged_save> save);
    result<dist_restored> read_step(std::uint64_t step, const dist_restore_options& options) const;
    std::optional<error> after_commit(std::uint64_t step);

    communicator& comm_;
    std::filesystem::path directory_;
    dist_manager_options options_;
    file_ops& ops_;
    std::shared_ptr<detail::save_state> in_flight_;
    boost::asio::thread_pool writer_{1};
};

} // namespace ruda
