#include "directory_reports.hpp"

#include <ruda/checkpoint/checkpoint_manager.hpp>
#include <ruda/dist/dist_checkpoint_manager.hpp>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>

namespace ruda::tools {

bool print_distributed_step(const std::filesystem::path& dir, bool verify, std::ostream& out)
{
    const auto manifest = read_manifest(dir / manifest_file_name());
    if (!manifest) {
        out << dir.string() << ": " << manifest.error().message() << "\n";
        return false;
    }
    const dist_manifest& m = manifest.value();
    out << dir.string() << ": distributed checkpoint of step " << m.step << " by "
        << m.world_size << " ranks, " << m.tensors.size()
        << " gradients, each covered exactly once\n";
    std::map<std::uint32_t, std::optional<checkpoint_index>> files;
    bool sound = true;
    for (const tensor_layout& t : m.tensors) {
        std::string pieces;
        for (const tensor_piece& p : t.pieces) {
            pieces += " rank " + std::to_string(p.rank) + " [" + std::to_string(p.range.offset) +
                      ", " + std::to_string(p.range.end()) + ")";
            auto [file, opened] = files.try_emplace(p.rank);
            if (opened) {
                auto reader = checkpoint_reader::open(dir / rank_file_name(p.rank));
                if (reader) {
                    file->second = reader.value().index();
                } else {
                    out << dir.string() << ": " << reader.error().message() << "\n";
                    sound = false;
                }
            }
            if (!file->second) {
                continue;
            }
            const auto& entries = file->second->entries;
            const auto entry = std::find_if(entries.begin(), entries.end(),
                                            [&t](const auto& e) { return e.id == t.id; });
            if (entry == entries.end() || entry->payload.checksum != p.checksum) {
                out << dir.string() << ": parameter " << to_string(t.id) << ": rank "
                    << p.rank << "'s file "
                    << (entry == entries.end() ? "does not hold it"
                                               : "holds another payload than the manifest names")
                    << "\n";
                sound = false;
            }
        }
        if (!verify) {
            out << "  " << to_string(t.id) << "  " << to_string(t.kind) << "  "
                << to_string(t.stored) << "  " << to_string(t.shape) << " " << pieces << "\n";
        }
    }
    if (sound) {
        out << dir.string() << ": the manifest and the rank files agree\n";
    }
    return sound;
}

void print_distributed_latest(const std::filesystem::path& dir, std::ostream& out)
{
    solo_communicator alone; // only to name the directory: nothing is saved or loaded
    const dist_checkpoint_manager manager{alone, dir};
    const auto latest = manager.latest_step();
    if (!latest) {
        out << dir.string() << ": " << latest.error().message() << "\n";
    } else if (latest.value()) {
        out << dir.string() << ": \"latest\" names step " << *latest.value() << "\n";
    }
}

void print_directory(const std::filesystem::path& dir, const std::vector<report>& reports,
                     std::ostream& out)
{
    const checkpoint_manager manager{dir};
    const auto listed = manager.steps();
    if (!listed) {
        out << dir.string() << ": " << listed.error().message() << "\n";
        return;
    }
    const auto& steps = listed.value();
    if (steps.empty()) {
        return;
    }
    const auto report_of = [&](std::uint64_t step) -> const report* {
        const auto found = std::find_if(reports.begin(), reports.end(), [&](const report& r) {
            return r.file == manager.path_of(step);
        });
        return found == reports.end() ? nullptr : &*found;
    };
    const auto problem_of = [&](std::uint64_t step) -> std::optional<std::string> {
        const report* r = report_of(step);
        return r == nullptr ? "not inspected" : r->problem;
    };
    const auto run_of = [&](std::uint64_t step) -> std::optional<std::string> {
        const report* r = report_of(step);
        if (r == nullptr || !r->index || !r->index->identity) {
            return std::nullopt;
        }
        return r->index->identity->run_id;
    };
    const auto of_run = [](const std::optional<std::string>& run) {
        return run ? " of run " + *run : std::string{};
    };
    const auto latest = manager.latest_step();
    const auto latest_run = manager.latest_run_id();
    out << dir.string() << ": ";
    if (!latest) {
        out << latest.error().message() << "\n";
    } else if (!latest.value()) {
        out << "no \"latest\"\n";
    } else {
        out << "\"latest\" names step " << *latest.value() << of_run(latest_run)
            << (problem_of(*latest.value()) ? ", which does not load" : "") << "\n";
    }
    // The line of the run "latest" names, by the runs the files record (as the manager does).
    std::vector<run_identity> identities;
    for (const std::uint64_t step : steps) {
        const report* r = report_of(step);
        if (r != nullptr && r->index && r->index->identity) {
            identities.push_back(*r->index->identity);
        }
    }
    const auto line = latest_run ? lineage_of(*latest_run, identities)
                                 : std::set<std::string, std::less<>>{};
    std::vector<std::uint64_t> of_other_runs;
    for (auto step = steps.rbegin(); step != steps.rend(); ++step) {
        const report* r = report_of(*step);
        const auto run = run_of(*step);
        if (r != nullptr && r->index && latest_run && (!run || !line.contains(*run))) {
            out << dir.string() << ": passed over step " << *step << of_run(run)
                << ": another run than the line of the one \"latest\" names\n";
            of_other_runs.push_back(*step);
            continue;
        }
        const auto problem = problem_of(*step);
        if (!problem) {
            out << dir.string() << ": the newest checkpoint that loads is step " << *step
                << "\n";
            return;
        }
        out << dir.string() << ": passed over step " << *step << ": " << *problem << "\n";
    }
    for (const std::uint64_t step : of_other_runs) {
        if (!problem_of(step)) {
            out << dir.string() << ": the newest checkpoint that loads is step " << step
                << of_run(run_of(step)) << ", not of the line of the run \"latest\" names: "
                << "none of that line loads\n";
            return;
        }
    }
    out << dir.string() << ": no checkpoint loads\n";
}

} // namespace ruda::tools
