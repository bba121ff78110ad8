// The checkpoint directory: the commit order is checkpoint file (durable), then "latest"
// (durable), then retention and removal of stale temporary files, so a failure at any point
// leaves the previous latest checkpoint in place and loadable.
#include <ruda/checkpoint/checkpoint_manager.hpp>
#include <ruda/checkpoint/detail/durable_writer.hpp>
#include <ruda/checkpoint/detail/posix_io.hpp>
#include <ruda/checkpoint/detail/regular_file.hpp>
#include <ruda/checkpoint/detail/step_directory.hpp>

#include <boost/asio/post.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdio>
#include <iterator>
#include <string>
#include <system_error>

namespace ruda {
namespace detail {

void save_state::complete(result<saved_checkpoint> outcome)
{
    std::list<waiter> to_call;
    {
        const std::lock_guard lock{mutex_};
        outcome_.emplace(std::move(outcome));
        to_call.splice(to_call.end(), waiters_);
    }
    done_cv_.notify_all();
    for (waiter& w : to_call) {
        post_completion(std::move(w.work), std::move(w.handler), *outcome_);
    }
}

void save_state::add_waiter(boost::asio::any_io_executor work, handler_type handler)
{
    std::unique_lock lock{mutex_};
    if (!outcome_) {
        waiters_.emplace_back(std::move(work), std::move(handler));
        return;
    }
    lock.unlock();
    post_completion(std::move(work), std::move(handler), *outcome_);
}

bool save_state::done() const
{
    const std::lock_guard lock{mutex_};
    return outcome_.has_value();
}

result<saved_checkpoint> save_state::wait() const
{
    std::unique_lock lock{mutex_};
    done_cv_.wait(lock, [this] { return outcome_.has_value(); });
    return *outcome_;
}

} // namespace detail

namespace {

constexpr std::string_view file_suffix = ".ruda";
constexpr std::string_view latest_name = "latest";
constexpr std::string_view lock_name = ".lock";

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
    if (lock_fd_ >= 0) {
        ::close(lock_fd_); // releases the lock
    }
}

// The lock is an flock on `.lock`, which records who holds it for the message a second manager
// gives. The kernel drops it when the descriptor's last copy closes: with the process, however
// it ends. Called with save_mutex_ held.
result<void> checkpoint_manager::hold_directory()
{
    if (lock_fd_ >= 0) {
        return success();
    }
    const auto path = directory_ / lock_name;
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        return detail::io_error_from_errno("open the lock", path);
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK) {
            auto failure = detail::io_error_from_errno("lock", path);
            ::close(fd);
            return failure;
        }
        std::array<char, 256> holder{};
        const ssize_t n = ::pread(fd, holder.data(), holder.size() - 1, 0);
        ::close(fd);
        const std::string who =
            n > 0 ? std::string(holder.data(), static_cast<std::size_t>(n)) : "holder unknown";
        return error{errc::directory_in_use, "Checkpoint directory " + directory_.string() +
                                                 " is in use by another manager (" + who +
                                                 "); one manager per directory"};
    }
    std::array<char, 256> host{};
    static_cast<void>(::gethostname(host.data(), host.size() - 1));
    const std::string holder = "pid " + std::to_string(::getpid()) + " on " + host.data();
    // Only a courtesy for the message: the lock itself is what counts.
    if (::ftruncate(fd, 0) == 0) {
        static_cast<void>(::pwrite(fd, holder.data(), holder.size(), 0));
    }
    lock_fd_ = fd;
    return success();
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
    BOOST_OUTCOME_TRY(hold_directory());
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
    const std::size_t keep_others = std::max<std::size_t>(options_.keep_last, 1) - 1;
    if (others.size() > keep_others) {
        others.resize(others.size() - keep_others);
        for (const std::uint64_t old : others) {
            note(ops_.remove(path_of(old)));
        }
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
    BOOST_OUTCOME_TRY(auto candidates, steps());
    if (candidates.empty()) {
        return error{errc::not_found, "No checkpoint in " + directory_.string() + " yet"};
    }
    // Every file's frame first: the runs they record make the line of the run "latest" names.
    const std::optional<std::string> latest_run = latest_run_id();
    std::vector<std::optional<checkpoint_reader>> readers;
    std::vector<run_identity> identities;
    std::vector<skipped_checkpoint> skipped;
    for (auto step = candidates.rbegin(); step != candidates.rend(); ++step) {
        auto reader = checkpoint_reader::open(path_of(*step), options.max_header_bytes);
        if (!reader) {
            skipped.push_back({*step, std::move(reader).error()});
            readers.emplace_back();
            continue;
        }
        if (const auto& identity = reader.value().index().identity) {
            identities.push_back(*identity);
        }
        readers.emplace_back(std::move(reader).value());
    }
    const auto line = latest_run ? lineage_of(*latest_run, identities)
                                 : std::set<std::string, std::less<>>{};
    const auto run_of = [](const checkpoint_reader& reader) -> std::optional<std::string> {
        const auto& identity = reader.index().identity;
        return identity ? std::optional{identity->run_id} : std::nullopt;
    };
    const auto found = [&](std::uint64_t step, checkpoint contents, bool other) {
        note_resumed(contents);
        std::string run = contents.identity() ? contents.identity()->run_id : std::string{};
        std::sort(skipped.begin(), skipped.end(),
                  [](const auto& a, const auto& b) { return a.step > b.step; });
        return newest_valid_checkpoint{step,          std::move(contents), std::move(skipped),
                                       std::move(run), latest_run,         other};
    };
    std::vector<std::size_t> of_other_runs;
    for (std::size_t k = 0; k < readers.size(); ++k) {
        const std::uint64_t step = candidates[candidates.size() - 1 - k];
        if (!readers[k]) {
            continue;
        }
        const auto run = run_of(*readers[k]);
        if (latest_run && (!run || !line.contains(*run))) {
            skipped.push_back({step,
                               error{errc::other_run,
                                     "written by " + (run ? "run " + *run : "no recorded run") +
                                         ", not of the line of run " + *latest_run +
                                         " that \"latest\" names"},
                               run});
            of_other_runs.push_back(k);
            continue;
        }
        auto loaded = std::move(*readers[k]).load(options);
        if (loaded) {
            return found(step, std::move(loaded).value(), false);
        }
        skipped.push_back({step, std::move(loaded).error(), run});
    }
    // None of the line "latest" names loads: the newest of another run that does, said so.
    for (const std::size_t k : of_other_runs) {
        const std::uint64_t step = candidates[candidates.size() - 1 - k];
        auto loaded = load_checkpoint_file(path_of(step), options);
        if (loaded) {
            return found(step, std::move(loaded).value(), true);
        }
        const auto at = std::find_if(skipped.begin(), skipped.end(),
                                     [step](const auto& s) { return s.step == step; });
        at->why = error{loaded.error().code(), at->why.message() + "; " + loaded.error().message()};
    }
    std::sort(skipped.begin(), skipped.end(),
              [](const auto& a, const auto& b) { return a.step > b.step; });
    std::string why = "No checkpoint in " + directory_.string() + " loads";
    for (const skipped_checkpoint& s : skipped) {
        why += "; step " + std::to_string(s.step) + ": " + s.why.message();
    }
    return error{errc::io_error, why};
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
