// Paths that are not what a load or a save expects: a FIFO, a socket, a device or a directory
// where a checkpoint, a safetensors file or `latest` should be is refused at once (a watchdog
// ends the program if anything blocks); a link or a file planted at a save's temporary name is
// replaced, never written through, and a save whose temporary file another save replaced
// fails rather than publish that unfinished file.
#include "../support/error_text.hpp"
#include "../support/async_test.hpp"
#include "checkpoint_test_support.hpp"

#include <inspect.hpp>

#include <ruda/checkpoint/checkpoint_manager.hpp>
#include <ruda/checkpoint/safetensors.hpp>

#include <boost/test/unit_test.hpp>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

namespace {

using ruda::test::says;
using ruda::errc;
using ruda::test::temp_dir;
using ruda::test::watchdog;

// One of each kind of thing that is not a regular file, with the word the error uses for it.
struct hazard {
    std::filesystem::path path;
    std::string kind;
};

std::vector<hazard> hazards(const temp_dir& dir)
{
    const auto fifo = dir / "fifo";
    BOOST_REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    const auto socket_path = dir / "socket";
    const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
    BOOST_REQUIRE(s >= 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    BOOST_REQUIRE(socket_path.string().size() < sizeof address.sun_path);
    std::snprintf(address.sun_path, sizeof address.sun_path, "%s", socket_path.c_str());
    BOOST_REQUIRE(::bind(s, reinterpret_cast<const sockaddr *>(&address), sizeof address) == 0);
    ::close(s); // the socket file stays
    std::filesystem::create_directory(dir / "directory");
    return {{fifo, "a FIFO"},
            {socket_path, "a socket"},
            {"/dev/null", "a character device"},
            {dir / "directory", "a directory"}};
}

} // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_paths)

BOOST_AUTO_TEST_CASE(loads_and_imports_refuse_what_is_not_a_regular_file_at_once)
{
    const temp_dir dir;
    const watchdog guard{"opening what is not a regular file", std::chrono::seconds(30)};
    for (const hazard& h : hazards(dir)) {
        BOOST_TEST_CONTEXT(h.path << " (" << h.kind << ")")
        {
            const auto loaded = ruda::load_checkpoint_file(h.path);
            BOOST_REQUIRE(!loaded);
            BOOST_TEST(loaded.error() == errc::malformed_record);
            BOOST_TEST(says(loaded.error(), "not a regular file (" + h.kind + ")"));
            BOOST_TEST(says(loaded.error(), h.path.string()));

            const auto imported = ruda::import_safetensors(h.path);
            BOOST_REQUIRE(!imported);
            BOOST_TEST(imported.error() == errc::malformed_record);
            BOOST_TEST(says(imported.error(), "not a regular file (" + h.kind + ")"));
        }
    }
}

BOOST_AUTO_TEST_CASE(inspect_verify_of_a_fifo_answers_at_once)
{
    const temp_dir dir;
    const watchdog guard{"opening what is not a regular file", std::chrono::seconds(30)};
    const auto fifo = hazards(dir).front().path;
    std::ostringstream out;
    const int status = ruda::tools::inspect_main({"--verify", fifo.string()}, out);
    BOOST_TEST(status != 0);
    BOOST_TEST(out.str().find("not a regular file (a FIFO)") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(latest_is_read_bounded_and_must_be_a_file)
{
    const temp_dir dir;
    const watchdog guard{"opening what is not a regular file", std::chrono::seconds(30)};
    ruda::checkpoint_manager manager{dir.path()};
    BOOST_REQUIRE(manager.save(1, ruda::checkpoint{}));
    const auto latest = dir / "latest";

    // A link to an endless device, a FIFO: refused, nothing read.
    std::filesystem::remove(latest);
    std::filesystem::create_symlink("/dev/zero", latest);
    auto step = manager.latest_step();
    BOOST_REQUIRE(!step);
    BOOST_TEST(says(step.error(), "not a regular file (a character device)"));
    std::filesystem::remove(latest);
    BOOST_REQUIRE(::mkfifo(latest.c_str(), 0600) == 0);
    step = manager.latest_step();
    BOOST_REQUIRE(!step);
    BOOST_TEST(says(step.error(), "not a regular file (a FIFO)"));

    // A large file: only its first bytes are read, and they name no checkpoint.
    std::filesystem::remove(latest);
    ruda::test::write_bytes(latest, std::vector<std::uint8_t>(std::size_t{8} << 20U, 'x'));
    step = manager.latest_step();
    BOOST_REQUIRE(!step);
    BOOST_TEST(step.error() == errc::malformed_record);
    BOOST_TEST(says(step.error(), "does not name a checkpoint file"));
}

BOOST_AUTO_TEST_CASE(a_link_or_file_planted_at_the_temporary_name_is_replaced_not_followed)
{
    const temp_dir dir;
    const auto path = dir / "c.ruda";
    const auto temporary = dir / "c.ruda.tmp";
    const auto victim = dir / "victim";
    const std::vector<std::uint8_t> precious{'k', 'e', 'e', 'p'};
    ruda::test::write_bytes(victim, precious);
    ruda::checkpoint contents{ruda::test::valid_sample()};

    std::filesystem::create_symlink(victim, temporary);
    BOOST_REQUIRE(ruda::save_checkpoint_file(path, contents));
    BOOST_TEST((ruda::test::read_bytes(victim) == precious));
    BOOST_TEST(!std::filesystem::is_symlink(path));
    BOOST_TEST((ruda::load_checkpoint_file(path).value() == contents));

    ruda::test::write_bytes(temporary, std::vector<std::uint8_t>(100000, 0xAB)); // a stale one
    BOOST_REQUIRE(ruda::save_checkpoint_file(path, contents));
    BOOST_TEST((ruda::load_checkpoint_file(path).value() == contents));
    BOOST_TEST(!std::filesystem::exists(temporary));

    // What cannot be removed stops the save, which leaves the previous checkpoint.
    const auto previous = ruda::test::read_bytes(path);
    std::filesystem::create_directory(temporary);
    const auto saved = ruda::save_checkpoint_file(path, ruda::checkpoint{});
    BOOST_REQUIRE(!saved);
    BOOST_TEST(saved.error() == errc::io_error);
    BOOST_TEST(says(saved.error(), "Saving " + path.string()));
    BOOST_TEST((ruda::test::read_bytes(path) == previous));
    BOOST_TEST(std::filesystem::is_directory(temporary));
}

// Runs a hook, once, when a save reaches its first fsync or its first pwrite.
class hooked_ops : public ruda::file_ops {
public:
    std::function<void()> at_fsync;
    std::function<void()> at_pwrite;

    ruda::result<void> fsync(int fd) override
    {
        if (at_fsync) {
            std::exchange(at_fsync, nullptr)();
        }
        return ruda::file_ops::fsync(fd);
    }
    ruda::result<void> pwrite(int fd, const void* data, std::size_t size,
                              std::uint64_t offset) override
    {
        if (at_pwrite) {
            std::exchange(at_pwrite, nullptr)();
        }
        return ruda::file_ops::pwrite(fd, data, size, offset);
    }
};

BOOST_AUTO_TEST_CASE(two_saves_to_one_path_at_once_never_publish_an_unfinished_file)
{
    const temp_dir dir;
    const watchdog guard{"two interleaved saves", std::chrono::seconds(30)};
    const auto path = dir / "c.ruda";
    const auto numbered = [](std::uint64_t step) {
        ruda::checkpoint c{ruda::test::valid_sample()};
        c.put("step", step).value();
        return c;
    };
    BOOST_REQUIRE(ruda::save_checkpoint_file(path, numbered(0)));
    const auto previous = ruda::test::read_bytes(path);

    // Save A waits in its fsync while save B creates its temporary file (removing A's) and
    // waits before its first byte; then A goes on to its rename, and B after A is done.
    std::mutex mutex;
    std::condition_variable changed;
    int stage = 0; // 1: A in fsync; 2: B created its file; 3: A done
    const auto advance = [&](int to) {
        {
            const std::lock_guard lock{mutex};
            stage = to;
        }
        changed.notify_all();
    };
    const auto await = [&](int at) {
        std::unique_lock lock{mutex};
        changed.wait(lock, [&] { return stage >= at; });
    };
    hooked_ops ops_a;
    ops_a.at_fsync = [&] {
        advance(1);
        await(2);
    };
    std::optional<ruda::result<std::uint64_t>> saved_a;
    std::thread a{[&] {
        saved_a.emplace(ruda::save_checkpoint_file(path, numbered(1), ops_a));
        advance(3);
    }};
    await(1);
    hooked_ops ops_b;
    std::vector<std::uint8_t> while_b_unfinished;
    ops_b.at_pwrite = [&] {
        advance(2);
        await(3);
        while_b_unfinished = ruda::test::read_bytes(path);
    };
    const auto saved_b = ruda::save_checkpoint_file(path, numbered(2), ops_b);
    a.join();

    BOOST_REQUIRE(!*saved_a); // its temporary file was no longer its own
    BOOST_TEST(saved_a->error() == errc::io_error);
    BOOST_TEST(says(saved_a->error(), "another save to the same path"));
    BOOST_TEST((while_b_unfinished == previous)); // nothing unfinished was published
    BOOST_REQUIRE(saved_b);
    BOOST_TEST((ruda::load_checkpoint_file(path).value() == numbered(2)));
    BOOST_TEST(!std::filesystem::exists(dir / "c.ruda.tmp"));
}

BOOST_AUTO_TEST_SUITE_END()
