// ruda-inspect: reads only through checkpoint_reader, so a hostile file gets the same checks
// as any load; every payload's checksum is verified for the table and the JSON.
#include "inspect.hpp"

#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/checkpoint/checkpoint_manager.hpp>
#include <ruda/checkpoint/safetensors.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>
#include <system_error>

namespace ruda::tools {
namespace {

constexpr const char* usage =
    "usage: ruda-inspect [--json] [--verify] FILE|DIR...\n"
    "       ruda-inspect --export-safetensors OUT FILE\n"
    "  Lists the gradients (id, dtype, stored dtype, shape, bytes, checksum) and sections of\n"
    "  each checkpoint file (a directory: its *.ruda files; a manager's \"latest\": the file\n"
    "  it names).\n"
    "  --json    the same as JSON\n"
    "  --verify  one line per file; exit 1 unless every file loads completely. For a\n"
    "            directory of checkpoints, also the step \"latest\" names and the newest\n"
    "            checkpoint that loads (what load_newest_valid returns), with the newer ones\n"
    "            passed over and why\n"
    "  --export-safetensors OUT  writes the gradients of checkpoint FILE to OUT as safetensors,\n"
    "            each tensor named by its parameter id (after a full, verified load)\n"
    "  -h, --help  this text\n";

struct report {
    std::filesystem::path file;
    std::optional<checkpoint_index> index;
    std::vector<bool> entry_ok;
    std::vector<bool> section_ok;
    std::optional<std::string> problem; // the first, on one line
};

// Keeps the first problem, without the "Checkpoint FILE: " a library message starts with:
// every line that shows it already starts with the file.
void note(report& r, std::string problem)
{
    const std::string prefix = "Checkpoint " + r.file.string() + ": ";
    if (problem.starts_with(prefix)) {
        problem.erase(0, prefix.size());
    }
    if (!r.problem) {
        r.problem = std::move(problem);
    }
}

report inspect(const std::filesystem::path& file, bool check_payloads, bool verify)
{
    report r{file, {}, {}, {}, {}};
    auto reader = checkpoint_reader::open(file);
    if (!reader) {
        note(r, reader.error().message());
        return r;
    }
    r.index = reader.value().index();
    const auto intact = [&](const payload_location& payload, const std::string& what) {
        const auto ok = reader.value().payload_intact(payload);
        if (!ok) {
            note(r, ok.error().message());
            return false;
        }
        if (!ok.value()) {
            note(r, "Checkpoint " + file.string() + ": checksum mismatch in " + what);
        }
        return ok.value();
    };
    if (check_payloads) {
        for (const auto& e : r.index->entries) {
            r.entry_ok.push_back(intact(e.payload, "the gradient of parameter " + std::to_string(e.id)));
        }
        for (const auto& s : r.index->sections) {
            r.section_ok.push_back(intact(s.payload, "section " + s.name));
        }
    }
    if (verify && !r.problem) {
        if (auto loaded = reader.value().load(); !loaded) {
            note(r, loaded.error().message());
        }
    }
    return r;
}

std::string shape_text(const shape& dims)
{
    std::string text = "[";
    for (std::size_t i = 0; i < dims.size(); ++i) {
        text += (i == 0 ? "" : ", ") + std::to_string(dims[i]);
    }
    return text + "]";
}

std::string hex(std::uint64_t v)
{
    char text[19];
    std::snprintf(text, sizeof text, "0x%016llx", static_cast<unsigned long long>(v));
    return text;
}

std::string json_string(const std::string& s)
{
    std::string out = "\"";
    for (const char c : s) {
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\t': out += "\\t"; break;
        default:
            if (static_cast<unsigned char>(c) < 0x20) {
                char escaped[7];
                std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
                out += escaped;
            } else {
                out += c;
            }
        }
    }
    return out + "\"";
}

void print_table(const report& r, std::ostream& out)
{
    if (!r.index) {
        out << r.file.string() << ": " << *r.problem << "\n";
        return;
    }
    const auto& index = *r.index;
    out << r.file.string() << ": format " << index.format_version << ", written by ruda "
        << index.producer << ", " << index.file_length << " bytes, " << index.entries.size()
        << " gradients, " << index.sections.size() << " sections\n\n";
    out << "| id | dtype | stored | shape | bytes | checksum |\n|---:|---|---|---|---:|---|\n";
    for (std::size_t k = 0; k < index.entries.size(); ++k) {
        const auto& e = index.entries[k];
        out << "| " << e.id << " | " << to_string(e.original) << " | " << to_string(e.stored)
            << " | " << shape_text(e.shape) << " | " << e.payload.length << " | "
            << (r.entry_ok[k] ? "ok" : "MISMATCH") << " |\n";
    }
    if (!index.sections.empty()) {
        out << "\n| section | bytes | checksum |\n|---|---:|---|\n";
        for (std::size_t k = 0; k < index.sections.size(); ++k) {
            const auto& s = index.sections[k];
            out << "| " << s.name << " | " << s.payload.length << " | "
                << (r.section_ok[k] ? "ok" : "MISMATCH") << " |\n";
        }
    }
    if (r.problem) {
        out << "\n" << *r.problem << "\n";
    }
    out << "\n";
}

void print_json(const std::vector<report>& reports, std::ostream& out)
{
    out << "[";
    for (std::size_t f = 0; f < reports.size(); ++f) {
        const report& r = reports[f];
        out << (f == 0 ? "" : ",") << "\n  {\"file\": " << json_string(r.file.string())
            << ", \"ok\": " << (r.problem ? "false" : "true")
            << ", \"error\": " << (r.problem ? json_string(*r.problem) : "null");
        if (r.index) {
            const auto& index = *r.index;
            out << ", \"format_version\": " << index.format_version
                << ", \"producer\": " << json_string(index.producer)
                << ", \"bytes\": " << index.file_length << ",\n   \"entries\": [";
            for (std::size_t k = 0; k < index.entries.size(); ++k) {
                const auto& e = index.entries[k];
                out << (k == 0 ? "" : ",") << "\n    {\"id\": " << e.id
                    << ", \"dtype\": " << json_string(to_string(e.original))
                    << ", \"stored_dtype\": " << json_string(to_string(e.stored))
                    << ", \"shape\": [";
                for (std::size_t d = 0; d < e.shape.size(); ++d) {
                    out << (d == 0 ? "" : ", ") << e.shape[d];
                }
                out << "], \"offset\": " << e.payload.offset << ", \"bytes\": " << e.payload.length
                    << ", \"checksum\": \"" << hex(e.payload.checksum)
                    << "\", \"checksum_ok\": " << (r.entry_ok[k] ? "true" : "false") << "}";
            }
            out << "],\n   \"sections\": [";
            for (std::size_t k = 0; k < index.sections.size(); ++k) {
                const auto& s = index.sections[k];
                out << (k == 0 ? "" : ",") << "\n    {\"name\": " << json_string(s.name)
                    << ", \"offset\": " << s.payload.offset << ", \"bytes\": " << s.payload.length
                    << ", \"checksum\": \"" << hex(s.payload.checksum)
                    << "\", \"checksum_ok\": " << (r.section_ok[k] ? "true" : "false") << "}";
            }
            out << "]";
        }
        out << "}";
    }
    out << "\n]\n";
}

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
            if (item.path().extension() == ".ruda") {
                inside.push_back(item.path());
            }
        }
        if (inside.empty()) {
            empty.emplace_back(name);
            inside.emplace_back(name);
        }
        std::sort(inside.begin(), inside.end());
        files.insert(files.end(), inside.begin(), inside.end());
    }
    return files;
}

// What a checkpoint manager would make of directory `dir`, from the reports of its files (which
// were loaded completely, like load_newest_valid loads them): the step "latest" names and the
// newest checkpoint that loads, with each newer one passed over.
void print_directory(const std::filesystem::path& dir, const std::vector<report>& reports,
                     std::ostream& out)
{
    const checkpoint_manager manager{dir};
    const auto steps = manager.steps();
    if (steps.empty()) {
        return;
    }
    const auto problem_of = [&](std::uint64_t step) -> std::optional<std::string> {
        const auto found = std::find_if(reports.begin(), reports.end(), [&](const report& r) {
            return r.file == manager.path_of(step);
        });
        return found == reports.end() ? "not inspected" : found->problem;
    };
    const auto latest = manager.latest_step();
    out << dir.string() << ": ";
    if (!latest) {
        out << latest.error().message() << "\n";
    } else if (!latest.value()) {
        out << "no \"latest\"\n";
    } else {
        out << "\"latest\" names step " << *latest.value()
            << (problem_of(*latest.value()) ? ", which does not load" : "") << "\n";
    }
    for (auto step = steps.rbegin(); step != steps.rend(); ++step) {
        const auto problem = problem_of(*step);
        if (!problem) {
            out << dir.string() << ": the newest checkpoint that loads is step " << *step << "\n";
            return;
        }
        out << dir.string() << ": passed over step " << *step << ": " << *problem << "\n";
    }
    out << dir.string() << ": no checkpoint loads\n";
}

// Loads `file` completely (every check a load makes) and writes its gradients to `out_path`.
int export_safetensors_of(const std::filesystem::path& file, const std::filesystem::path& out_path,
                          std::ostream& out)
{
    auto loaded = load_checkpoint_file(file);
    if (!loaded) {
        out << file.string() << ": " << loaded.error().message() << "\n";
        return 1;
    }
    const auto& record = loaded.value().gradients();
    const auto written = export_safetensors(record, out_path);
    if (!written) {
        out << out_path.string() << ": " << written.error().message() << "\n";
        return 1;
    }
    out << out_path.string() << ": " << record.entries().size() << " gradients of "
        << file.string() << ", " << written.value() << " bytes\n";
    return 0;
}

} // namespace

int inspect_main(const std::vector<std::string>& args, std::ostream& out)
{
    bool json = false;
    bool verify = false;
    std::optional<std::filesystem::path> export_to;
    std::vector<std::string> names;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (arg == "--export-safetensors" && i + 1 < args.size() && !export_to) {
            export_to = args[++i];
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
        return export_safetensors_of(names.front(), *export_to, out);
    }
    if (names.empty()) {
        out << usage;
        return 2;
    }
    std::vector<std::filesystem::path> empty;
    const auto files = expand(names, empty);
    std::vector<report> reports;
    for (const auto& file : files) {
        if (std::find(empty.begin(), empty.end(), file) != empty.end()) {
            reports.push_back({file, {}, {}, {}, "no checkpoint files (*.ruda)"});
        } else {
            reports.push_back(inspect(file, json || !verify, verify));
        }
    }
    if (json) {
        print_json(reports, out);
    } else if (verify) {
        for (const report& r : reports) {
            if (r.problem) {
                out << r.file.string() << ": " << *r.problem << "\n";
            } else {
                out << r.file.string() << ": ok (" << r.index->entries.size() << " gradients, "
                    << r.index->sections.size() << " sections, " << r.index->file_length
                    << " bytes)\n";
            }
        }
        for (const std::string& name : names) {
            std::error_code ec;
            if (std::filesystem::is_directory(name, ec)) {
                print_directory(name, reports, out);
            }
        }
    } else {
        for (const report& r : reports) {
            print_table(r, out);
        }
    }
    const bool all_sound = std::none_of(reports.begin(), reports.end(),
                                        [](const report& r) { return r.problem.has_value(); });
    return all_sound ? 0 : 1;
}

} // namespace ruda::tools
