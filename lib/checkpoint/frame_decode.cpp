// Checked decoding of the checkpoint frame. Decoding never trusts a size: every count is
// compared with the bytes that remain before anything is reserved or read.
#include "frame_fields.hpp"

#include <ruda/checkpoint/checkpoint.hpp>
#include <ruda/checkpoint/detail/frame.hpp>
#include <ruda/checkpoint/detail/utf8.hpp>
#include <ruda/tensor/detail/fresh_pages.hpp>
#include <ruda/version.hpp>

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>

namespace ruda::detail {

using namespace frame_fields;

namespace {

// The group table: names 1 to 255 bytes of UTF-8, unique, whose entry counts add up to
// `entries` (so every entry is in exactly one group, listed group by group).
result<std::vector<checkpoint_group_info>> decode_groups(byte_reader& r, std::uint64_t entries)
{
    const std::uint64_t count = r.u64();
    if (count > r.remaining() / min_group_size) {
        return malformed("checkpoint header claims " + std::to_string(count) + " groups in " +
                         std::to_string(r.remaining()) + " bytes");
    }
    std::vector<checkpoint_group_info> groups;
    groups.reserve(count);
    std::set<std::string, std::less<>> names;
    std::uint64_t first = 0;
    for (std::uint64_t k = 0; k < count; ++k) {
        const std::uint32_t length = r.u32();
        if (length == 0 || length > checkpoint::max_name_length || length > r.remaining()) {
            return malformed("checkpoint group " + std::to_string(k) +
                             " has a name of invalid length " + std::to_string(length));
        }
        const auto name = r.bytes(length);
        checkpoint_group_info g{std::string(name.begin(), name.end()), 0, 0};
        const std::uint64_t members = r.u64();
        if (!valid_utf8(g.name)) {
            return malformed("checkpoint group " + std::to_string(k) +
                             " has a name that is not UTF-8");
        }
        if (!names.insert(g.name).second) {
            return malformed("checkpoint has two groups named " + g.name);
        }
        if (members > entries - first) {
            return malformed("checkpoint groups hold more than its " + std::to_string(entries) +
                             " entries");
        }
        g.first = static_cast<std::size_t>(first);
        g.count = static_cast<std::size_t>(members);
        first += members;
        groups.push_back(std::move(g));
    }
    if (first != entries) {
        return malformed("checkpoint groups hold " + std::to_string(first) + " of its " +
                         std::to_string(entries) + " entries");
    }
    return groups;
}

std::string version_text(const std::array<std::uint16_t, 3>& v)
{
    return std::to_string(v[0]) + "." + std::to_string(v[1]) + "." + std::to_string(v[2]);
}

} // namespace

result<frame> decode_preamble(std::span<const std::uint8_t, preamble_size> bytes,
                              std::uint64_t file_length, std::uint64_t max_header_bytes)
{
    byte_reader r{bytes};
    const auto magic = r.bytes(preamble_magic.size());
    if (!std::equal(magic.begin(), magic.end(), preamble_magic.begin())) {
        return malformed("not a ruda checkpoint (no RUDACKPT magic)");
    }
    frame f;
    f.format_version = r.u32();
    f.flags = r.u32();
    for (std::uint16_t& part : f.producer) {
        part = r.u16();
    }
    const std::uint16_t reserved = r.u16();
    if (f.format_version > checkpoint_format_version) {
        return error{errc::unsupported_version,
                     "checkpoint format version " + std::to_string(f.format_version) +
                         " (written by ruda " + version_text(f.producer) +
                         ") is newer than this ruda " RUDA_VERSION_STRING
                         " reads (format version " +
                         std::to_string(checkpoint_format_version) + "); upgrade ruda"};
    }
    if (f.format_version == 0) {
        return malformed("checkpoint format version 0 does not exist");
    }
    f.header_offset = r.u64();
    f.header_length = r.u64();
    f.header_checksum = r.u64();
    f.file_length = r.u64();
    const std::uint64_t recorded = r.u64();
    if (recorded != checksum(bytes.first(preamble_size - 8))) {
        return error{errc::checksum_mismatch, "checkpoint preamble checksum mismatch"};
    }
    if ((f.flags & ~known_flags) != 0 || reserved != 0) {
        return error{errc::unsupported_version,
                     "checkpoint uses flags " + std::to_string(f.flags) +
                         " that this ruda " RUDA_VERSION_STRING " does not know; upgrade ruda"};
    }
    if (f.file_length != file_length) {
        return malformed("checkpoint is " + std::to_string(file_length) +
                         " bytes but was written with " + std::to_string(f.file_length) +
                         " (truncated or extended)");
    }
    if (f.header_length > max_header_bytes) {
        return malformed("checkpoint header of " + std::to_string(f.header_length) +
                         " bytes exceeds the limit of " + std::to_string(max_header_bytes));
    }
    if (f.header_offset < preamble_size || f.header_offset > file_length ||
        f.header_length > file_length - f.header_offset ||
        file_length - f.header_offset - f.header_length != trailer_size) {
        return malformed("checkpoint header at " + std::to_string(f.header_offset) + " (" +
                         std::to_string(f.header_length) + " bytes) does not end " +
                         std::to_string(trailer_size) + " bytes before the end of the file");
    }
    return f;
}

result<void> check_trailer(std::span<const std::uint8_t, trailer_size> bytes, const frame& f)
{
    byte_reader r{bytes};
    const auto magic = r.bytes(trailer_magic.size());
    if (!std::equal(magic.begin(), magic.end(), trailer_magic.begin())) {
        return malformed("checkpoint has no trailer (incomplete write?)");
    }
    const std::uint64_t header_checksum = r.u64();
    const std::uint64_t file_length = r.u64();
    const std::uint64_t recorded = r.u64();
    if (recorded != checksum(bytes.first(trailer_size - 8))) {
        return error{errc::checksum_mismatch, "checkpoint trailer checksum mismatch"};
    }
    if (header_checksum != f.header_checksum || file_length != f.file_length) {
        return malformed("checkpoint trailer disagrees with its preamble");
    }
    return success();
}

result<checkpoint_index> decode_header(std::span<const std::uint8_t> header, const frame& f)
{
    if (checksum(header) != f.header_checksum) {
        return error{errc::checksum_mismatch, "checkpoint header checksum mismatch"};
    }
    byte_reader r{header};
    const std::uint64_t entries = r.u64();
    const std::uint64_t sections = r.u64();
    checkpoint_index index;
    if ((f.flags & flag_run_identity) != 0) {
        run_identity identity;
        identity.step = r.u64();
        const auto text = [&r](std::string& out) {
            const std::uint32_t length = r.u32();
            if (length > run_identity::max_run_id_length || length > r.remaining()) {
                return false;
            }
            const auto bytes = r.bytes(length);
            out.assign(bytes.begin(), bytes.end());
            return true;
        };
        if (!text(identity.run_id) || !text(identity.parent_run_id)) {
            return malformed("checkpoint run identity has a run id of invalid length");
        }
        if (auto valid = check_identity(identity); !valid) {
            return malformed("checkpoint run identity: " + valid.error().message());
        }
        index.identity = std::move(identity);
    }
    if ((f.flags & flag_tensor_groups) != 0) {
        BOOST_OUTCOME_TRY(index.groups, decode_groups(r, entries));
    } else {
        index.groups.push_back({"gradients", 0, static_cast<std::size_t>(entries)});
    }
    if (entries > r.remaining() / min_entry_size ||
        sections > (r.remaining() - entries * min_entry_size) / min_section_size) {
        return malformed("checkpoint header claims " + std::to_string(entries) + " entries and " +
                         std::to_string(sections) + " sections in " +
                         std::to_string(header.size()) + " bytes");
    }
    index.format_version = f.format_version;
    index.producer = version_text(f.producer);
    index.file_length = f.file_length;
    reserve_prepared(index.entries, entries);
    index.sections.reserve(sections);
    for (std::uint64_t k = 0; k < entries; ++k) {
        checkpoint_entry_info e;
        e.id = param_id{r.u64()};
        const auto original = decode_dtype(r);
        const auto stored = decode_dtype(r);
        if (!original || !stored) {
            return malformed("checkpoint entry " + std::to_string(k) + " (parameter " +
                             to_string(e.id) + ") has an invalid dtype");
        }
        e.original = *original;
        e.stored = *stored;
        const std::uint32_t rank = r.u32();
        const std::uint32_t name_length = r.u32();
        if (rank > checkpoint::max_rank || rank > r.remaining() / 8) {
            return malformed("checkpoint entry " + std::to_string(k) + " (parameter " +
                             to_string(e.id) + ") has an invalid rank " +
                             std::to_string(rank));
        }
        if (name_length != 0 && ((f.flags & flag_entry_names) == 0 ||
                                 name_length > checkpoint::max_parameter_name_length)) {
            return malformed("checkpoint entry " + std::to_string(k) + " (parameter " +
                             to_string(e.id) + ") has a name of invalid length " +
                             std::to_string(name_length));
        }
        e.shape.resize(rank);
        for (std::size_t& d : e.shape) {
            d = r.u64();
        }
        e.payload = decode_payload(r);
        if (name_length > r.remaining()) {
            return malformed("checkpoint header is truncated");
        }
        const auto name = r.bytes(name_length);
        e.name.assign(name.begin(), name.end());
        if (!valid_utf8(e.name)) {
            return malformed("checkpoint entry " + std::to_string(k) + " (parameter " +
                             to_string(e.id) + ") has a name that is not UTF-8");
        }
        index.entries.push_back(std::move(e));
    }
    for (const checkpoint_group_info& g : index.groups) {
        const std::span group{index.entries.data() + g.first, g.count};
        if (auto unique = unique_parameter_names(group); !unique) {
            return malformed(index.groups.size() == 1
                                 ? unique.error().message()
                                 : "group " + g.name + ": " + unique.error().message());
        }
    }
    std::set<std::string, std::less<>> names;
    for (std::uint64_t k = 0; k < sections; ++k) {
        const std::uint32_t length = r.u32();
        if (length == 0 || length > checkpoint::max_name_length || length > r.remaining()) {
            return malformed("checkpoint section " + std::to_string(k) +
                             " has a name of invalid length " + std::to_string(length));
        }
        const auto name = r.bytes(length);
        checkpoint_section_info s{std::string(name.begin(), name.end()), decode_payload(r)};
        if (!valid_utf8(s.name)) {
            return malformed("checkpoint section " + std::to_string(k) +
                             " has a name that is not UTF-8");
        }
        if (!names.insert(s.name).second) {
            return malformed("checkpoint has two sections named " + s.name);
        }
        index.sections.push_back(std::move(s));
    }
    if (r.failed() || r.remaining() != 0) {
        return malformed("checkpoint header is " +
                         std::string(r.failed() ? "truncated" : "too long"));
    }

    // Every payload aligned, between the preamble and the header, and no two overlapping.
    // Payloads are numbered entries first, then sections; a message names one only on failure.
    const auto location = [&](std::size_t k) -> const payload_location& {
        return k < index.entries.size() ? index.entries[k].payload
                                        : index.sections[k - index.entries.size()].payload;
    };
    const auto name = [&](std::size_t k) {
        return k < index.entries.size()
                   ? "parameter " + to_string(index.entries[k].id)
                   : "section " + index.sections[k - index.entries.size()].name;
    };
    const std::size_t count = index.entries.size() + index.sections.size();
    for (std::size_t k = 0; k < count; ++k) {
        const payload_location& p = location(k);
        if (p.offset % payload_alignment != 0 || p.offset < preamble_size ||
            p.offset > f.header_offset || p.length > f.header_offset - p.offset) {
            return malformed("checkpoint payload of " + name(k) + " (offset " +
                             std::to_string(p.offset) + ", " + std::to_string(p.length) +
                             " bytes) lies outside the payload area");
        }
    }
    // Empty payloads first among equal offsets: one may sit where the next payload starts.
    // Files ruda writes are in order already, so the sort is usually skipped.
    std::vector<std::uint32_t> order(count);
    for (std::size_t k = 0; k < count; ++k) {
        order[k] = static_cast<std::uint32_t>(k);
    }
    const auto before = [&](std::uint32_t a, std::uint32_t b) {
        return std::pair{location(a).offset, location(a).length} <
               std::pair{location(b).offset, location(b).length};
    };
    if (!std::is_sorted(order.begin(), order.end(), before)) {
        std::sort(order.begin(), order.end(), before);
    }
    for (std::size_t k = 1; k < count; ++k) {
        const payload_location& previous = location(order[k - 1]);
        if (location(order[k]).offset < previous.offset + previous.length) {
            return malformed("checkpoint payloads of " + name(order[k - 1]) + " and " +
                             name(order[k]) + " overlap");
        }
    }
    return index;
}

} // namespace ruda::detail
