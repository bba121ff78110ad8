// Peak resident memory of one operation, measured in a child process of its own: what
// bench/checkpoint holds a save and a load to (the record + 32 MiB).
#pragma once

#include "bench_util.hpp"

#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace bench {

inline std::uint64_t status_kib(const char* field)
{
    std::ifstream status{"/proc/self/status"};
    std::string line;
    while (std::getline(status, line)) {
        if (line.rfind(field, 0) == 0) {
            return std::strtoull(line.c_str() + std::strlen(field), nullptr, 10);
        }
    }
    return 0;
}

struct rss_sample {
    double before_mib = 0; // RSS when the operation starts
    double peak_mib = 0;   // the high-water mark during it
};

// Runs `prepare` then `operation` in a child process, with the RSS high-water mark reset in
// between (/proc/self/clear_refs), and reports both through a pipe.
template <class Prepare, class Operation>
rss_sample child_rss(Prepare prepare, Operation operation)
{
    int pipe_fds[2];
    if (::pipe(pipe_fds) != 0) {
        die("pipe");
    }
    const pid_t child = ::fork();
    if (child < 0) {
        die("fork");
    }
    if (child == 0) {
        ::close(pipe_fds[0]);
        auto state = prepare();
        ::malloc_trim(0); // what prepare() freed goes back to the system
        {
            std::ofstream reset{"/proc/self/clear_refs"};
            reset << "5";
        }
        rss_sample sample;
        sample.before_mib = static_cast<double>(status_kib("VmRSS:")) / 1024.0;
        operation(state);
        sample.peak_mib = static_cast<double>(status_kib("VmHWM:")) / 1024.0;
        if (::write(pipe_fds[1], &sample, sizeof sample) != sizeof sample) {
            std::_Exit(1);
        }
        std::_Exit(0);
    }
    ::close(pipe_fds[1]);
    rss_sample sample;
    const bool got = ::read(pipe_fds[0], &sample, sizeof sample) == sizeof sample;
    ::close(pipe_fds[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    if (!got || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "the RSS measurement failed\n");
        std::exit(1);
    }
    return sample;
}

} // namespace bench
