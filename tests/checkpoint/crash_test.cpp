// Crash consistency: a child process saves checkpoints in a loop and is killed with SIGKILL
// at 200 random moments (while writing payloads, fsyncing, renaming, moving "latest" or
// removing old files). After every kill the manager must load a complete checkpoint equal to
// one that was fully written, never a torn one, and the next save must clean up.
#include "checkpoint_test_support.hpp"

#include <ruda/checkpoint/checkpoint_manager.hpp>

#include <boost/test/unit_test.hpp>

#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <random>

namespace {

using ruda::test::temp_dir;

constexpr int trials = 200;

// About 1 MiB a checkpoint, so that a kill often lands inside a write.
ruda::checkpoint large_contents_of(std::uint64_t step)
{
    std::vector<ruda::gradient_entry> entries;
    for (std::uint64_t id = 1; id <= 4; ++id) {
        std::vector<float> values(65536);
        for (std::size_t k = 0; k < values.size(); ++k) {
            values[k] = static_cast<float>(step * 1000 + id) + static_cast<float>(k) * 1e-6F;
        }
        const std::size_t n = values.size();
        entries.push_back({ruda::param_id{id}, ruda::dtype::f32(),
                           ruda::tensor_data::from_values(std::move(values), {n}).value()});
    }
    ruda::checkpoint c{ruda::gradients_params_record{std::move(entries)}};
    c.put("step", step).value();
    return c;
}

std::size_t count_tmp(const std::filesystem::path& dir)
{
    std::size_t n = 0;
    for (const auto& item : std::filesystem::directory_iterator(dir)) {
        n += item.path().extension() == ".tmp" ? 1 : 0;
    }
    return n;
}

void sleep_us(long us)
{
    const timespec pause{0, us * 1000};
    ::nanosleep(&pause, nullptr);
}

// RLIMIT_FSIZE lowered, with SIGXFSZ ignored so that the kernel fails writes past it with
// EFBIG instead of killing the process; both restored at the end of the scope.
class file_size_limit {
public:
    explicit file_size_limit(rlim_t bytes)
    {
        BOOST_REQUIRE(::getrlimit(RLIMIT_FSIZE, &previous_limit_) == 0);
        struct sigaction ignore {};
        ignore.sa_handler = SIG_IGN;
        BOOST_REQUIRE(::sigaction(SIGXFSZ, &ignore, &previous_action_) == 0);
        rlimit limited = previous_limit_;
        limited.rlim_cur = bytes;
        BOOST_REQUIRE(::setrlimit(RLIMIT_FSIZE, &limited) == 0);
    }
    ~file_size_limit()
    {
        ::setrlimit(RLIMIT_FSIZE, &previous_limit_);
        ::sigaction(SIGXFSZ, &previous_action_, nullptr);
    }
    file_size_limit(const file_size_limit&) = delete;
    file_size_limit& operator=(const file_size_limit&) = delete;

private:
    rlimit previous_limit_{};
    struct sigaction previous_action_ {};
};

} // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_crash)

BOOST_AUTO_TEST_CASE(sigkill_at_random_moments_never_leaves_a_torn_checkpoint)
{
    const temp_dir dir;
    const ruda::checkpoint_manager_options options{.keep_last = 2};
    {
        ruda::checkpoint_manager first{dir.path(), options};
        BOOST_REQUIRE(first.save(0, large_contents_of(0)));
    }
    std::mt19937_64 random{20261203};
    std::uint64_t next = 1;
    std::uint64_t last_loaded = 0;
    int interrupted = 0; // kills that left a temporary file: the write was cut short
    int advanced = 0;    // kills after which the child had made at least one checkpoint
    for (int trial = 0; trial < trials; ++trial) {
        // The child says when its first save starts, so the kill's random moment falls among
        // its saves however long its setup takes (under a sanitizer, longer than the window).
        int ready[2];
        BOOST_REQUIRE(::pipe(ready) == 0);
        const pid_t child = ::fork();
        BOOST_REQUIRE(child >= 0);
        if (child == 0) {
            ::close(ready[0]);
            ruda::checkpoint_manager saver{dir.path(), options};
            if (!saver.load_latest()) { // a restarted trainer resumes first
                std::_Exit(5);
            }
            auto contents = large_contents_of(next);
            if (::write(ready[1], "s", 1) != 1) {
                std::_Exit(4);
            }
            for (std::uint64_t step = next;; ++step) {
                if (!saver.save(step, contents)) {
                    std::_Exit(3);
                }
                contents = large_contents_of(step + 1);
            }
        }
        ::close(ready[1]);
        // No thread here may wait for it: the child is forked from this one thread alone.
        pollfd wait{ready[0], POLLIN, 0};
        char started = 0;
        const bool child_started = ::poll(&wait, 1, 60000) == 1 && ::read(ready[0], &started, 1) == 1;
        ::close(ready[0]);
        if (!child_started) {
            ::kill(child, SIGKILL);
            ::waitpid(child, nullptr, 0);
        }
        BOOST_REQUIRE_MESSAGE(child_started, "the saving child died before its first save in trial "
                                                 << trial);
        sleep_us(static_cast<long>(random() % 40000));
        ::kill(child, SIGKILL);
        int status = 0;
        BOOST_REQUIRE(::waitpid(child, &status, 0) == child);
        BOOST_REQUIRE_MESSAGE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
                              "the saving child failed on its own in trial " << trial);
        interrupted += count_tmp(dir.path()) > 0 ? 1 : 0;

        ruda::checkpoint_manager after{dir.path(), options};
        const auto latest = after.load_latest();
        if (!latest) {
            BOOST_FAIL("trial " << trial << ": " << latest.error().message());
        }
        std::uint64_t latest_step = 0;
        BOOST_REQUIRE(latest.value().get("step", latest_step));
        BOOST_REQUIRE_MESSAGE(ruda::test::as_saved(latest.value()) == large_contents_of(latest_step),
                              "trial " << trial << ": step " << latest_step
                                       << " is not as written");
        // A kill after a checkpoint's rename and before "latest" moved leaves a newer
        // complete one: the restart resumes from the newest that loads, as the docs say.
        const auto newest = after.load_newest_valid();
        if (!newest) {
            BOOST_FAIL("trial " << trial << ": " << newest.error().message());
        }
        const std::uint64_t step = newest.value().step;
        BOOST_REQUIRE(step >= latest_step);
        BOOST_REQUIRE_MESSAGE(ruda::test::as_saved(newest.value().contents) == large_contents_of(step),
                              "trial " << trial << ": step " << step << " is not as written");
        BOOST_REQUIRE(step >= last_loaded);
        advanced += step > last_loaded ? 1 : 0;
        last_loaded = step;

        BOOST_REQUIRE(after.save(step + 1, large_contents_of(step + 1)));
        BOOST_REQUIRE(count_tmp(dir.path()) == 0U);
        last_loaded = step + 1;
        next = step + 2;
    }
    BOOST_TEST_MESSAGE(trials << " kills: " << interrupted << " left a write in progress, "
                              << advanced << " came after the child finished a checkpoint");
    BOOST_TEST(interrupted > 0); // the kills did land inside writes
}

BOOST_AUTO_TEST_CASE(a_save_past_the_file_size_limit_fails_cleanly_and_loses_nothing)
{
    // A real kernel refusal rather than an injected one: under RLIMIT_FSIZE the kernel cuts the
    // write short, then fails it with EFBIG (SIGXFSZ ignored, as a trainer that gets a limit
    // from its job scheduler would).
    const temp_dir dir;
    ruda::checkpoint_manager manager{dir.path(), {.keep_last = 2}};
    BOOST_REQUIRE(manager.save(1, large_contents_of(1)));
    ruda::result<ruda::saved_checkpoint> saved{ruda::errc::io_error};
    {
        const file_size_limit limit{256 * 1024}; // a quarter of the checkpoint
        saved = manager.save(2, large_contents_of(2));
    }
    BOOST_REQUIRE(!saved);
    BOOST_TEST(saved.error() == ruda::errc::io_error);
    BOOST_TEST(saved.error().message().find("File too large") != std::string::npos,
               saved.error().message());
    BOOST_TEST(count_tmp(dir.path()) == 0U);
    BOOST_TEST(manager.steps().value() == (std::vector<std::uint64_t>{1}));
    const auto latest = manager.load_latest();
    BOOST_REQUIRE(latest);
    BOOST_TEST((ruda::test::as_saved(latest.value()) == large_contents_of(1)));
    BOOST_CHECK(manager.save(2, large_contents_of(2))); // with the limit lifted, it saves
}

BOOST_AUTO_TEST_SUITE_END()
