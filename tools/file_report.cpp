#include "file_report.hpp"

#include <ruda/checkpoint/detail/little_endian.hpp>
#include <ruda/checkpoint/detail/utf8.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <span>
#include <string_view>

namespace ruda::tools {
namespace {

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

// `text` in double quotes. Appended piece by piece: GCC 12 at -O3 warns falsely (-Wrestrict,
// its bug 105651) on the same string built with operator+.
std::string quoted(std::string_view text)
{
    std::string out;
    out.reserve(text.size() + 2);
    out += '"';
    out += text;
    out += '"';
    return out;
}

// What a short section holds, for a person: text when its bytes are text, a string as cereal
// writes one (its length, then the text) as that text, anything else in hexadecimal; 8 or 4
// bytes followed by the integer and the float they read as (a step, a loss).
std::string section_value(std::span<const std::uint8_t> bytes)
{
    const std::string_view text{reinterpret_cast<const char*>(bytes.data()), bytes.size()};
    if (!bytes.empty() && printable_text(text)) {
        return quoted(text);
    }
    if (bytes.size() >= 8 && detail::load_le(bytes.first(8)) == bytes.size() - 8 &&
        printable_text(text.substr(8))) {
        return quoted(text.substr(8));
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

} // namespace

report read_report(const std::filesystem::path& file, bool check_payloads, bool verify,
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

} // namespace ruda::tools
