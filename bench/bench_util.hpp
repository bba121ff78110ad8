// What every benchmark program needs: its command line, timing a callable, the median of
// repeated runs, an fsync of a file a peer wrote, the raw write() + fsync baseline of a save,
// running a ruda coroutine to completion on a fresh io_context on this thread, and handing its
// figures to bench/run as JSON.
#pragma once

#include <ruda/checkpoint/checkpoint.hpp>
#include <ruda/error.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace bench {

using clock_type = std::chrono::steady_clock;

/// Times `f` as it is, the allocator keeping what it holds free: what a program that repeats
/// `f` pays once the allocator reuses the memory the call before freed.
inline double seconds_repeated(const std::function<void()>& f)
{
    const auto start = clock_type::now();
    f();
    return std::chrono::duration<double>(clock_type::now() - start).count();
}

/// Times `f`. Before the clock starts, the allocator returns the memory it holds free to the
/// system (as a fresh process holds none), so whatever `f` allocates costs its page faults in
/// every program, ruda's and the peers' alike, whatever ran before it.
inline double seconds(const std::function<void()>& f)
{
    ::malloc_trim(0);
    return seconds_repeated(f);
}

inline double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

/// The median of `reps` runs of `run`, each returning its own figure.
inline double median_of(int reps, const std::function<double()>& run)
{
    std::vector<double> figures;
    for (int i = 0; i < reps; ++i) {
        figures.push_back(run());
    }
    return median(figures);
}

/// fsync of a file another library wrote (torch::save does not sync); exits if it fails.
/// Says what failed (with errno's text) and exits: a benchmark cannot go on without it.
[[noreturn]] inline void die(const std::string& what)
{
    std::perror(what.c_str());
    std::exit(1);
}

inline void fsync_file(const std::filesystem::path& path)
{
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::fsync(fd) != 0 || ::close(fd) != 0) {
        die("fsync " + path.string());
    }
}

template <class T>
boost::asio::awaitable<void> store(boost::asio::awaitable<ruda::result<T>> op,
                                   std::optional<ruda::result<T>>& out)
{
    out.emplace(co_await std::move(op));
}

// The baseline save: the bytes of tensors [first, last) written with write() in the same
// chunks, then fsync.
inline void raw_write(const std::filesystem::path& path, const ruda::checkpoint& c,
                      std::size_t first, std::size_t last)
{
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        die("open " + path.string());
    }
    for (std::size_t i = first; i < last; ++i) {
        const auto& bytes = c.gradients().entries()[i].data.bytes();
        for (std::size_t done = 0; done < bytes.size();) {
            const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
            if (n <= 0) {
                die("write");
            }
            done += static_cast<std::size_t>(n);
        }
    }
    if (::fsync(fd) != 0 || ::close(fd) != 0) {
        die("fsync");
    }
}

/// Runs `op` on a fresh io_context on this thread; exits the program if it fails.
template <class T>
T run(boost::asio::awaitable<ruda::result<T>> op)
{
    boost::asio::io_context io{1};
    std::optional<ruda::result<T>> out;
    boost::asio::co_spawn(io, store(std::move(op), out), [](std::exception_ptr e) {
        if (e) {
            std::rethrow_exception(e);
        }
    });
    io.run();
    if (!out || !*out) {
        std::fprintf(stderr, "benchmark operation failed: %s\n",
                     out ? out->error().message().c_str() : "never completed");
        std::exit(1);
    }
    return std::move(*out).value();
}

/// The figures one benchmark program reports, written as one flat JSON object (names are
/// plain identifiers, values finite numbers) for bench/run to put in its table.
class figures {
public:
    void add(const std::string& name, double value) { values_.emplace_back(name, value); }

    /// Writes the object to `path`; exits the program if it cannot.
    void write(const std::string& path) const
    {
        std::ofstream out{path};
        out << std::setprecision(9) << "{";
        for (std::size_t i = 0; i < values_.size(); ++i) {
            out << (i == 0 ? "\n  \"" : ",\n  \"") << values_[i].first << "\": " << values_[i].second;
        }
        out << "\n}\n";
        if (!out.flush()) {
            std::fprintf(stderr, "cannot write %s\n", path.c_str());
            std::exit(1);
        }
    }

private:
    std::vector<std::pair<std::string, double>> values_;
};

/// A benchmark's command line: `--name VALUE` options and `--name` flags, each bound to a
/// variable. An unknown argument, a missing value, a value that does not parse, or `valid`
/// returning false afterwards prints the usage (made from the bindings) and exits with 2.
///
///     bench::command_line{}.option("--reps", s.reps).option("--json", s.json, "PATH")
///         .flag("--check", s.check).parse(argc, argv, [&] { return s.reps >= 1; });
class command_line {
public:
    /// A number, a string, an optional string or a path.
    template <class T>
    command_line& option(std::string name, T& target, std::string placeholder = "N")
    {
        return option(std::move(name), std::move(placeholder), [&target](std::string_view text) {
            if constexpr (std::is_integral_v<T>) {
                const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(),
                                                       target);
                return ec == std::errc{} && end == text.data() + text.size();
            } else {
                target = T{std::string{text}};
                return true;
            }
        });
    }
    /// Any other value, through `set` (false: it does not parse).
    command_line& option(std::string name, std::string placeholder,
                         std::function<bool(std::string_view)> set)
    {
        bindings_.push_back({std::move(name), std::move(placeholder), std::move(set)});
        return *this;
    }
    command_line& flag(std::string name, bool& target)
    {
        bindings_.push_back({std::move(name), "", [&target](std::string_view) {
                                 target = true;
                                 return true;
                             }});
        return *this;
    }

    void parse(int argc, char** argv, const std::function<bool()>& valid = {}) const
    {
        for (int i = 1; i < argc; ++i) {
            const auto found = std::find_if(bindings_.begin(), bindings_.end(),
                                            [&](const binding& b) { return b.name == argv[i]; });
            if (found == bindings_.end()) {
                usage(argv[0]);
            }
            const bool takes_value = !found->placeholder.empty();
            if (takes_value && i + 1 == argc) {
                usage(argv[0]);
            }
            if (!found->set(takes_value ? argv[++i] : "")) {
                usage(argv[0]);
            }
        }
        if (valid && !valid()) {
            usage(argv[0]);
        }
    }

private:
    struct binding {
        std::string name;
        std::string placeholder; // empty for a flag
        std::function<bool(std::string_view)> set;
    };

    [[noreturn]] void usage(const char* program) const
    {
        std::string text = "usage: " + std::string{program};
        for (const binding& b : bindings_) {
            text += " [" + b.name + (b.placeholder.empty() ? "" : " " + b.placeholder) + "]";
        }
        std::fprintf(stderr, "%s\n", text.c_str());
        std::exit(2);
    }

    std::vector<binding> bindings_;
};

} // namespace bench
