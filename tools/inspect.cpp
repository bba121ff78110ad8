// ruda-inspect's command line: the files and directories named, each read into a report
// (file_report.hpp), printed as a table or JSON (report_printing.hpp), with what a manager would
// make of a directory (directory_reports.hpp); or a safetensors export (safetensors_export.hpp).
#include "inspect.hpp"

#include "directory_reports.hpp"
#include "file_report.hpp"
#include "report_printing.hpp"
#include "safetensors_export.hpp"

#include <ruda/checkpoint/checkpoint_manager.hpp>
#include <ruda/dist/dist_checkpoint_manager.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <system_error>

namespace ruda::tools {
namespace {

constexpr const char* usage =
    "usage: ruda-inspect [--json] [--verify] FILE|DIR...\n"
    "       ruda-inspect --export-safetensors OUT [--group NAME] FILE|DIR\n"
    "  Lists the tensors (group, id, name, dtype, stored dtype, shape, size, checksum) and\n"
    "  sections (those of up to 64 bytes with their value) of each checkpoint file, and the run\n"
    "  and step that wrote it (a directory: its *.ruda files; a manager's \"latest\": the file\n"
    "  it names).\n"
    "  --json    the same as JSON\n"
    "  --verify  one line per file; exit 1 unless every file loads completely. For a\n"
    "            directory of checkpoints, also the step \"latest\" names and the newest\n"
    "            checkpoint that loads (what load_newest_valid returns), with the newer ones\n"
    "            passed over and why\n"
    "            A distributed checkpoint's step directory (with manifest.ruda): also its\n"
    "            manifest, and that every piece it names is in its rank's file with the\n"
    "            checksum it names, each gradient covered exactly once; a directory of such\n"
    "            steps: each step, and the one \"latest\" names\n"
    "  --export-safetensors OUT  writes a group of checkpoint FILE (a directory or \"latest\":\n"
    "            the checkpoint \"latest\" names) to OUT as safetensors, each tensor named by\n"
    "            its parameter's name, or id (after a full, verified load): the group --group\n"
    "            names, else \"weights\" where there is one, else the only group; without\n"
    "            either, every group, each tensor named \"group.name\"\n"
    "  When standard error is a terminal, a progress line there shows each file's reading.\n"
    "  -h, --help  this text\n";

// The checkpoint file a manager's `latest` names, or `latest` itself when it names none (its
// load then says why).
std::filesystem::path named_by_latest(const std::filesystem::path& latest)
{
    const checkpoint_manager manager{latest.parent_path()};
    const auto step = manager.latest_step();
    return step && step.value() ? manager.path_of(*step.value()) : latest;
}

// The files named: a directory stands for its *.ruda files in name order (one without any
// for itself, and is listed in `empty`), and a manager's "latest" for the file it names.
std::vector<std::filesystem::path> expand(const std::vector<std::string>& names,
                                          std::vector<std::filesystem::path>& empty)
{
    std::vector<std::filesystem::path> files;
    for (const std::string& name : names) {
        std::error_code ec;
        if (!std::filesystem::is_directory(name, ec)) {
            const std::filesystem::path path{name};
            files.push_back(path.filename() == "latest" ? named_by_latest(path) : path);
            continue;
        }
        std::vector<std::filesystem::path> inside;
        for (const auto& item : std::filesystem::directory_iterator(name, ec)) {
            if (item.path().extension() == ".ruda" ||
                std::filesystem::exists(item.path() / manifest_file_name(), ec)) {
                inside.push_back(item.path());
            }
        }
        if (inside.empty()) {
            empty.emplace_back(name);
            inside.emplace_back(name);
        }
        std::sort(inside.begin(), inside.end());
        for (const auto& path : inside) {
            if (std::filesystem::exists(path / manifest_file_name(), ec)) { // a distributed step
                const auto step = expand({path.string()}, empty);
                files.insert(files.end(), step.begin(), step.end());
            } else {
                files.push_back(path);
            }
        }
    }
    return files;
}

} // namespace

std::string human_size(std::uint64_t bytes)
{
    if (bytes < 1024) {
        return std::to_string(bytes) + " B";
    }
    static constexpr std::array<const char*, 6> units{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double value = static_cast<double>(bytes) / 1024.0;
    std::size_t unit = 0;
    while (value >= 1024.0 && unit + 1 < units.size()) {
        value /= 1024.0;
        ++unit;
    }
    char text[32];
    std::snprintf(text, sizeof text, "%.1f %s", value, units[unit]);
    return text;
}

int inspect_main(const std::vector<std::string>& args, std::ostream& out, std::ostream* progress)
{
    bool json = false;
    bool verify = false;
    std::optional<std::filesystem::path> export_to;
    std::optional<std::string> group;
    std::vector<std::string> names;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (arg == "--export-safetensors" && i + 1 < args.size() && !export_to) {
            export_to = args[++i];
        } else if (arg == "--group" && i + 1 < args.size() && !group) {
            group = args[++i];
        } else if (arg == "--group") {
            out << "ruda-inspect: --group takes NAME once\n" << usage;
            return 2;
        } else if (arg == "--json") {
            json = true;
        } else if (arg == "--verify") {
            verify = true;
        } else if (arg == "--help" || arg == "-h") {
            out << usage;
            return 0;
        } else if (arg == "--export-safetensors") {
            out << "ruda-inspect: --export-safetensors takes OUT once, then FILE\n" << usage;
            return 2;
        } else if (arg.starts_with("-") && arg != "-") {
            out << "ruda-inspect: unknown option " << arg << "\n" << usage;
            return 2;
        } else {
            names.push_back(arg);
        }
    }
    if (export_to) {
        if (json || verify || names.size() != 1) {
            out << usage;
            return 2;
        }
        progress_line line{progress};
        return export_safetensors_of(names.front(), group, *export_to, out, line);
    }
    if (group) {
        out << "ruda-inspect: --group goes with --export-safetensors\n" << usage;
        return 2;
    }
    if (names.empty()) {
        out << usage;
        return 2;
    }
    std::vector<std::filesystem::path> empty;
    const auto files = expand(names, empty);
    std::vector<report> reports;
    progress_line line{progress};
    for (const auto& file : files) {
        if (std::find(empty.begin(), empty.end(), file) != empty.end()) {
            reports.push_back({file, {}, {}, {}, "no checkpoint files (*.ruda)", {}});
        } else {
            reports.push_back(read_report(file, json || !verify, verify, line));
        }
    }
    if (json) {
        print_json(reports, out);
    } else if (verify) {
        for (const report& r : reports) {
            if (r.problem) {
                out << r.file.string() << ": " << *r.problem << "\n";
            } else {
                const auto& identity = r.index->identity;
                out << r.file.string() << ": ok (" << tensors_text(*r.index) << ", "
                    << r.index->sections.size() << " sections, "
                    << human_size(r.index->file_length)
                    << (identity ? "; step " + std::to_string(identity->step) + " of run " +
                                       identity->run_id
                                 : std::string{})
                    << ")\n";
            }
        }
    } else if (!json) {
        for (const report& r : reports) {
            print_table(r, out);
        }
    }
    bool all_sound = std::none_of(reports.begin(), reports.end(),
                                  [](const report& r) { return r.problem.has_value(); });
    if (json) {
        return all_sound ? 0 : 1;
    }
    for (const std::string& name : names) {
        std::error_code ec;
        if (std::filesystem::exists(std::filesystem::path{name} / manifest_file_name(), ec)) {
            all_sound = print_distributed_step(name, verify, out) && all_sound;
            continue;
        }
        bool distributed = false;
        for (const auto& item : std::filesystem::directory_iterator(name, ec)) {
            if (std::filesystem::exists(item.path() / manifest_file_name(), ec)) {
                all_sound = print_distributed_step(item.path(), verify, out) && all_sound;
                distributed = true;
            }
        }
        if (distributed) {
            print_distributed_latest(name, out);
        } else if (verify && std::filesystem::is_directory(name, ec)) {
            print_directory(name, reports, out);
        }
    }
    return all_sound ? 0 : 1;
}

} // namespace ruda::tools
