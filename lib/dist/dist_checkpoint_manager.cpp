// The distributed checkpoint: plan agreement, each rank's durable file, the two-phase commit
// (outcomes exchanged, then rank 0's manifest and "latest"), retention; the re-slicing restore
// is dist_restore.cpp's.
#include <ruda/dist/dist_checkpoint_manager.hpp>

#include <ruda/checkpoint/detail/step_directory.hpp>

#include "element_bytes.hpp"
#include "wire.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>
#include <utility>

namespace ruda {

namespace {

constexpr std::string_view latest_name = "latest";
constexpr std::string_view directory_suffix = "";

// What each rank tells the others before a save: whether the step is committed already (the
// ranks share the directory, so they all see the same) and what it holds.
struct save_declaration {
    bool step_committed = false;
    std::vector<declared_tensor> tensors;
};

template <class Archive>
void serialize(Archive& ar, save_declaration& d)
{
    ar(d.step_committed, d.tensors);
}

// What each rank tells the others once its file is written (or not).
struct write_report {
    bool ok = false;
    std::string failure;
    std::uint64_t bytes = 0;
    std::vector<std::uint64_t> ids;       // the entries of the file
    std::vector<std::uint64_t> checksums; // and their payload checksums
};

template <class Archive>
void serialize(Archive& ar, write_report& r)
{
    ar(r.ok, r.failure, r.bytes, r.ids, r.checksums);
}

// The entry rank `p.rank` writes for its piece of `t`, from its own `entry`: flat elements of
// a replicated or sharded tensor that can be cut, the tensor itself otherwise.
gradient_entry piece_entry(const tensor_layout& t, const tensor_piece& p,
                           const gradient_entry& entry)
{
    const auto size = detail::cut_element_size(t);
    if (t.kind == placement_kind::rank_local || !size) {
        return entry;
    }
    const std::uint64_t first = t.kind == placement_kind::sharded ? 0 : p.range.offset;
    tensor_data slice{entry.data.bytes().slice(first * *size, p.range.length * *size),
                      {p.range.length},
                      t.stored};
    return {entry.id, entry.dtype, std::move(slice), entry.name};
}

error not_committed(std::uint64_t step, const std::string& why)
{
    return error{errc::io_error, "Step " + std::to_string(step) + " was not committed: " + why};
}

} // namespace

struct dist_checkpoint_manager::staged_save {
    std::uint64_t step = 0;
    save_plan plan;
    checkpoint file; // this rank's part
    std::shared_ptr<detail::save_state> state;
};

dist_checkpoint_manager::dist_checkpoint_manager(communicator& comm,
                                                 std::filesystem::path directory,
                                                 dist_manager_options options)
    : comm_(comm), directory_(std::move(directory)), options_(std::move(options)),
      ops_(options_.ops != nullptr ? *options_.ops : posix_file_ops())
{
}

dist_checkpoint_manager::~dist_checkpoint_manager() { writer_.join(); }

std::filesystem::path dist_checkpoint_manager::path_of(std::uint64_t step) const
{
    return directory_ / detail::step_name(step, directory_suffix);
}

boost::asio::awaitable<void> dist_checkpoint_manager::finish_previous()
{
    if (in_flight_ && !in_flight_->done()) {
        const auto executor = co_await boost::asio::this_coro::executor;
        static_cast<void>(
            co_await pending_save{in_flight_, executor}.async_wait(boost::asio::use_awaitable));
    }
}

boost::asio::awaitable<result<pending_save>>
dist_checkpoint_manager::async_save_record(std::uint64_t step, checkpoint contents,
                                           placement_map placements)
{
    co_await finish_previous();
    const auto me = static_cast<std::uint32_t>(comm_.rank());
    std::error_code ec;
    save_declaration mine{std::filesystem::exists(path_of(step) / manifest_file_name(), ec), {}};
    std::map<param_id, const gradient_entry*> by_id;
    for (const gradient_entry& e : contents.gradients().entries()) {
        const auto listed = placements.find(e.id);
        mine.tensors.push_back(
            {e.id, e.dtype, e.data.dtype(), e.data.shape(), e.data.bytes().size(),
             listed != placements.end() ? listed->second : options_.default_placement});
        by_id.emplace(e.id, &e);
    }
    auto gathered = co_await comm_.all_gather(detail::to_wire(mine));
    if (!gathered) {
        co_return error{gathered.error().code(), "Agreeing on the plan of step " +
                                                     std::to_string(step) + ": " +
                                                     gathered.error().message()};
    }
    std::vector<std::vector<declared_tensor>> declared;
    for (std::size_t rank = 0; rank < gathered.value().size(); ++rank) {
        BOOST_OUTCOME_CO_TRY(auto theirs, detail::from_wire<save_declaration>(
                                              gathered.value()[rank],
                                              "The declarations of rank " + std::to_string(rank)));
        if (theirs.step_committed) {
            co_return error{errc::io_error, "Step " + std::to_string(step) +
                                                " is committed already in " + directory_.string() +
                                                " (seen by rank " + std::to_string(rank) + ")"};
        }
        declared.push_back(std::move(theirs.tensors));
    }
    BOOST_OUTCOME_CO_TRY(auto plan, make_save_plan(declared));

    std::vector<gradient_entry> pieces;
    for (const tensor_layout& t : plan.tensors) {
        for (const tensor_piece& p : t.pieces) {
            if (p.rank == me) {
                pieces.push_back(piece_entry(t, p, *by_id.at(t.id)));
            }
        }
    }
    auto save = std::make_shared<staged_save>();
    save->step = step;
    save->plan = std::move(plan);
    save->file.set_gradients(gradients_params_record{std::move(pieces)});
    for (const checkpoint_section& s : contents.sections()) {
        BOOST_OUTCOME_CO_TRY(save->file.put_bytes(s.name, s.bytes));
    }
    save->state = std::make_shared<detail::save_state>();
    in_flight_ = save->state;
    boost::asio::co_spawn(writer_, commit(save), [state = save->state](std::exception_ptr e) {
        if (e) {
            state->complete(error{errc::io_error, "The save ended with an exception"});
        }
    });
    co_return pending_save{save->state, co_await boost::asio::this_coro::executor};
}

// Runs on the writer thread: this rank's file, the exchange of outcomes, rank 0's manifest
// and "latest", rank 0's decision.
boost::asio::awaitable<void> dist_checkpoint_manager::commit(std::shared_ptr<staged_save> save)
{
    const std::uint64_t step = save->step;
    const auto me = static_cast<std::uint32_t>(comm_.rank());
    const auto dir = path_of(step);
    const auto own_file = dir / rank_file_name(me);
    const auto fail = [&](const error& why) {
        static_cast<void>(ops_.remove(own_file));
        save->state->complete(why);
    };

    write_report report;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
        report.failure = "creating " + dir.string() + ": " + ec.message();
    } else if (auto written = save_checkpoint_file(own_file, save->file, options_.save, ops_);
               !written) {
        report.failure = written.error().message();
    } else if (auto reader = checkpoint_reader::open(own_file); !reader) {
        report.failure = reader.error().message();
    } else {
        report.ok = true;
        report.bytes = written.value();
        for (const checkpoint_entry_info& e : reader.value().index().entries) {
            report.ids.push_back(e.id.val());
            report.checksums.push_back(e.payload.checksum);
        }
    }

    // Phase 1: every rank's outcome, on every rank.
    auto gathered = co_await comm_.all_gather(detail::to_wire(report));
    if (!gathered) {
        fail(not_committed(step, gathered.error().message()));
        co_return;
    }
    std::string failures;
    for (std::uint32_t rank = 0; rank < gathered.value().size(); ++rank) {
        auto theirs = detail::from_wire<write_report>(gathered.value()[rank],
                                                      "The report of rank " + std::to_string(rank));
        std::string why = !theirs              ? theirs.error().message()
                          : !theirs.value().ok ? theirs.value().failure
                          : theirs.value().ids.size() != theirs.value().checksums.size()
                              ? "a report of ids and checksums that do not pair up"
                              : "";
        if (why.empty()) {
            std::map<std::uint64_t, std::uint64_t> checksum_of;
            for (std::size_t i = 0; i < theirs.value().ids.size(); ++i) {
                checksum_of[theirs.value().ids[i]] = theirs.value().checksums[i];
            }
            for (tensor_layout& t : save->plan.tensors) {
                for (tensor_piece& p : t.pieces) {
                    if (p.rank != rank) {
                        continue;
                    }
                    const auto found = checksum_of.find(t.id.val());
                    if (found == checksum_of.end()) {
                        why = "its file lacks parameter " + to_string(t.id);
                    } else {
                        p.checksum = found->second;
                    }
                }
            }
        }
        if (!why.empty()) {
            failures += (failures.empty() ? "" : "; ") + std::string("rank ") +
                        std::to_string(rank) + ": " + why;
        }
    }
    if (!failures.empty()) {
        fail(not_committed(step, failures));
        co_return;
    }

    // Phase 2: rank 0 commits and tells the others.
    byte_buffer decision;
    if (me == 0) {
        const dist_manifest manifest{dist_manifest::current_version, step, save->plan.world_size,
                                     save->plan.tensors};
        const auto manifest_path = dir / manifest_file_name();
        std::string why;
        if (auto written = write_manifest(manifest_path, manifest, ops_); !written) {
            why = "rank 0 writing the manifest: " + written.error().message();
        } else if (auto moved = detail::write_step_pointer(directory_ / latest_name, step,
                                                           directory_suffix, ops_);
                   !moved) {
            static_cast<void>(ops_.remove(manifest_path));
            why = "rank 0 moving \"latest\": " + moved.error().message();
        }
        decision.push_back(why.empty() ? 1 : 0);
        decision.insert(decision.end(), why.begin(), why.end());
    }
    auto told = co_await comm_.broadcast(std::move(decision), 0);
    if (!told || told.value().empty()) {
        fail(not_committed(step, !told ? told.error().message() : "rank 0 said nothing"));
        co_return;
    }
    if (told.value().front() != 1) {
        fail(not_committed(step, std::string(told.value().begin() + 1, told.value().end())));
        co_return;
    }
    saved_checkpoint saved{step, dir, report.bytes, std::nullopt};
    if (me == 0) {
        saved.cleanup_failure = after_commit(step);
    }
    save->state->complete(std::move(saved));
}

// Rank 0, after a commit: retention of committed steps, and removal of partial ones (a failed
// or interrupted save: no manifest) and of stale temporary files.
std::optional<error> dist_checkpoint_manager::after_commit(std::uint64_t step)
{
    std::optional<error> failure;
    std::vector<std::uint64_t> committed;
    std::vector<std::filesystem::path> partial;
    auto listed = detail::for_each_entry(directory_, [&](const std::filesystem::path& path) {
        const auto found = detail::step_of(path.filename().string(), directory_suffix);
        std::error_code ec;
        if (!found) {
            if (path.extension() == ".tmp") {
                partial.push_back(path);
            }
        } else if (std::filesystem::exists(path / manifest_file_name(), ec)) {
            if (*found != step) {
                committed.push_back(*found);
            }
        } else if (*found != step) {
            partial.push_back(path);
        }
    });
    if (!listed) {
        return listed.error();
    }
    std::sort(committed.begin(), committed.end());
    for (const std::uint64_t old :
         detail::past_retention(std::move(committed), options_.keep_last)) {
        partial.push_back(path_of(old));
    }
    for (const auto& path : partial) {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
        if (ec && !failure) {
            failure = error{errc::io_error, "Removing " + path.string() + ": " + ec.message()};
        }
    }
    return failure;
}

result<std::optional<std::uint64_t>> dist_checkpoint_manager::latest_step() const
{
    return detail::read_step_pointer(directory_ / latest_name, directory_suffix);
}

result<std::vector<std::uint64_t>> dist_checkpoint_manager::steps() const
{
    std::vector<std::uint64_t> found;
    BOOST_OUTCOME_TRY(detail::for_each_entry(directory_, [&](const std::filesystem::path& path) {
        const auto step = detail::step_of(path.filename().string(), directory_suffix);
        std::error_code ec;
        if (step && std::filesystem::exists(path / manifest_file_name(), ec)) {
            found.push_back(*step);
        }
    }));
    std::sort(found.begin(), found.end());
    return found;
}

boost::asio::awaitable<result<dist_restored>>
dist_checkpoint_manager::load(std::uint64_t step, dist_restore_options options)
{
    co_await finish_previous();
    auto restored = read_step(step, options);
    auto everyone = co_await comm_.agree(restored.has_value());
    if (!everyone) {
        co_return everyone.error();
    }
    if (restored && !everyone.value()) {
        co_return error{errc::io_error, "Step " + std::to_string(step) +
                                            " did not load on every rank (it did on rank " +
                                            std::to_string(comm_.rank()) + ")"};
    }
    co_return restored;
}

boost::asio::awaitable<result<dist_restored>>
dist_checkpoint_manager::load_latest(dist_restore_options options)
{
    co_await finish_previous();
    auto step = latest_step();
    if (step && !step.value()) {
        step = error{errc::not_found, "No checkpoint in " + directory_.string() + " yet"};
    }
    if (!step) {
        static_cast<void>(co_await comm_.agree(false)); // the others load nothing either
        co_return step.error();
    }
    co_return co_await load(*step.value(), std::move(options));
}

} // namespace ruda
