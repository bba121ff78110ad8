// The physical limits bench/checkpoint measures ruda against: the same bytes read, written and
// copied with nothing but system calls and memcpy, by one thread or several.
#pragma once

#include "bench_util.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

namespace bench {

// The baseline load: read() the whole file into `file` (a buffer reused from run to run, so
// its pages are already mapped), then memcpy each tensor into a fresh buffer.
inline std::size_t raw_read(const std::filesystem::path& path, std::vector<std::uint8_t>& file, std::size_t tensors,
                     std::size_t tensor_bytes)
{
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        die("open " + path.string());
    }
    const std::size_t size = tensors * tensor_bytes;
    file.resize(size);
    std::size_t done = 0;
    while (done < size) {
        const ssize_t n = ::read(fd, file.data() + done, size - done);
        if (n <= 0) {
            die("read");
        }
        done += static_cast<std::size_t>(n);
    }
    ::close(fd);
    std::vector<std::unique_ptr<std::uint8_t[]>> copies(tensors);
    for (std::size_t i = 0; i < tensors; ++i) {
        copies[i].reset(new std::uint8_t[tensor_bytes]);
        std::memcpy(copies[i].get(), file.data() + i * tensor_bytes, tensor_bytes);
    }
    return copies.back()[1];
}

// Runs `work(i)` for i in [0, n) on n threads at once.
template <class Work>
void on_threads(unsigned n, Work work)
{
    std::vector<std::thread> threads;
    for (unsigned i = 0; i < n; ++i) {
        threads.emplace_back(work, i);
    }
    for (auto& t : threads) {
        t.join();
    }
}

// The tensors [first, last) of share `i` of `n`.
inline std::pair<std::size_t, std::size_t> share(std::size_t tensors, unsigned i, unsigned n)
{
    return {tensors * i / n, tensors * (i + 1) / n};
}

// The disk's parallel limit for a save: the same bytes in `writers` shares of whole tensors,
// each written by its own thread to its own file with write() and then fsync, as `dd
// conv=fsync` run `writers` times at once.
inline void raw_parallel_write(const std::filesystem::path& dir, const ruda::checkpoint& c, unsigned writers)
{
    on_threads(writers, [&](unsigned w) {
        const auto [first, last] = share(c.gradients().entries().size(), w, writers);
        raw_write(dir / ("raw-" + std::to_string(w) + ".bin"), c, first, last);
    });
}

// The parallel limit for a load: `readers` threads, each pread()ing its share of the tensors
// of the raw file into the reused buffer and copying them into fresh buffers.
inline std::size_t raw_parallel_read(const std::filesystem::path& path, std::vector<std::uint8_t>& file,
                              std::size_t tensors, std::size_t tensor_bytes, unsigned readers)
{
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        die("open " + path.string());
    }
    file.resize(tensors * tensor_bytes);
    std::vector<std::unique_ptr<std::uint8_t[]>> copies(tensors);
    on_threads(readers, [&](unsigned r) {
        const auto [first, last] = share(tensors, r, readers);
        const std::size_t begin = first * tensor_bytes;
        const std::size_t end = last * tensor_bytes;
        for (std::size_t done = begin; done < end;) {
            const ssize_t n = ::pread(fd, file.data() + done, end - done, static_cast<off_t>(done));
            if (n <= 0) {
                die("read");
            }
            done += static_cast<std::size_t>(n);
        }
        for (std::size_t i = first; i < last; ++i) {
            copies[i].reset(new std::uint8_t[tensor_bytes]);
            std::memcpy(copies[i].get(), file.data() + i * tensor_bytes, tensor_bytes);
        }
    });
    ::close(fd);
    return copies.back()[1];
}

// The snapshot baselines: every tensor's bytes copied into `copies`, allocated here (fresh) or
// already sized from an earlier run (reused).
inline std::size_t copy_all(const ruda::gradients_params_record& record,
                     std::vector<std::vector<std::uint8_t>>& copies, bool fresh)
{
    const auto& entries = record.entries();
    if (fresh) {
        copies.clear();
        copies.resize(entries.size());
    }
    for (std::size_t i = 0; i < entries.size(); ++i) {
        const auto& bytes = entries[i].data.bytes();
        if (fresh) {
            copies[i].resize(bytes.size());
        }
        std::memcpy(copies[i].data(), bytes.data(), bytes.size());
    }
    return copies.back()[1];
}

} // namespace bench
