// What every benchmark program needs: timing a callable, the median of repeated runs, an
// fsync of a file a peer wrote, running a ruda coroutine to completion on a fresh io_context on
// this thread, and handing its figures to bench/run as JSON.
#pragma once

#include <ruda/error.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
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
#include <utility>
#include <vector>

namespace bench {

using clock_type = std::chrono::steady_clock;

/// Times `f`. Before the clock starts, the allocator returns the memory it holds free to the
/// system (as a fresh process holds none), so whatever `f` allocates costs its page faults in
/// every program, ruda's and the peers' alike, whatever ran before it.
inline double seconds(const std::function<void()>& f)
{
    ::malloc_trim(0);
    const auto start = clock_type::now();
    f();
    return std::chrono::duration<double>(clock_type::now() - start).count();
}

inline double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

/// fsync of a file another library wrote (torch::save does not sync); exits if it fails.
inline void fsync_file(const std::filesystem::path& path)
{
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::fsync(fd) != 0 || ::close(fd) != 0) {
        std::perror(("fsync " + path.string()).c_str());
        std::exit(1);
    }
}

template <class T>
boost::asio::awaitable<void> store(boost::asio::awaitable<ruda::result<T>> op,
                                   std::optional<ruda::result<T>>& out)
{
    out.emplace(co_await std::move(op));
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

} // namespace bench
