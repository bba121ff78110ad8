// bench/distributed: a distributed checkpoint of replicated gradients saved and loaded by every rank of
// an MPI job, against one process (rank 0 alone, in the same run) writing the same bytes with
// write() + fsync and reading them back with read(); with the bytes each rank wrote.
// Every rank holds all the gradients (replicated); the save plan spreads their bytes over the
// ranks, and each rank's load reads every piece (each rank gets the whole tensors back).
//
//   mpirun -np R distributed [--mib N] [--tensors N] [--reps N] --dir DIR [--json PATH]
#include "bench_util.hpp"

#include <ruda/dist/dist_checkpoint_manager.hpp>
#include <ruda/dist/mpi.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <vector>

namespace {

namespace fs = std::filesystem;

struct settings {
    std::size_t mib = 256;
    std::size_t tensors = 16;
    int reps = 3;
    std::optional<fs::path> dir;
    std::optional<std::string> json;
};

ruda::checkpoint replicated_gradients(const settings& s)
{
    const std::size_t elements = s.mib * (std::size_t{1} << 20U) / 4 / s.tensors;
    std::vector<ruda::gradient_entry> entries;
    for (std::size_t t = 0; t < s.tensors; ++t) {
        std::vector<float> v(elements);
        for (std::size_t i = 0; i < elements; ++i) {
            v[i] = static_cast<float>((i * 2654435761U + t) % 1000003U) * 1e-3F;
        }
        entries.push_back({ruda::param_id{t + 1}, ruda::dtype::f32(),
                           ruda::tensor_data::from_values(v, {elements}).value(), ""});
    }
    return ruda::checkpoint{ruda::gradients_params_record{std::move(entries)}};
}

// The whole file read back with read(), as one process loads it.
void raw_read(const fs::path& path, std::vector<std::uint8_t>& into)
{
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        std::perror("open");
        std::exit(1);
    }
    into.resize(fs::file_size(path));
    for (std::size_t done = 0; done < into.size();) {
        const ssize_t n = ::read(fd, into.data() + done, into.size() - done);
        if (n <= 0) {
            std::perror("read");
            std::exit(1);
        }
        done += static_cast<std::size_t>(n);
    }
    ::close(fd);
}

// Wall time of `f` across the job: from a barrier before it to a barrier after it.
double job_seconds(const std::function<void()>& f)
{
    MPI_Barrier(MPI_COMM_WORLD);
    const double seconds = bench::seconds([&] {
        f();
        MPI_Barrier(MPI_COMM_WORLD);
    });
    return seconds;
}

} // namespace

int main(int argc, char** argv)
{
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    settings s;
    bench::command_line{}
        .option("--mib", s.mib)
        .option("--tensors", s.tensors)
        .option("--reps", s.reps)
        .option("--dir", s.dir, "DIR")
        .option("--json", s.json, "PATH")
        .parse(argc, argv, [&s] { return s.mib >= 1 && s.tensors >= 1 && s.reps >= 1 && s.dir; });
    auto comm = ruda::mpi_communicator::create(MPI_COMM_WORLD);
    if (!comm) {
        std::fprintf(stderr, "%s\n", comm.error().message().c_str());
        return 1;
    }
    const int rank = comm.value()->rank();
    const int ranks = comm.value()->size();
    if (rank == 0) { // a fresh manager directory: a step of an earlier run is never written over
        fs::remove_all(*s.dir / "dist");
        fs::create_directories(*s.dir);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const auto contents = replicated_gradients(s);
    const auto record_bytes = static_cast<double>(s.mib) * (1U << 20U);
    const fs::path raw_path = *s.dir / "raw.bin";
    std::vector<double> raw_write_s, raw_read_s, save_s, load_s;
    std::vector<std::uint8_t> raw_buffer;
    std::uint64_t written = 0;
    {
        ruda::dist_checkpoint_manager manager{*comm.value(), *s.dir / "dist", {.keep_last = 1}};
        for (int rep = 0; rep < s.reps; ++rep) {
            raw_write_s.push_back(job_seconds([&] {
                if (rank == 0) {
                    bench::raw_write(raw_path, contents, 0, s.tensors);
                }
            }));
            raw_read_s.push_back(job_seconds([&] {
                if (rank == 0) {
                    raw_read(raw_path, raw_buffer);
                }
            }));
            if (rank == 0) {
                fs::remove(raw_path);
            }
            const auto step = static_cast<std::uint64_t>(rep);
            save_s.push_back(job_seconds([&] {
                const auto pending = bench::run(manager.async_save_record(step, contents, {}));
                const auto saved = pending.wait();
                if (!saved) {
                    std::fprintf(stderr, "save: %s\n", saved.error().message().c_str());
                    std::exit(1);
                }
                written = saved.value().bytes;
            }));
            load_s.push_back(job_seconds([&] {
                const auto restored = bench::run(manager.load(step));
                if (restored.contents.gradients().entries().size() != s.tensors) {
                    std::fprintf(stderr, "load: %zu gradients\n",
                                 restored.contents.gradients().entries().size());
                    std::exit(1);
                }
            }));
        }
    }
    std::vector<std::uint64_t> per_rank(static_cast<std::size_t>(ranks));
    MPI_Gather(&written, 1, MPI_UINT64_T, per_rank.data(), 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        const double mean = static_cast<double>(std::accumulate(per_rank.begin(), per_rank.end(),
                                                                std::uint64_t{0})) /
                            ranks;
        const auto [least, most] = std::minmax_element(per_rank.begin(), per_rank.end());
        const auto gbs = [&](double seconds) { return record_bytes / seconds / 1e9; };
        std::printf("| %d ranks, %zu MiB replicated | median s | GB/s |\n|---|---:|---:|\n", ranks,
                    s.mib);
        std::printf("| one process: write() + fsync | %.3f | %.2f |\n", bench::median(raw_write_s),
                    gbs(bench::median(raw_write_s)));
        std::printf("| ruda: save, committed | %.3f | %.2f |\n", bench::median(save_s),
                    gbs(bench::median(save_s)));
        std::printf("| one process: read() | %.3f | %.2f |\n", bench::median(raw_read_s),
                    gbs(bench::median(raw_read_s)));
        std::printf("| ruda: load on every rank, verified | %.3f | %.2f |\n", bench::median(load_s),
                    gbs(bench::median(load_s)));
        for (int r = 0; r < ranks; ++r) {
            std::printf("rank %d wrote %llu bytes\n", r,
                        static_cast<unsigned long long>(per_rank[static_cast<std::size_t>(r)]));
        }
        if (s.json) {
            bench::figures f;
            f.add("ranks", ranks);
            f.add("record_bytes", record_bytes);
            f.add("raw_write_s", bench::median(raw_write_s));
            f.add("raw_read_s", bench::median(raw_read_s));
            f.add("save_s", bench::median(save_s));
            f.add("load_s", bench::median(load_s));
            f.add("rank_bytes_min", static_cast<double>(*least));
            f.add("rank_bytes_max", static_cast<double>(*most));
            f.add("balance", static_cast<double>(*most) / mean);
            f.write(*s.json);
        }
    }
    comm.value().reset();
    MPI_Finalize();
    return 0;
}
