// ruda-inspect: reads only through checkpoint_reader, so a hostile file gets the same checks
// as any load; every payload's checksum is verified for the table and the JSON.
#include "inspect.hpp"

#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/checkpoint/checkpoint_manager.hpp>
#include <ruda/checkpoint/detail/json_quote.hpp>
#include <ruda/checkpoint/detail/little_endian.hpp>
#include <ruda/checkpoint/detail/utf8.hpp>
#include <ruda/checkpoint/safetensors.hpp>
#include <ruda/dist/dist_checkpoint_manager.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <sstream>
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

struct report {
    std::filesystem::path file;
    std::optional<checkpoint_index> index;
    std::vector<bool> entry_ok;
    std::vector<bool> section_ok;
    std::optional<std::string> problem; // the first, on one line
    std::vector<std::string> section_value; // what a short section holds, as `section_value`
};

// Sections of up to this many bytes are shown with their value.
constexpr std::uint64_t shown_section_bytes = 64;

bool printable_text(std::string_view text)
{
    return detail::valid_utf8(text) && std::none_of(text.begin(), text.end(), [](char c) {
               const auto byte = static_cast<unsigned char>(c);
               return (byte < 0x20 && c != '\t' && c != '\n') || byte == 0x7f;
           });
}

std::string hex_bytes(std::span<const std::uint8_t> bytes)
{
    static constexpr char digits[] = "0123456789abcdef";
    std::string out = "0x";
    for (const std::uint8_t b : bytes) {
        out += digits[b >> 4U];
        out += digits[b & 0xfU];
    }
    return out;
}

// What a short section holds, for a person: text when its bytes are text, a string as cereal
// writes one (its length, then the text) as that text, anything else in hexadecimal; 8 or 4
// bytes followed by the integer and the float they read as (a step, a loss).
std::string section_value(std::span<const std::uint8_t> bytes)
{
    const std::string_view text{reinterpret_cast<const char*>(bytes.data()), bytes.size()};
    if (!bytes.empty() && printable_text(text)) {
        return "\"" + std::string(text) + "\"";
    }
    if (bytes.size() >= 8 && detail::load_le(bytes.first(8)) == bytes.size() - 8 &&
        printable_text(text.substr(8))) {
        return "\"" + std::string(text.substr(8)) + "\"";
    }
    char number[96];
    if (bytes.size() == 8) {
        const std::uint64_t bits = detail::load_le(bytes);
        double real = 0;
        std::memcpy(&real, &bits, sizeof real);
        std::snprintf(number, sizeof number, " (u64 %llu, f64 %.17g)",
                      static_cast<unsigned long long>(bits), real);
        return hex_bytes(bytes) + number;
    }
    if (bytes.size() == 4) {
        const auto bits = static_cast<std::uint32_t>(detail::load_le(bytes));
        float real = 0;
        std::memcpy(&real, &bits, sizeof real);
        std::snprintf(number, sizeof number, " (u32 %u, f32 %.9g)", bits,
                      static_cast<double>(real));
        return hex_bytes(bytes) + number;
    }
    return hex_bytes(bytes);
}

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

// "FILE: 45% of 3.0 GiB" on one line, rewritten in place at most ten times a second and at
// the end, then erased: what a person at a terminal watches during a long read. Prints
// nothing without a sink.
class progress_line {
public:
    explicit progress_line(std::ostream* sink) : sink_(sink) {}
    progress_line(const progress_line&) = delete;
    progress_line& operator=(const progress_line&) = delete;
    ~progress_line() { clear(); }

    void show(const std::filesystem::path& file, std::uint64_t done, std::uint64_t total)
    {
        const auto now = std::chrono::steady_clock::now();
        if (sink_ == nullptr || (done < total && now - last_ < std::chrono::milliseconds(100))) {
            return;
        }
        last_ = now;
        const unsigned percent = total == 0 ? 100U : static_cast<unsigned>(done * 100 / total);
        std::string text = file.string() + ": " + std::to_string(percent) + "% of " +
                           human_size(total);
        const std::size_t width = std::max(shown_, text.size());
        shown_ = text.size();
        text.resize(width, ' '); // covers a longer line shown before
        *sink_ << '\r' << text << std::flush;
    }
    void clear()
    {
        if (sink_ != nullptr && shown_ != 0) {
            *sink_ << '\r' << std::string(shown_, ' ') << '\r' << std::flush;
            shown_ = 0;
        }
    }

private:
    std::ostream* sink_;
    std::size_t shown_ = 0;
    std::chrono::steady_clock::time_point last_{};
};

report inspect(const std::filesystem::path& file, bool check_payloads, bool verify,
               progress_line& line)
{
    report r{file, {}, {}, {}, {}, {}};
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
        std::uint64_t total = 0;
        for (const auto& e : r.index->entries) {
            total += e.payload.length;
        }
        for (const auto& s : r.index->sections) {
            total += s.payload.length;
        }
        std::uint64_t done = 0;
        for (const auto& e : r.index->entries) {
            r.entry_ok.push_back(intact(e.payload, "the gradient of parameter " + to_string(e.id)));
            line.show(file, done += e.payload.length, total);
        }
        for (const auto& s : r.index->sections) {
            r.section_ok.push_back(intact(s.payload, "section " + s.name));
            line.show(file, done += s.payload.length, total);
        }
    }
    for (const auto& s : r.index->sections) {
        std::string value;
        if (s.payload.length <= shown_section_bytes) {
            if (auto bytes = reader.value().read_section(s); bytes) {
                value = section_value(bytes.value());
            }
        }
        r.section_value.push_back(std::move(value));
    }
    if (verify && !r.problem) {
        checkpoint_load_options options;
        options.on_progress = [&](const checkpoint_progress& p) {
            line.show(file, p.bytes_done, p.bytes_total);
        };
        if (auto loaded = reader.value().load(options); !loaded) {
            note(r, loaded.error().message());
        }
    }
    line.clear();
    return r;
}

std::string hex(std::uint64_t v)
{
    char text[19];
    std::snprintf(text, sizeof text, "0x%016llx", static_cast<unsigned long long>(v));
    return text;
}

// A name in a Markdown table cell: '|' would end the cell.
std::string table_cell(const std::string& text)
{
    std::string out;
    for (const char c : text) {
        if (c == '|') {
            out += '\\';
        }
        out += c;
    }
    return out;
}

// ", step 3 of run R" for a file that records its run, else nothing.
std::string identity_text(const checkpoint_index& index)
{
    if (!index.identity) {
        return {};
    }
    return ", step " + std::to_string(index.identity->step) + " of run " + index.identity->run_id;
}

// "14 gradients", or "12 tensors in 3 groups (weights 4, gradients 4, optimizer 4)".
std::string tensors_text(const checkpoint_index& index)
{
    if (index.groups.size() == 1 && index.groups.front().name == "gradients") {
        return std::to_string(index.entries.size()) + " gradients";
    }
    std::string text = std::to_string(index.entries.size()) + " tensors in " +
                       std::to_string(index.groups.size()) + " groups (";
    for (std::size_t g = 0; g < index.groups.size(); ++g) {
        text += (g == 0 ? "" : ", ") + index.groups[g].name + " " +
                std::to_string(index.groups[g].count);
    }
    return text + ")";
}

void print_table(const report& r, std::ostream& out)
{
    if (!r.index) {
        out << r.file.string() << ": " << *r.problem << "\n";
        return;
    }
    const auto& index = *r.index;
    out << r.file.string() << ": format " << index.format_version << ", written by ruda "
        << index.producer << identity_text(index) << ", " << human_size(index.file_length)
        << " (" << index.file_length << " bytes), " << tensors_text(index) << ", "
        << index.sections.size() << " sections\n\n";
    out << "| group | id | name | dtype | stored | shape | size | checksum |\n"
           "|---|---:|---|---|---|---|---:|---|\n";
    for (std::size_t k = 0; k < index.entries.size(); ++k) {
        const auto& e = index.entries[k];
        out << "| " << table_cell(std::string(index.group_of(k))) << " | " << e.id << " | "
            << table_cell(e.name) << " | " << to_string(e.original)
            << " | " << to_string(e.stored) << " | " << to_string(e.shape) << " | "
            << human_size(e.payload.length) << " | " << (r.entry_ok[k] ? "ok" : "MISMATCH")
            << " |\n";
    }
    if (!index.sections.empty()) {
        out << "\n| section | size | checksum | value |\n|---|---:|---|---|\n";
        for (std::size_t k = 0; k < index.sections.size(); ++k) {
            const auto& s = index.sections[k];
            out << "| " << table_cell(s.name) << " | " << human_size(s.payload.length) << " | "
                << (r.section_ok[k] ? "ok" : "MISMATCH") << " | "
                << table_cell(r.section_value[k]) << " |\n";
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
        out << (f == 0 ? "" : ",") << "\n  {\"file\": " << detail::json_quote(r.file.string())
            << ", \"ok\": " << (r.problem ? "false" : "true")
            << ", \"error\": " << (r.problem ? detail::json_quote(*r.problem) : "null");
        if (r.index) {
            const auto& index = *r.index;
            out << ", \"format_version\": " << index.format_version
                << ", \"producer\": " << detail::json_quote(index.producer)
                << ", \"bytes\": " << index.file_length << ", \"run_id\": "
                << (index.identity ? detail::json_quote(index.identity->run_id) : "null")
                << ", \"step\": "
                << (index.identity ? std::to_string(index.identity->step) : "null")
                << ",\n   \"groups\": [";
            for (std::size_t g = 0; g < index.groups.size(); ++g) {
                out << (g == 0 ? "" : ", ") << "{\"name\": "
                    << detail::json_quote(index.groups[g].name)
                    << ", \"tensors\": " << index.groups[g].count << "}";
            }
            out << "],\n   \"entries\": [";
            for (std::size_t k = 0; k < index.entries.size(); ++k) {
                const auto& e = index.entries[k];
                out << (k == 0 ? "" : ",") << "\n    {\"group\": "
                    << detail::json_quote(std::string(index.group_of(k))) << ", \"id\": " << e.id
                    << ", \"name\": " << (e.name.empty() ? "null" : detail::json_quote(e.name))
                    << ", \"dtype\": " << detail::json_quote(to_string(e.original))
                    << ", \"stored_dtype\": " << detail::json_quote(to_string(e.stored))
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
                out << (k == 0 ? "" : ",") << "\n    {\"name\": " << detail::json_quote(s.name)
                    << ", \"offset\": " << s.payload.offset << ", \"bytes\": " << s.payload.length
                    << ", \"checksum\": \"" << hex(s.payload.checksum)
                    << "\", \"checksum_ok\": " << (r.section_ok[k] ? "true" : "false")
                    << ", \"value\": "
                    << (r.section_value[k].empty() ? "null" : detail::json_quote(r.section_value[k]))
                    << "}";
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

// A distributed checkpoint's step directory: its manifest (read_manifest checks that the pieces
// cover each gradient exactly once), a line per gradient unless `verify`, and whether every
// piece is in its rank's file with the checksum the manifest names (the files' own payloads are
// verified with the files). Returns whether all of it holds.
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

// A directory of distributed steps: the step "latest" names.
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

// What a checkpoint manager would make of directory `dir`, from the reports of its files (which
// were loaded completely, like load_newest_valid loads them): the step and run "latest" names
// and the newest checkpoint that loads, of that run while one of it loads, with each one passed
// over and why.
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

// The tensors an export writes: group `chosen`, else "weights" where there is one, else the
// only group, each tensor under its own name; else every group, each tensor named
// "group.name" (its id from that name, so that two groups' tensors of one parameter differ).
result<gradients_params_record> exported_tensors(checkpoint& contents,
                                                 const std::optional<std::string>& chosen)
{
    if (chosen) {
        return contents.take_group(*chosen);
    }
    if (contents.group("weights") != nullptr) {
        return contents.take_group("weights");
    }
    std::vector<const tensor_group*> held;
    for (const tensor_group& g : contents.groups()) {
        if (!g.tensors.entries().empty() || g.name != checkpoint::gradients_group) {
            held.push_back(&g);
        }
    }
    if (held.empty()) {
        return gradients_params_record{};
    }
    if (held.size() == 1) {
        const std::string only = held.front()->name;
        return contents.take_group(only);
    }
    std::vector<gradient_entry> entries;
    for (const tensor_group* g : held) {
        for (const gradient_entry& e : g->tensors.entries()) {
            std::string name = g->name + "." + (e.name.empty() ? to_string(e.id) : e.name);
            entries.push_back({param_id::from_name(name), e.dtype, e.data, std::move(name)});
        }
    }
    return gradients_params_record{std::move(entries)};
}

// Loads `file` completely (every check a load makes) and writes a group of it to `out_path`.
int export_safetensors_of(std::filesystem::path file, const std::optional<std::string>& group,
                          const std::filesystem::path& out_path, std::ostream& out,
                          progress_line& line)
{
    std::error_code ec;
    if (std::filesystem::is_directory(file, ec)) {
        file /= "latest";
    }
    if (file.filename() == "latest") {
        const checkpoint_manager manager{file.parent_path()};
        const auto step = manager.latest_step();
        if (!step || !step.value()) {
            out << file.string() << ": "
                << (step ? "no checkpoint saved yet" : step.error().message()) << "\n";
            return 1;
        }
        file = manager.path_of(*step.value());
    }
    checkpoint_load_options options;
    options.on_progress = [&](const checkpoint_progress& p) {
        line.show(file, p.bytes_done, p.bytes_total);
    };
    auto loaded = load_checkpoint_file(file, options);
    line.clear();
    if (!loaded) {
        out << file.string() << ": " << loaded.error().message() << "\n";
        return 1;
    }
    auto record = exported_tensors(loaded.value(), group);
    if (!record) {
        out << file.string() << ": " << record.error().message() << "\n";
        return 1;
    }
    const auto written = export_safetensors(record.value(), out_path);
    if (!written) {
        out << out_path.string() << ": " << written.error().message() << "\n";
        return 1;
    }
    out << out_path.string() << ": " << record.value().entries().size() << " tensors of "
        << file.string() << ", " << written.value() << " bytes\n";
    return 0;
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
            reports.push_back(inspect(file, json || !verify, verify, line));
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
