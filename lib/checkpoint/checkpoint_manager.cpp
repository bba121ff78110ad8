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
    : directory_(std::move(directory)), options_(options),
      ops_(options.ops != nullptr ? *options.ops : posix_file_ops())
{
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
    std::error_code ec;
    std::filesystem::create_directories(directory_, ec);
    if (ec) {
        return error{errc::io_error, "Creating " + directory_.string() + ": " + ec.message()};
    }
    BOOST_OUTCOME_TRY(hold_directory());
    saved_checkpoint saved{step, path_of(step), 0, std::nullopt};
    BOOST_OUTCOME_TRY(saved.bytes, save_checkpoint_file(saved.path, contents, options_.save, ops_));

    // "latest" moves only now that the checkpoint is durable.
    BOOST_OUTCOME_TRY(
        detail::write_step_pointer(directory_ / latest_name, step, file_suffix, ops_));
    saved.cleanup_failure = after_save(step);
    return saved;
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
    boost::asio::post(writer_, [this, state, step, contents = std::move(contents)] {
        state->complete(save(step, contents));
    });
    return state;
}

result<checkpoint> checkpoint_manager::load(std::uint64_t step,
                                            const checkpoint_load_options& options) const
{
    return load_checkpoint_file(path_of(step), options);
}

result<std::optional<std::uint64_t>> checkpoint_manager::latest_step() const
{
    return detail::read_step_pointer(directory_ / latest_name, file_suffix);
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
    std::vector<skipped_checkpoint> skipped;
    BOOST_OUTCOME_TRY(auto candidates, steps());
    if (candidates.empty()) {
        return error{errc::not_found, "No checkpoint in " + directory_.string() + " yet"};
    }
    for (auto step = candidates.rbegin(); step != candidates.rend(); ++step) {
        auto loaded = load(*step, options);
        if (loaded) {
            return newest_valid_checkpoint{*step, std::move(loaded).value(), std::move(skipped)};
        }
        skipped.push_back({*step, std::move(loaded).error()});
    }
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
