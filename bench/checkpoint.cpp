// bench/checkpoint: saving and loading a checkpoint of 64 x 4 MiB f32 gradients (256 MiB)
// against the physical limits measured in the same run, on the same file system:
//   save (temp file, fsync, rename, directory fsync)  vs  raw write() of the same bytes + fsync;
//   load with every checksum verified and the record validated  vs  raw read() into a reused
//   buffer + memcpy into fresh buffers (both from the page cache, the file just written);
//   peak RSS while saving and while loading, each in a child process, against the record size.
// Baselines and ruda alternate; figures are medians. --check fails when save is under 0.8x,
// load under 0.7x, or save's peak RSS over record + 32 MiB.
//
//   checkpoint [--tensors N] [--mib-per-tensor N] [--reps N] [--dir DIR] [--check]
#include "bench_util.hpp"

#include <ruda/ruda.hpp>

#include <fcntl.h>
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

using bench::median;
using bench::seconds;
namespace fs = std::filesystem;

struct settings {
    std::size_t tensors = 64;
    std::size_t mib_per_tensor = 4;
    int reps = 5;
    std::optional<fs::path> dir;
    bool check = false;
};

bool parse(int argc, char** argv, settings& s)
{
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        const bool has_value = i + 1 < argc;
        if (arg == "--tensors" && has_value) {
            s.tensors = std::strtoul(argv[++i], nullptr, 10);
        } else if (arg == "--mib-per-tensor" && has_value) {
            s.mib_per_tensor = std::strtoul(argv[++i], nullptr, 10);
        } else if (arg == "--reps" && has_value) {
            s.reps = std::atoi(argv[++i]);
        } else if (arg == "--dir" && has_value) {
            s.dir = argv[++i];
        } else if (arg == "--check") {
            s.check = true;
        } else {
            return false;
        }
    }
    return s.tensors > 0 && s.mib_per_tensor > 0 && s.reps >= 1;
}

[[noreturn]] void die(const std::string& what)
{
    std::perror(what.c_str());
    std::exit(1);
}

ruda::checkpoint make_checkpoint(std::size_t tensors, std::size_t floats)
{
    std::vector<ruda::gradient_entry> entries;
    for (std::size_t i = 0; i < tensors; ++i) {
        std::vector<float> values(floats);
        for (std::size_t k = 0; k < floats; ++k) {
            values[k] = static_cast<float>(i) + static_cast<float>(k) * 1e-3F;
        }
        entries.push_back({i + 1, ruda::dtype::f32(),
                           ruda::tensor_data::from_values(std::move(values), {floats}).value()});
    }
    ruda::checkpoint c{ruda::gradients_params_record{std::move(entries)}};
    c.put("step", std::uint64_t{1000}).value();
    return c;
}

// The baseline save: the same bytes written with write() in the same chunks, then fsync.
void raw_write(const fs::path& path, const ruda::checkpoint& c)
{
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        die("open " + path.string());
    }
    for (const auto& e : c.gradients().entries()) {
        const auto& bytes = e.data.bytes();
        std::size_t done = 0;
        while (done < bytes.size()) {
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

// The baseline load: read() the whole file into `file` (a buffer reused from run to run, so
// its pages are already mapped), then memcpy each tensor into a fresh buffer.
std::size_t raw_read(const fs::path& path, std::vector<std::uint8_t>& file, std::size_t tensors,
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

std::uint64_t status_kib(const char* field)
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

} // namespace

int main(int argc, char** argv)
{
    settings s;
    if (!parse(argc, argv, s)) {
        std::fprintf(stderr, "usage: %s [--tensors N] [--mib-per-tensor N] [--reps N] [--dir DIR] "
                             "[--check]\n", argv[0]);
        return 2;
    }
    fs::path dir;
    if (s.dir) {
        dir = *s.dir / "bench-checkpoint";
        fs::create_directories(dir);
    } else {
        std::string pattern = "bench-checkpoint-XXXXXX";
        if (::mkdtemp(pattern.data()) == nullptr) {
            die("mkdtemp");
        }
        dir = fs::absolute(pattern);
    }
    const std::size_t tensor_bytes = s.mib_per_tensor << 20U;
    const std::size_t floats = tensor_bytes / sizeof(float);
    const double record_bytes = static_cast<double>(s.tensors * tensor_bytes);
    const auto saved_path = dir / "ruda.ruda";
    const auto raw_path = dir / "raw.bin";

    // Peak RSS first, while this process holds nothing large that a child would share.
    const auto save_rss = child_rss([&] { return make_checkpoint(s.tensors, floats); },
                                    [&](const ruda::checkpoint& c) {
                                        if (!ruda::save_checkpoint_file(saved_path, c)) {
                                            std::_Exit(1);
                                        }
                                    });
    const auto load_rss = child_rss([] { return 0; }, [&](int) {
        if (!ruda::load_checkpoint_file(saved_path)) {
            std::_Exit(1);
        }
    });

    const auto contents = make_checkpoint(s.tensors, floats);

    std::vector<double> raw_write_times;
    std::vector<double> save_times;
    std::vector<double> raw_read_times;
    std::vector<double> load_times;
    std::size_t sink = 0;
    std::vector<std::uint8_t> read_buffer(s.tensors * tensor_bytes, 1); // mapped before timing
    // Each write starts on a quiet disk: the previous file removed and everything synced
    // (removals and discards included) outside the timing. The order alternates.
    const auto quiet = [](const fs::path& path) {
        fs::remove(path);
        ::sync();
    };
    const auto time_raw_write = [&] {
        quiet(raw_path);
        raw_write_times.push_back(seconds([&] { raw_write(raw_path, contents); }));
    };
    const auto time_save = [&] {
        quiet(saved_path);
        save_times.push_back(seconds([&] {
            if (!ruda::save_checkpoint_file(saved_path, contents)) {
                die("save");
            }
        }));
    };
    for (int r = 0; r < s.reps; ++r) {
        if (r % 2 == 0) {
            time_raw_write();
            time_save();
        } else {
            time_save();
            time_raw_write();
        }
        raw_read_times.push_back(
            seconds([&] { sink += raw_read(raw_path, read_buffer, s.tensors, tensor_bytes); }));
        std::optional<ruda::checkpoint> loaded;
        load_times.push_back(seconds([&] {
            auto c = ruda::load_checkpoint_file(saved_path);
            if (!c) {
                std::fprintf(stderr, "load: %s\n", c.error().message().c_str());
                std::exit(1);
            }
            loaded.emplace(std::move(c).value());
        }));
        sink += loaded->gradients().entries().size();
    }
    const double file_bytes = static_cast<double>(fs::file_size(saved_path));


    const double gib = 1024.0 * 1024.0 * 1024.0;
    const auto gbs = [&](double t) { return record_bytes / t / 1e9; };
    const double save_ratio = median(raw_write_times) / median(save_times);
    const double load_ratio = median(raw_read_times) / median(load_times);
    std::printf("## %zu tensors x %zu MiB f32 (%.2f GiB record, %.2f MiB file), median of %d, "
                "in %s\n\n",
                s.tensors, s.mib_per_tensor, record_bytes / gib, file_bytes / (1 << 20), s.reps,
                dir.c_str());
    std::printf("| operation | median ms | GB/s | ratio to baseline |\n|---|---:|---:|---:|\n");
    std::printf("| raw write() + fsync (baseline) | %.1f | %.2f | 1.00x |\n",
                median(raw_write_times) * 1e3, gbs(median(raw_write_times)));
    std::printf("| save_checkpoint_file (checksums, fsync, rename, dir fsync) | %.1f | %.2f | %.2fx |\n",
                median(save_times) * 1e3, gbs(median(save_times)), save_ratio);
    std::printf("| raw read() into a reused buffer + memcpy into fresh buffers (baseline) | %.1f | %.2f | 1.00x |\n",
                median(raw_read_times) * 1e3, gbs(median(raw_read_times)));
    std::printf("| load_checkpoint_file (frame, checksums, validation) | %.1f | %.2f | %.2fx |\n\n",
                median(load_times) * 1e3, gbs(median(load_times)), load_ratio);

    const double record_mib = record_bytes / (1 << 20);
    std::printf("| peak RSS | before MiB | peak MiB | peak - record MiB | limit MiB |\n"
                "|---|---:|---:|---:|---:|\n");
    std::printf("| save (record in memory) | %.1f | %.1f | %.1f | record + 32 = %.1f |\n",
                save_rss.before_mib, save_rss.peak_mib, save_rss.peak_mib - record_mib,
                record_mib + 32);
    std::printf("| load (into a fresh record) | %.1f | %.1f | %.1f | - |\n", load_rss.before_mib,
                load_rss.peak_mib, load_rss.peak_mib - record_mib);
    std::printf("\n(checksum %zu)\n", sink);

    std::error_code ignored;
    fs::remove_all(dir, ignored);

    if (s.check) {
        int failed = 0;
        if (save_ratio < 0.8) {
            std::fprintf(stderr, "FAIL: save at %.2fx a raw write, under 0.8x\n", save_ratio);
            ++failed;
        }
        if (load_ratio < 0.7) {
            std::fprintf(stderr, "FAIL: load at %.2fx a raw read + memcpy, under 0.7x\n", load_ratio);
            ++failed;
        }
        if (save_rss.peak_mib > record_mib + 32) {
            std::fprintf(stderr, "FAIL: save peaked at %.1f MiB, over record + 32 MiB\n",
                         save_rss.peak_mib);
            ++failed;
        }
        return failed == 0 ? 0 : 1;
    }
    return 0;
}
