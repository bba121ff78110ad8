// bench/checkpoint: the three things a trainer does with its gradients, each against the
// physical limit measured in the same run, on the same file system:
//   snapshot (`to_record_async` on cpu_backend)  vs  memcpy of the same bytes into fresh
//   buffers, and into buffers reused from run to run; and snapshots repeated one after another,
//   as a training loop takes them, each reusing the memory the one before freed;
//   save (temp file, fsync, rename, directory fsync)  vs  raw write() of the same bytes + fsync,
//   and vs the best of 1, 2, 4 and 8 raw writers, each writing its share of the tensors to a
//   file of its own and fsyncing it (as `dd conv=fsync` run that many times at once);
//   load with every checksum verified, the record validated and restored onto cpu_backend  vs
//   raw read() into a reused buffer + memcpy into fresh buffers (both from the page cache, the
//   file just written), and vs the best of 1, 2, 4 and 8 threads each pread()ing and copying
//   its share;
//   ruda's save and load with one writer and one reader, and with --sweep with 2, 4 and 8;
//   the same load of a file the kernel keeps from changing, which ruda maps instead of reading
//   (the immutable flag where this process may set it, else a sealed memfd copy of the file);
//   peak RSS while saving and while loading, each in a child process, against the record size.
// With --training-state it measures only the save of a trainer's whole state (weights,
// gradients and Adam's two moments: tensor groups of 4x the gradients' bytes)  vs  four
// gradients-only saves one after another (four files: the same bytes through the disk), the
// two alternating, each from a quiet disk: a run of its own, so that its gigabytes leave the
// other figures' disk alone.
// The default is 64 x 4 MiB f32 gradients (256 MiB); --elements sets a tensor's size in
// elements instead (100,000 x 16 for the small-tensor case), --dtype bf16 stores them as bf16.
// Every variant runs once per repetition, starting at a different one each time; figures are
// medians. --json writes the figures for bench/run.
// --check fails when save is under 0.8x, load under 0.7x, or the peak RSS of a save or a load
// over record + 32 MiB.
//
//   checkpoint [--tensors N] [--mib-per-tensor N | --elements N] [--dtype f32|bf16] [--reps N]
//              [--dir DIR] [--json PATH] [--check] [--sweep | --training-state]
#include "bench_util.hpp"
#include "checkpoint_contents.hpp"
#include "peak_rss.hpp"
#include "raw_limits.hpp"
#include "unchangeable_file.hpp"

#include <ruda/checkpoint/detail/io_jobs.hpp>
#include <ruda/ruda.hpp>

#include <unistd.h>

#include <array>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace {

using bench::child_rss;
using bench::copy_all;
using bench::die;
using bench::make_checkpoint;
using bench::make_training_state;
using bench::median;
using bench::raw_parallel_read;
using bench::raw_parallel_write;
using bench::raw_read;
using bench::seconds;
using bench::unchangeable_file;
namespace fs = std::filesystem;

using cpu = ruda::cpu_backend;

// The numbers of parallel writers and readers measured.
constexpr std::array<unsigned, 4> parallel_counts{1, 2, 4, 8};

struct settings {
    std::size_t tensors = 64;
    std::size_t mib_per_tensor = 4;
    std::size_t elements = 0; // per tensor; 0: as many as fill mib_per_tensor
    ruda::dtype dtype = ruda::dtype::f32();
    int reps = 5;
    std::optional<fs::path> dir;
    std::optional<std::string> json;
    bool check = false;
    bool sweep = false; // ruda's save and load with each number of writers and readers
    bool training_state = false; // only the training state's save against the gradients'

    std::size_t elements_per_tensor() const
    {
        return elements != 0 ? elements : (mib_per_tensor << 20U) / dtype.size();
    }
};

void parse(int argc, char** argv, settings& s)
{
    bench::command_line{}
        .option("--tensors", s.tensors)
        .option("--mib-per-tensor", s.mib_per_tensor)
        .option("--elements", s.elements)
        .option("--dtype", "f32|bf16",
                [&s](std::string_view name) {
                    s.dtype = name == "bf16" ? ruda::dtype::bf16() : ruda::dtype::f32();
                    return name == "f32" || name == "bf16";
                })
        .option("--reps", s.reps)
        .option("--dir", s.dir, "DIR")
        .option("--json", s.json, "PATH")
        .flag("--check", s.check)
        .flag("--sweep", s.sweep)
        .flag("--training-state", s.training_state)
        .parse(argc, argv,
               [&s] { return s.tensors > 0 && s.elements_per_tensor() > 0 && s.reps >= 1; });
}

// load_checkpoint_file + from_record<cpu_backend>, timed; the gradients are freed untimed.
double time_load_and_restore(const fs::path& path, std::size_t& sink,
                             const ruda::checkpoint_load_options& options = {})
{
    std::optional<ruda::gradients_params> restored;
    const double time = seconds([&] {
        auto loaded = ruda::load_checkpoint_file(path, options);
        if (!loaded) {
            std::fprintf(stderr, "load %s: %s\n", path.c_str(), loaded.error().message().c_str());
            std::exit(1);
        }
        restored.emplace(
            ruda::gradients_params::from_record<cpu>(std::move(loaded).value().gradients(), {})
                .value());
    });
    sink += restored->size();
    return time;
}

// The save of a trainer's whole state against four gradients-only saves of the same model one
// after another, the two alternating (which goes first alternates too), each from a quiet
// disk. Four saves, not four times one: a disk (this VM's among them) may take one save's
// bytes into a cache of its own faster than it writes four times as many.
int measure_training_state(const settings& s, const fs::path& dir)
{
    const std::size_t elements = s.elements_per_tensor();
    const auto gradients = make_checkpoint(s.tensors, elements, s.dtype);
    const auto training = make_training_state(s.tensors, elements, s.dtype);
    const double record_bytes = static_cast<double>(s.tensors * elements * s.dtype.size());
    std::vector<double> gradients_times; // four saves, one after another
    std::vector<double> training_times;
    const auto timed_saves = [&](const ruda::checkpoint& c, int count) {
        for (const auto& item : fs::directory_iterator(dir)) {
            fs::remove(item.path());
        }
        ::sync();
        return seconds([&] {
            for (int k = 0; k < count; ++k) {
                const auto path = dir / ("save-" + std::to_string(k) + ".ruda");
                if (!ruda::save_checkpoint_file(path, c)) {
                    die("save " + path.string());
                }
            }
        });
    };
    for (int r = 0; r < s.reps; ++r) {
        if (r % 2 == 0) {
            gradients_times.push_back(timed_saves(gradients, 4));
            training_times.push_back(timed_saves(training, 1));
        } else {
            training_times.push_back(timed_saves(training, 1));
            gradients_times.push_back(timed_saves(gradients, 4));
        }
    }
    const double one = median(gradients_times) / 4; // per save, for the JSON and the table
    const double whole = median(training_times);
    std::printf("## a training state of %zu parameters x %zu %s: weights, gradients, Adam's "
                "two moments (%.3f GiB), median of %d, in %s\n\n",
                s.tensors, elements, ruda::to_string(s.dtype).c_str(),
                4 * record_bytes / (1 << 30), s.reps, dir.c_str());
    std::printf("| save | median ms | GB/s | ratio |\n|---|---:|---:|---:|\n");
    std::printf("| four saves of the gradients alone, one after another (baseline) | %.1f | %.2f | "
                "1.00x |\n",
                4 * one * 1e3, 4 * record_bytes / (4 * one) / 1e9);
    std::printf("| the training state (4x the bytes) | %.1f | %.2f | %.2fx |\n", whole * 1e3,
                4 * record_bytes / whole / 1e9, 4 * one / whole);
    if (s.json) {
        bench::figures f;
        f.add("record_bytes", record_bytes);
        f.add("save_s", one);
        f.add("save_training_state_s", whole);
        f.write(*s.json);
    }
    std::error_code ignored;
    fs::remove_all(dir, ignored);
    return s.check && 4 * one / whole < 1 / 1.1 ? 1 : 0;
}

} // namespace

int main(int argc, char** argv)
{
    settings s;
    parse(argc, argv, s);
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
    const std::size_t elements = s.elements_per_tensor();
    const std::size_t tensor_bytes = elements * s.dtype.size();
    const double record_bytes = static_cast<double>(s.tensors * tensor_bytes);
    const auto saved_path = dir / "ruda.ruda";
    const auto raw_path = dir / "raw.bin";
    if (s.training_state) {
        return measure_training_state(s, dir);
    }

    // Peak RSS first, while this process holds nothing large that a child would share.
    const auto save_rss = child_rss([&] { return make_checkpoint(s.tensors, elements, s.dtype); },
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

    const auto contents = make_checkpoint(s.tensors, elements, s.dtype);
    const auto grads = ruda::gradients_params::from_record<cpu>(contents.gradients(), {}).value();

    std::vector<double> fresh_copy_times;
    std::vector<double> reused_copy_times;
    std::vector<double> snapshot_times;
    std::map<std::string, std::vector<double>> times; // every write and read variant, by name
    std::size_t sink = 0;
    std::vector<std::vector<std::uint8_t>> reused;
    sink += copy_all(contents.gradients(), reused, true); // sized and mapped before timing
    std::vector<std::uint8_t> read_buffer(s.tensors * tensor_bytes, 1);
    // Each write starts on a quiet disk: the previous files removed and everything synced
    // (removals and discards included) outside the timing.
    const auto quiet = [&] {
        for (const auto& item : fs::directory_iterator(dir)) {
            fs::remove(item.path());
        }
        ::sync();
    };
    const auto save_with = [&](unsigned writers) {
        return [&, writers] {
            if (!ruda::save_checkpoint_file(saved_path, contents, {.writers = writers})) {
                die("save");
            }
        };
    };
    // The writes: one raw writer, raw parallel writers, ruda's save with the default number of
    // writers and with one (and, with --sweep, with each number). Reads likewise.
    std::vector<std::pair<std::string, std::function<void()>>> writes{
        {"raw_write", [&] { bench::raw_write(raw_path, contents, 0, s.tensors); }},
        {"save", save_with(ruda::checkpoint_save_options{}.writers)}};
    std::vector<std::string> reads{"raw_read", "load"};
    for (const unsigned n : parallel_counts) {
        if (n == 1) {
            continue;
        }
        writes.emplace_back("raw_write_" + std::to_string(n),
                            [&, n] { raw_parallel_write(dir, contents, n); });
        reads.push_back("raw_read_" + std::to_string(n));
    }
    for (const unsigned n : parallel_counts) {
        if (n == 1 || s.sweep) {
            writes.emplace_back("save_writers_" + std::to_string(n), save_with(n));
            reads.push_back("load_readers_" + std::to_string(n));
        }
    }
    // The number a read variant's name ends with: its readers (1 for raw_read, the default
    // for load).
    const auto count_in = [](const std::string& name) {
        const auto at = name.rfind('_');
        return std::isdigit(static_cast<unsigned char>(name.back())) != 0
                   ? static_cast<unsigned>(std::stoul(name.substr(at + 1)))
                   : 0U;
    };
    const auto time_read = [&](const std::string& name) {
        const unsigned n = count_in(name);
        if (name.rfind("raw", 0) == 0) {
            return seconds([&] {
                sink += n == 0 ? raw_read(raw_path, read_buffer, s.tensors, tensor_bytes)
                               : raw_parallel_read(raw_path, read_buffer, s.tensors, tensor_bytes, n);
            });
        }
        ruda::checkpoint_load_options options;
        if (n != 0) {
            options.readers = n;
        }
        return time_load_and_restore(saved_path, sink, options);
    };
    for (int r = 0; r < s.reps; ++r) {
        {
            std::vector<std::vector<std::uint8_t>> fresh;
            fresh_copy_times.push_back(
                seconds([&] { sink += copy_all(contents.gradients(), fresh, true); }));
        } // freed outside the timing, like the snapshot below
        reused_copy_times.push_back(
            seconds([&] { sink += copy_all(contents.gradients(), reused, false); }));
        std::optional<ruda::gradients_params_record> snapshot;
        snapshot_times.push_back(
            seconds([&] { snapshot.emplace(bench::run(grads.to_record_async<cpu>())); }));
        sink += snapshot->entries().size();
        snapshot.reset();

        // Every variant once, starting at a different one each repetition. The last write of
        // a repetition leaves both files the reads need (raw.bin and ruda.ruda) in place.
        quiet();
        for (std::size_t k = 0; k < writes.size(); ++k) {
            const auto& [name, write] = writes[(k + static_cast<std::size_t>(r)) % writes.size()];
            if (name == "raw_write" || name.rfind("save", 0) == 0) {
                fs::remove(name == "raw_write" ? raw_path : saved_path);
            }
            ::sync();
            times[name].push_back(seconds(write));
        }
        for (std::size_t k = 0; k < reads.size(); ++k) {
            const auto& name = reads[(k + static_cast<std::size_t>(r)) % reads.size()];
            times[name].push_back(time_read(name));
        }
    }
    // The best of one and several raw writers (readers), as the medians of each.
    const auto best = [&](const std::string& single, const std::string& prefix, unsigned& count) {
        double fastest = median(times[single]);
        count = 1;
        for (const unsigned n : parallel_counts) {
            if (n > 1 && median(times[prefix + std::to_string(n)]) < fastest) {
                fastest = median(times[prefix + std::to_string(n)]);
                count = n;
            }
        }
        return fastest;
    };
    unsigned best_writers = 1;
    unsigned best_readers = 1;
    const double raw_write_best = best("raw_write", "raw_write_", best_writers);
    const double raw_read_best = best("raw_read", "raw_read_", best_readers);
    const auto& raw_write_times = times["raw_write"];
    const auto& save_times = times["save"];
    const auto& raw_read_times = times["raw_read"];
    const auto& load_times = times["load"];
    const double file_bytes = static_cast<double>(fs::file_size(saved_path));

    std::vector<double> mapped_load_times;
    bool mapped_immutable = false;
    {
        const unchangeable_file file{saved_path};
        mapped_immutable = file.immutable();
        if (ruda::checkpoint_reader::open(file.path()).value().mapping_reason().empty()) {
            std::fprintf(stderr, "the unchangeable file is not mapped\n");
            return 1;
        }
        for (int r = 0; r < s.reps; ++r) {
            mapped_load_times.push_back(time_load_and_restore(file.path(), sink));
        }
    }

    // A trainer's later snapshots, one after another as a training loop takes them: each reuses
    // the memory the one before freed. The first two are not counted: glibc takes the first
    // record's largest block from a mapping of its own and keeps such blocks only after one
    // has been freed.
    std::vector<double> repeated_snapshot_times;
    for (int r = 0; r < s.reps + 2; ++r) {
        std::optional<ruda::gradients_params_record> snapshot;
        const double time = bench::seconds_repeated(
            [&] { snapshot.emplace(bench::run(grads.to_record_async<cpu>())); });
        sink += snapshot->entries().size();
        if (r >= 2) {
            repeated_snapshot_times.push_back(time);
        }
    }

    // The numbers the default options come to for a save or load this large.
    const auto large = static_cast<std::uint64_t>(record_bytes);
    const unsigned writers = ruda::detail::io_threads(ruda::checkpoint_save_options{}.writers, large);
    const unsigned readers = ruda::detail::io_threads(ruda::checkpoint_load_options{}.readers, large);
    const double gib = 1024.0 * 1024.0 * 1024.0;
    const auto gbs = [&](double t) { return record_bytes / t / 1e9; };
    const double snapshot_ratio = median(fresh_copy_times) / median(snapshot_times);
    const double save_ratio = median(raw_write_times) / median(save_times);
    const double load_ratio = median(raw_read_times) / median(load_times);
    // One row per number of writers (readers) measured, against the one-thread baseline.
    const auto sweep_rows = [&](const std::string& prefix, const char* what, const char* thread,
                                double baseline) {
        for (const unsigned n : parallel_counts) {
            if (const auto found = times.find(prefix + std::to_string(n)); found != times.end()) {
                const double t = median(found->second);
                std::printf("| %s, %u %s%s | %.1f | %.2f | %.2fx |\n", what, n, thread,
                            n == 1 ? "" : "s", t * 1e3, gbs(t), baseline / t);
            }
        }
    };
    std::printf("## %zu tensors x %zu %s (%.3f GiB record, %.2f MiB file), median of %d, in %s\n\n",
                s.tensors, elements, ruda::to_string(s.dtype).c_str(), record_bytes / gib,
                file_bytes / (1 << 20), s.reps, dir.c_str());
    std::printf("| operation | median ms | GB/s | ratio to baseline |\n|---|---:|---:|---:|\n");
    std::printf("| memcpy into fresh buffers (baseline) | %.2f | %.2f | 1.00x |\n",
                median(fresh_copy_times) * 1e3, gbs(median(fresh_copy_times)));
    std::printf("| memcpy into reused buffers | %.2f | %.2f | %.2fx |\n",
                median(reused_copy_times) * 1e3, gbs(median(reused_copy_times)),
                median(fresh_copy_times) / median(reused_copy_times));
    std::printf("| to_record_async (snapshot) | %.2f | %.2f | %.2fx |\n",
                median(snapshot_times) * 1e3, gbs(median(snapshot_times)), snapshot_ratio);
    std::printf("| to_record_async, repeated (a training loop's later snapshots) | %.2f | %.2f | %.2fx |\n",
                median(repeated_snapshot_times) * 1e3, gbs(median(repeated_snapshot_times)),
                median(fresh_copy_times) / median(repeated_snapshot_times));
    std::printf("| raw write() + fsync (baseline) | %.1f | %.2f | 1.00x |\n",
                median(raw_write_times) * 1e3, gbs(median(raw_write_times)));
    std::printf("| save_checkpoint_file (checksums, fsync, rename, dir fsync; %u writers) | %.1f | %.2f | %.2fx |\n",
                writers, median(save_times) * 1e3,
                gbs(median(save_times)), save_ratio);
    std::printf("| raw write() + fsync, best of 1, 2, 4, 8 writers (%u) | %.1f | %.2f | %.2fx |\n",
                best_writers, raw_write_best * 1e3, gbs(raw_write_best),
                median(raw_write_times) / raw_write_best);
    sweep_rows("save_writers_", "save_checkpoint_file", "writer", median(raw_write_times));
    std::printf("| raw read() into a reused buffer + memcpy into fresh buffers (baseline) | %.1f | %.2f | 1.00x |\n",
                median(raw_read_times) * 1e3, gbs(median(raw_read_times)));
    std::printf("| load_checkpoint_file + from_record (checksums, validation, restore; %u readers) | %.1f | %.2f | %.2fx |\n",
                readers, median(load_times) * 1e3, gbs(median(load_times)), load_ratio);
    std::printf("| raw pread() + memcpy, best of 1, 2, 4, 8 readers (%u) | %.1f | %.2f | %.2fx |\n",
                best_readers, raw_read_best * 1e3, gbs(raw_read_best),
                median(raw_read_times) / raw_read_best);
    sweep_rows("load_readers_", "load + restore", "reader", median(raw_read_times));
    std::printf("| the same, mapped (%s) | %.1f | %.2f | %.2fx |\n\n",
                mapped_immutable ? "immutable file" : "sealed memfd copy",
                median(mapped_load_times) * 1e3, gbs(median(mapped_load_times)),
                median(raw_read_times) / median(mapped_load_times));

    const double record_mib = record_bytes / (1 << 20);
    std::printf("| peak RSS | before MiB | peak MiB | peak - record MiB | limit MiB |\n"
                "|---|---:|---:|---:|---:|\n");
    std::printf("| save (record in memory) | %.1f | %.1f | %.1f | record + 32 = %.1f |\n",
                save_rss.before_mib, save_rss.peak_mib, save_rss.peak_mib - record_mib,
                record_mib + 32);
    std::printf("| load (into a fresh record) | %.1f | %.1f | %.1f | record + 32 = %.1f |\n",
                load_rss.before_mib, load_rss.peak_mib, load_rss.peak_mib - record_mib,
                record_mib + 32);
    std::printf("\n(checksum %zu)\n", sink);

    if (s.json) {
        bench::figures f;
        f.add("record_bytes", record_bytes);
        f.add("file_bytes", file_bytes);
        f.add("memcpy_fresh_s", median(fresh_copy_times));
        f.add("memcpy_reused_s", median(reused_copy_times));
        f.add("snapshot_s", median(snapshot_times));
        f.add("snapshot_repeated_s", median(repeated_snapshot_times));
        f.add("raw_write_s", median(raw_write_times));
        f.add("save_s", median(save_times));
        f.add("raw_read_s", median(raw_read_times));
        f.add("load_s", median(load_times));
        f.add("load_mapped_s", median(mapped_load_times));
        f.add("raw_write_best_s", raw_write_best);
        f.add("raw_write_best_writers", best_writers);
        f.add("raw_read_best_s", raw_read_best);
        f.add("raw_read_best_readers", best_readers);
        f.add("save_writers", writers);
        f.add("load_readers", readers);
        for (const auto& [name, values] : times) {
            if (name.rfind("save_", 0) == 0 || name.rfind("load_", 0) == 0 ||
                name.rfind("raw_write_", 0) == 0 || name.rfind("raw_read_", 0) == 0) {
                f.add(name + "_s", median(values));
            }
        }
        f.add("load_mapped_immutable", mapped_immutable ? 1 : 0);
        f.add("tensors", static_cast<double>(s.tensors));
        f.add("save_rss_before_mib", save_rss.before_mib);
        f.add("save_rss_peak_mib", save_rss.peak_mib);
        f.add("load_rss_before_mib", load_rss.before_mib);
        f.add("load_rss_peak_mib", load_rss.peak_mib);
        f.write(*s.json);
    }

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
        for (const auto& [what, rss] : {std::pair{"save", save_rss}, std::pair{"load", load_rss}}) {
            if (rss.peak_mib > record_mib + 32) {
                std::fprintf(stderr, "FAIL: %s peaked at %.1f MiB, over record + 32 MiB\n", what,
                             rss.peak_mib);
                ++failed;
            }
        }
        return failed == 0 ? 0 : 1;
    }
    return 0;
}
