// Every state a power loss could leave, in the manner of ALICE and CrashMonkey: a recording
// file_ops logs each operation of a real save (the checkpoint file, "latest", the retention
// deletion); a model of the directory replays the log and, after every prefix of it,
// enumerates what POSIX lets survive a crash. Data not yet fsynced may be lost in whole or in
// part, page by page, and the file's size may be the old one or the new; a create, rename or
// unlink not yet made durable by an fsync of the directory may be undone, each independently
// of the others. Each distinct state is written to a directory, where the manager must load
// the previous or the new checkpoint exactly, and then save the next one.
#include "checkpoint_test_support.hpp"

#include <ruda/checkpoint/checkpoint_manager.hpp>

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace {

using bytes = std::vector<std::uint8_t>;
using ruda::test::temp_dir;

constexpr std::size_t page_size = 4096;

// One operation of a save, as the model needs it.
struct operation {
    enum class kind { create, write, fsync, rename, sync_directory, remove } what;
    std::string name; // create, remove: the file; rename: the source
    std::string to;   // rename: the target
    int fd = -1;      // write, fsync
    std::uint64_t offset = 0;
    bytes data;
};

// The plain POSIX operations, each logged. `sync_lies` drops fsyncs from the log: the model
// of a disk that ignores them, or of a save that forgot them, which the checker must catch.
class recording_ops : public ruda::file_ops {
public:
    explicit recording_ops(bool sync_lies = false) : sync_lies_(sync_lies) {}

    ruda::result<int> create(const std::filesystem::path& path) override
    {
        auto fd = posix().create(path);
        if (fd) {
            const std::lock_guard lock{mutex_};
            position_[fd.value()] = 0;
            log_.push_back({operation::kind::create, path.filename().string(), {}, fd.value(), 0, {}});
        }
        return fd;
    }
    ruda::result<std::size_t> write(int fd, const void* data, std::size_t size) override
    {
        auto written = posix().write(fd, data, size);
        if (written) {
            const std::lock_guard lock{mutex_};
            record(fd, data, written.value(), position_[fd]);
            position_[fd] += written.value();
        }
        return written;
    }
    ruda::result<void> pwrite(int fd, const void* data, std::size_t size,
                              std::uint64_t offset) override
    {
        auto done = posix().pwrite(fd, data, size, offset);
        if (done) {
            const std::lock_guard lock{mutex_};
            record(fd, data, size, offset);
        }
        return done;
    }
    ruda::result<void> fsync(int fd) override
    {
        auto done = posix().fsync(fd);
        const std::lock_guard lock{mutex_};
        if (done && !sync_lies_) {
            log_.push_back({operation::kind::fsync, {}, {}, fd, 0, {}});
        }
        return done;
    }
    ruda::result<void> rename(const std::filesystem::path& from,
                              const std::filesystem::path& to) override
    {
        auto done = posix().rename(from, to);
        if (done) {
            const std::lock_guard lock{mutex_};
            log_.push_back({operation::kind::rename, from.filename().string(),
                            to.filename().string(), -1, 0, {}});
        }
        return done;
    }
    ruda::result<void> sync_directory(const std::filesystem::path& dir) override
    {
        auto done = posix().sync_directory(dir);
        const std::lock_guard lock{mutex_};
        if (done && !sync_lies_) {
            log_.push_back({operation::kind::sync_directory, {}, {}, -1, 0, {}});
        }
        return done;
    }
    ruda::result<void> remove(const std::filesystem::path& path) override
    {
        auto done = posix().remove(path);
        if (done) {
            const std::lock_guard lock{mutex_};
            log_.push_back({operation::kind::remove, path.filename().string(), {}, -1, 0, {}});
        }
        return done;
    }

    [[nodiscard]] const std::vector<operation>& log() const { return log_; }

private:
    static ruda::file_ops& posix() { return ruda::posix_file_ops(); }
    void record(int fd, const void* data, std::size_t size, std::uint64_t offset)
    {
        const auto* first = static_cast<const std::uint8_t*>(data);
        log_.push_back({operation::kind::write, {}, {}, fd, offset, bytes(first, first + size)});
    }

    bool sync_lies_;
    std::mutex mutex_; // a save with several writers writes from several threads
    std::map<int, std::uint64_t> position_;
    std::vector<operation> log_;
};

// Saves with nothing made durable: the save after each crash state only has to succeed.
class unsynced_ops : public ruda::file_ops {
public:
    ruda::result<void> fsync(int /*fd*/) override { return ruda::success(); }
    ruda::result<void> sync_directory(const std::filesystem::path& /*dir*/) override
    {
        return ruda::success();
    }
};

// A directory entry change not yet made durable: `from` unbound and `to` bound to `file`.
struct entry_change {
    std::optional<std::string> from;
    std::optional<std::string> to;
    std::size_t file = 0;
};

// A file's bytes as the disk has them (after its last fsync) and as the page cache has them.
struct file_state {
    bytes durable;
    bytes current;
};

using directory_state = std::map<std::string, bytes>;

// The directory as a crash could leave it after a prefix of the log.
class crash_model {
public:
    explicit crash_model(const std::filesystem::path& dir)
    {
        for (const auto& item : std::filesystem::directory_iterator(dir)) {
            const auto content = ruda::test::read_bytes(item.path());
            durable_names_[item.path().filename().string()] = files_.size();
            files_.push_back({content, content});
        }
        names_ = durable_names_;
    }

    void apply(const operation& op)
    {
        switch (op.what) {
        case operation::kind::create:
            open_[op.fd] = files_.size();
            files_.push_back({});
            change({std::nullopt, op.name, open_[op.fd]});
            break;
        case operation::kind::write: {
            bytes& content = files_[open_.at(op.fd)].current;
            content.resize(std::max<std::size_t>(content.size(), op.offset + op.data.size()));
            std::copy(op.data.begin(), op.data.end(), content.begin() + static_cast<std::ptrdiff_t>(op.offset));
            break;
        }
        case operation::kind::fsync: {
            file_state& file = files_[open_.at(op.fd)];
            file.durable = file.current;
            break;
        }
        case operation::kind::rename:
            change({op.name, op.to, names_.at(op.name)});
            break;
        case operation::kind::remove:
            change({op.name, std::nullopt, names_.at(op.name)});
            break;
        case operation::kind::sync_directory:
            for (const entry_change& c : pending_) {
                apply_change(durable_names_, c);
            }
            pending_.clear();
            break;
        }
    }

    // Every state a crash now could leave.
    [[nodiscard]] std::vector<directory_state> crash_states() const
    {
        std::vector<directory_state> states;
        BOOST_REQUIRE(pending_.size() < 16);
        for (std::uint32_t kept = 0; kept < (1U << pending_.size()); ++kept) {
            auto names = durable_names_;
            for (std::size_t k = 0; k < pending_.size(); ++k) {
                if ((kept >> k & 1U) != 0) {
                    apply_change(names, pending_[k]);
                }
            }
            add_contents(names, names.begin(), {}, states);
        }
        return states;
    }

private:
    static void apply_change(std::map<std::string, std::size_t>& names, const entry_change& c)
    {
        if (c.from) {
            names.erase(*c.from);
        }
        if (c.to) {
            names[*c.to] = c.file;
        }
    }

    void change(const entry_change& c)
    {
        apply_change(names_, c);
        pending_.push_back(c);
    }

    // Each name in turn given each content its file may have after a crash.
    void add_contents(const std::map<std::string, std::size_t>& names,
                      std::map<std::string, std::size_t>::const_iterator next,
                      directory_state state, std::vector<directory_state>& states) const
    {
        if (next == names.end()) {
            states.push_back(std::move(state));
            return;
        }
        for (bytes& content : possible_contents(files_[next->second])) {
            state[next->first] = std::move(content);
            add_contents(names, std::next(next), state, states);
        }
    }

    // The durable size or the current one; each page whose bytes differ, old or new.
    static std::vector<bytes> possible_contents(const file_state& file)
    {
        const std::size_t longest = std::max(file.durable.size(), file.current.size());
        const auto byte_at = [](const bytes& b, std::size_t i) -> std::uint8_t {
            return i < b.size() ? b[i] : 0;
        };
        std::vector<std::size_t> changed;
        for (std::size_t page = 0; page * page_size < longest; ++page) {
            for (std::size_t i = page * page_size; i < std::min(longest, (page + 1) * page_size); ++i) {
                if (byte_at(file.durable, i) != byte_at(file.current, i)) {
                    changed.push_back(page);
                    break;
                }
            }
        }
        BOOST_REQUIRE(changed.size() < 12);
        std::vector<bytes> contents;
        std::set<std::uint64_t> distinct;
        for (const std::size_t size : {file.durable.size(), file.current.size()}) {
            for (std::uint32_t kept = 0; kept < (1U << changed.size()); ++kept) {
                bytes content = file.durable;
                content.resize(longest, 0);
                for (std::size_t k = 0; k < changed.size(); ++k) {
                    if ((kept >> k & 1U) != 0) {
                        const std::size_t at = changed[k] * page_size;
                        for (std::size_t i = at; i < std::min(longest, at + page_size); ++i) {
                            content[i] = byte_at(file.current, i);
                        }
                    }
                }
                content.resize(size);
                if (distinct.insert(ruda::detail::checksum(content)).second) {
                    contents.push_back(std::move(content));
                }
            }
        }
        return contents;
    }

    std::vector<file_state> files_;
    std::map<std::string, std::size_t> names_;         // as the process sees them
    std::map<std::string, std::size_t> durable_names_; // as the disk has them
    std::vector<entry_change> pending_;
    std::map<int, std::size_t> open_;
};

// About 10 KiB, so that a checkpoint spans three pages.
ruda::checkpoint small_contents_of(std::uint64_t step)
{
    std::vector<ruda::gradient_entry> entries;
    for (std::uint64_t id = 1; id <= 2; ++id) {
        std::vector<float> values(1200);
        for (std::size_t k = 0; k < values.size(); ++k) {
            values[k] = static_cast<float>(step * 1000 + id) + static_cast<float>(k) * 1e-3F;
        }
        entries.push_back({ruda::param_id{id}, ruda::dtype::f32(),
                           ruda::tensor_data::from_values(std::move(values), {1200}).value()});
    }
    ruda::checkpoint c{ruda::gradients_params_record{std::move(entries)}};
    c.put("step", step).value();
    return c;
}

void materialize(const std::filesystem::path& dir, const directory_state& state)
{
    for (const auto& item : std::filesystem::directory_iterator(dir)) {
        std::filesystem::remove(item.path());
    }
    for (const auto& [name, content] : state) {
        ruda::test::write_bytes(dir / name, content);
    }
}

// The state's names and the checksums of their contents, hashed.
std::uint64_t fingerprint(const directory_state& state)
{
    ruda::detail::running_checksum sum;
    for (const auto& [name, content] : state) {
        const std::uint64_t hash = ruda::detail::checksum(content);
        sum.update({reinterpret_cast<const std::uint8_t*>(name.c_str()), name.size() + 1});
        sum.update({reinterpret_cast<const std::uint8_t*>(&hash), sizeof hash});
    }
    return sum.digest();
}

struct check_outcome {
    std::size_t prefixes = 0;
    std::size_t states = 0;
    std::size_t failures = 0;
};

// Steps 1 and 2 saved (keep_last 2); step 3's save recorded, every crash state of it checked.
check_outcome check_every_crash_state(bool sync_lies)
{
    const temp_dir dir;
    const ruda::checkpoint_manager_options options{.keep_last = 2};
    {
        ruda::checkpoint_manager manager{dir.path(), options};
        BOOST_REQUIRE(manager.save(1, small_contents_of(1)));
        BOOST_REQUIRE(manager.save(2, small_contents_of(2)));
    }
    std::filesystem::remove(dir / ".lock"); // not a file of the save's; a new one is made
    crash_model model{dir.path()};
    recording_ops recorder{sync_lies};
    {
        ruda::checkpoint_manager manager{dir.path(), {.keep_last = 2, .ops = &recorder}};
        BOOST_REQUIRE(manager.save(3, small_contents_of(3)));
    }
    const auto& log = recorder.log();
    BOOST_REQUIRE(std::any_of(log.begin(), log.end(), [](const operation& op) {
        return op.what == operation::kind::remove; // the retention deletion of step 1
    }));

    const temp_dir scratch;
    unsynced_ops quick;
    check_outcome outcome;
    std::set<std::uint64_t> seen; // each distinct state checked once
    for (std::size_t prefix = 0; prefix <= log.size(); ++prefix) {
        if (prefix > 0) {
            model.apply(log[prefix - 1]);
        }
        ++outcome.prefixes;
        for (const directory_state& state : model.crash_states()) {
            if (!seen.insert(fingerprint(state)).second) {
                continue;
            }
            ++outcome.states;
            materialize(scratch.path(), state);
            ruda::checkpoint_manager manager{scratch.path(), {.keep_last = 2, .ops = &quick}};
            const auto latest = manager.load_latest();
            const bool sound = latest && (ruda::test::as_saved(latest.value()) == small_contents_of(2) ||
                                          ruda::test::as_saved(latest.value()) == small_contents_of(3));
            const auto newest = manager.load_newest_valid();
            const bool newest_sound = newest && (newest.value().step == 2 || newest.value().step == 3) &&
                                      ruda::test::as_saved(newest.value().contents) ==
                                          small_contents_of(newest.value().step);
            const bool saved = manager.save(4, small_contents_of(4)).has_value();
            const auto after = manager.load_latest();
            const bool next_saves =
                saved && after && ruda::test::as_saved(after.value()) == small_contents_of(4);
            if (!sound || !newest_sound || !next_saves) {
                ++outcome.failures;
                if (!sync_lies) {
                    BOOST_TEST_MESSAGE("crash after operation " << prefix << ": "
                                       << (latest ? "loads another checkpoint" : latest.error().message()));
                }
            }
        }
    }
    return outcome;
}

} // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_power_loss)

BOOST_AUTO_TEST_CASE(every_crash_state_of_a_save_loads_the_previous_or_the_new_checkpoint)
{
    const auto outcome = check_every_crash_state(false);
    BOOST_TEST_MESSAGE(outcome.states << " crash states after " << outcome.prefixes
                                      << " prefixes of the save's operations");
    // The checkpoint file (create, its writes, fsync, rename, directory fsync), "latest" (the
    // same) and the deletion: 14 operations, 15 prefixes. Its three pages and the directory
    // entries, lost and kept, make 36 distinct states.
    BOOST_TEST(outcome.prefixes >= 15U);
    BOOST_TEST(outcome.states >= 30U);
    BOOST_TEST(outcome.failures == 0U);
}

BOOST_AUTO_TEST_CASE(the_checker_finds_the_states_a_save_without_fsync_would_leave)
{
    // The same save with its fsyncs taken out of the log: nothing is ever durable, so a crash
    // can keep a rename but lose the renamed file's pages. The checker must see it.
    const auto outcome = check_every_crash_state(true);
    BOOST_TEST_MESSAGE(outcome.failures << " of " << outcome.states
                                        << " crash states fail without fsync");
    BOOST_TEST(outcome.failures > 0U);
}

BOOST_AUTO_TEST_SUITE_END()
