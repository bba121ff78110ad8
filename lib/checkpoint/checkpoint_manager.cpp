// The checkpoint directory: the commit order is checkpoint file (durable), then "latest"
// (durable), then retention and removal of stale temporary files, so a failure at any point
// leaves the previous latest checkpoint in place and loadable. The directory's lock is
// directory_lock.cpp's, the search for the newest checkpoint that loads newest_valid.cpp's, and
// a queued save's shared outcome save_state.cpp's.
#include <ruda/checkpoint/checkpoint_manager.hpp>
#include <ruda/checkpoint/detail/durable_writer.hpp>
#include <ruda/checkpoint/detail/posix_io.hpp>
#include <ruda/checkpoint/detail/regular_file.hpp>
#include <ruda/checkpoint/detail/step_directory.hpp>

#include <boost/asio/post.hpp>

#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <string>
#include <system_error>

namespace ruda {
namespace {

constexpr std::string_view file_suffix = ".ruda";
constexpr std::string_view latest_name = "latest";

std::string file_name(std::uint64_t step)
{
    return detail::step_name(step, file_suffix);
}

} // namespace

checkpoint_manager::checkpoint_manager(std::filesystem::path directory,
                                       checkpoint_manager_options options)
    : directory_(std::move(directory)), options_(std::move(options)),
      ops_(options_.ops != nullptr ? *options_.ops : posix_file_ops())
{
    if (options_.run_id.empty()) {
        options_.run_id = generate_run_id();
    }
}

checkpoint_manager::~checkpoint_manager()
{
    writer_.join();
}

std::filesystem::path checkpoint_manager::path_of(std::uint64_t step) const
{
    return directory_ / file_name(step);
}

result<saved_checkpoint> checkpoint_manager::save(std::uint64_t step, const checkpoint& contents)
{
    const std::lock_guard lock{save_mutex_};
    BOOST_OUTCOME_TRY(check_run_id(options_.run_id));
    std::error_code ec;
    std::filesystem::create_directories(directory_, ec);
    if (ec) {
        return error{errc::io_error, "Creating " + directory_.string() + ": " + ec.message()};
    }
    BOOST_OUTCOME_TRY(lock_.hold(directory_));
    BOOST_OUTCOME_TRY(const auto present, steps());
    BOOST_OUTCOME_TRY(check_step(step, present));
    saved_checkpoint saved{step, path_of(step), 0, std::nullopt};
    checkpoint_save_options save_options = options_.save;
    save_options.identity = run_identity{options_.run_id, step, resumed_run_id()};
    BOOST_OUTCOME_TRY(saved.bytes, save_checkpoint_file(saved.path, contents, save_options, ops_));

    // "latest" moves only now that the checkpoint is durable.
    BOOST_OUTCOME_TRY(detail::write_step_pointer(directory_ / latest_name, step, file_suffix, ops_,
                                                 options_.run_id));
    saved.cleanup_failure = discard_newer(step);
    if (auto failure = after_save(step); failure && !saved.cleanup_failure) {
        saved.cleanup_failure = std::move(failure);
    }
    return saved;
}

// A step at or below the newest present is refused unless a rollback was asked for. "latest"
// counts too: it may name a step whose file is gone.
result<void> checkpoint_manager::check_step(std::uint64_t step,
                                            const std::vector<std::uint64_t>& present) const
{
    if (options_.on_newer == newer_checkpoints::discard) {
        return success();
    }
    std::optional<std::uint64_t> newest;
    if (!present.empty()) {
        newest = present.back();
    }
    const auto latest = detail::read_pointer(directory_ / latest_name, file_suffix);
    if (latest && latest.value() && (!newest || latest.value()->step > *newest)) {
        newest = latest.value()->step;
    }
    if (!newest || *newest < step) {
        return success();
    }
    std::string holder;
    if (latest && latest.value() && !latest.value()->run_id.empty()) {
        holder = latest.value()->run_id == options_.run_id
                     ? " (\"latest\" names step " + std::to_string(latest.value()->step) +
                           " of this run)"
                     : " (\"latest\" names step " + std::to_string(latest.value()->step) +
                           " of run " + latest.value()->run_id + ", not this run " +
                           options_.run_id + ")";
    }
    return error{errc::step_not_newer,
                 "Checkpoint directory " + directory_.string() + " holds step " +
                     std::to_string(*newest) + holder + ", not below step " +
                     std::to_string(step) +
                     " of this save; save into a fresh directory, or roll back deliberately "
                     "with newer_checkpoints::discard (\"latest\" moves to this step first, "
                     "then the newer checkpoints are removed)"};
}

// The rollback's last part: with "latest" on `step`, every newer checkpoint goes, and the
// directory is synced so that none comes back.
std::optional<error> checkpoint_manager::discard_newer(std::uint64_t step)
{
    if (options_.on_newer != newer_checkpoints::discard) {
        return std::nullopt;
    }
    auto listed = steps();
    if (!listed) {
        return listed.error();
    }
    std::optional<error> failure;
    bool removed = false;
    for (const std::uint64_t newer : listed.value()) {
        if (newer <= step) {
            continue;
        }
        if (auto gone = ops_.remove(path_of(newer)); !gone && !failure) {
            failure = gone.error();
        }
        removed = true;
    }
    if (removed) {
        if (auto synced = ops_.sync_directory(directory_); !synced && !failure) {
            failure = synced.error();
        }
    }
    return failure;
}

// Retention and stale temporary files; the save has succeeded whatever happens here.
std::optional<error> checkpoint_manager::after_save(std::uint64_t step)
{
    std::optional<error> failure;
    const auto note = [&failure](result<void> r) {
        if (!r && !failure) {
            failure = r.error();
        }
    };
    // The latest (`step`) and the newest keep_last - 1 others stay.
    auto listed = steps();
    if (!listed) {
        return listed.error();
    }
    auto others = std::move(listed).value();
    std::erase(others, step);
    for (const std::uint64_t old : detail::past_retention(std::move(others), options_.keep_last)) {
        note(ops_.remove(path_of(old)));
    }
    note(detail::for_each_entry(directory_, [&](const std::filesystem::path& path) {
        if (path.extension() == ".tmp") {
            note(ops_.remove(path)); // no write of ours is in progress: it is stale
        }
    }));
    return failure;
}

std::shared_ptr<detail::save_state> checkpoint_manager::queue_write(std::uint64_t step,
                                                                   checkpoint contents)
{
    auto state = std::make_shared<detail::save_state>();
    {
        const std::lock_guard lock{queue_mutex_};
        ++queued_;
    }
    boost::asio::post(writer_, [this, state, step, contents = std::move(contents)] {
        state->complete(save(step, contents));
        {
            const std::lock_guard lock{queue_mutex_};
            --queued_;
        }
        queue_room_.notify_all(); // after the save is done: a caller let in may rely on it
    });
    return state;
}

pending_save checkpoint_manager::queue_save(std::uint64_t step, checkpoint contents)
{
    {
        std::unique_lock lock{queue_mutex_};
        const std::size_t most = std::max<std::size_t>(options_.max_queued_saves, 1);
        queue_room_.wait(lock, [&] { return queued_ < most; });
    }
    return pending_save{queue_write(step, std::move(contents)),
                        boost::asio::system_executor{}};
}

result<checkpoint> checkpoint_manager::load(std::uint64_t step,
                                            const checkpoint_load_options& options) const
{
    auto loaded = load_checkpoint_file(path_of(step), options);
    if (loaded) {
        note_resumed(loaded.value());
    }
    return loaded;
}

void checkpoint_manager::note_resumed(const checkpoint& loaded) const
{
    if (loaded.identity() && loaded.identity()->run_id != options_.run_id) {
        const std::lock_guard lock{resumed_mutex_};
        resumed_from_ = loaded.identity()->run_id;
    }
}

std::string checkpoint_manager::resumed_run_id() const
{
    const std::lock_guard lock{resumed_mutex_};
    return resumed_from_;
}

result<std::optional<std::uint64_t>> checkpoint_manager::latest_step() const
{
    return detail::read_step_pointer(directory_ / latest_name, file_suffix);
}

std::optional<std::string> checkpoint_manager::latest_run_id() const
{
    const auto latest = detail::read_pointer(directory_ / latest_name, file_suffix);
    if (!latest || !latest.value()) {
        return std::nullopt;
    }
    if (!latest.value()->run_id.empty()) {
        return latest.value()->run_id;
    }
    const auto reader = checkpoint_reader::open(path_of(latest.value()->step));
    if (reader && reader.value().index().identity) {
        return reader.value().index().identity->run_id;
    }
    return std::nullopt;
}

result<checkpoint> checkpoint_manager::load_latest(const checkpoint_load_options& options) const
{
    BOOST_OUTCOME_TRY(const auto step, latest_step());
    if (!step) {
        return error{errc::not_found, "No checkpoint in " + directory_.string() + " yet"};
    }
    auto loaded = load(*step, options);
    if (!loaded) {
        return error{loaded.error().code(),
                     "The checkpoint \"latest\" names (step " + std::to_string(*step) +
                         ") does not load: " + loaded.error().message() +
                         "; load_newest_valid() finds the newest one that does"};
    }
    return loaded;
}

result<newest_valid_checkpoint>
checkpoint_manager::load_newest_valid(const checkpoint_load_options& options) const
{
    BOOST_OUTCOME_TRY(const auto candidates, steps());
    BOOST_OUTCOME_TRY(
        auto found,
        detail::find_newest_valid(
            directory_, candidates, [this](std::uint64_t step) { return path_of(step); },
            candidates.empty() ? std::nullopt : latest_run_id(), options));
    note_resumed(found.contents);
    return found;
}

result<std::vector<std::uint64_t>> checkpoint_manager::steps() const
{
    std::vector<std::uint64_t> found;
    BOOST_OUTCOME_TRY(detail::for_each_entry(directory_, [&found](const auto& path) {
        if (const auto step = detail::step_of(path.filename().string(), file_suffix)) {
            found.push_back(*step);
        }
    }));
    std::sort(found.begin(), found.end());
    return found;
}

} // namespace ruda

namespace ruda::detail {

result<void> check_group_sources(const std::vector<tensor_group_source>& groups,
                                 const checkpoint& state)
{
    std::vector<std::string_view> seen;
    for (const tensor_group_source& g : groups) {
        BOOST_OUTCOME_TRY(check_item_name(g.name, "A group"));
        if (std::find(seen.begin(), seen.end(), g.name) != seen.end()) {
            return error{errc::malformed_record, "Group " + g.name + " is given twice"};
        }
        seen.push_back(g.name);
        const gradients_params_record* already = state.group(g.name);
        if (already != nullptr && !already->entries().empty()) {
            return error{errc::malformed_record,
                         "Group " + g.name +
                             " is given twice: the checkpoint to save holds it already"};
        }
    }
    return success();
}

result<checkpoint> with_groups(checkpoint state, std::vector<std::string> names,
                               std::vector<gradients_params_record> records)
{
    for (std::size_t k = 0; k < names.size() && k < records.size(); ++k) {
        BOOST_OUTCOME_TRY(state.put_group(std::move(names[k]), std::move(records[k])));
    }
    return state;
}

} // namespace ruda::detail
