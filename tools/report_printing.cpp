#include "report_printing.hpp"

#include <ruda/checkpoint/detail/json_quote.hpp>

#include <cstdio>

namespace ruda::tools {
namespace {

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

} // namespace

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

} // namespace ruda::tools
