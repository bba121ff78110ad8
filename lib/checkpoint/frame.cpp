// Encoding and checked decoding of the checkpoint frame. Decoding never trusts a size: every
// count is compared with the bytes that remain before anything is reserved or read.
#include <ruda/checkpoint/checkpoint.hpp>
#include <ruda/checkpoint/detail/frame.hpp>
#include <ruda/checkpoint/detail/little_endian.hpp>
#include <ruda/checkpoint/detail/utf8.hpp>
#include <ruda/tensor/detail/fresh_pages.hpp>
#include <ruda/version.hpp>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>

namespace ruda::detail {
namespace {

constexpr std::array<std::uint8_t, 8> preamble_magic{'R', 'U', 'D', 'A', 'C', 'K', 'P', 'T'};
constexpr std::array<std::uint8_t, 8> trailer_magic{'R', 'U', 'D', 'A', 'E', 'N', 'D', '1'};
constexpr std::size_t dtype_size = 24;
// The least an entry (rank 0) and a section (a 1-byte name) take in the header.
constexpr std::size_t min_entry_size = header_entry_size(0);
constexpr std::size_t min_section_size = header_section_size(1);
constexpr std::size_t min_group_size = header_group_size(1);
static_assert(header_entry_size(0) == 8 + 2 * dtype_size + 8 + 3 * 8);

error malformed(const std::string& why) { return error{errc::malformed_record, why}; }

// Little-endian output into a byte vector.
class byte_writer {
public:
    explicit byte_writer(std::vector<std::uint8_t>& out) : out_(out) {}
    void u8(std::uint8_t v) { out_.push_back(v); }
    void u16(std::uint16_t v) { put(v, 2); }
    void u32(std::uint32_t v) { put(v, 4); }
    void u64(std::uint64_t v) { put(v, 8); }
    void bytes(const void* data, std::size_t n)
    {
        const auto* p = static_cast<const std::uint8_t*>(data);
        out_.insert(out_.end(), p, p + n);
    }

private:
    void put(std::uint64_t v, std::size_t n)
    {
        std::array<std::uint8_t, 8> b{};
        store_le(std::span{b}.first(n), v);
        out_.insert(out_.end(), b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n));
    }
    std::vector<std::uint8_t>& out_;
};

// Little-endian input from a span; a read past the end sets `failed` and yields zeros.
class byte_reader {
public:
    explicit byte_reader(std::span<const std::uint8_t> in) : in_(in) {}
    std::uint8_t u8() { return static_cast<std::uint8_t>(get(1)); }
    std::uint16_t u16() { return static_cast<std::uint16_t>(get(2)); }
    std::uint32_t u32() { return static_cast<std::uint32_t>(get(4)); }
    std::uint64_t u64() { return get(8); }
    std::span<const std::uint8_t> bytes(std::size_t n)
    {
        if (n > remaining()) {
            failed_ = true;
            position_ = in_.size();
            return {};
        }
        const auto out = in_.subspan(position_, n);
        position_ += n;
        return out;
    }
    [[nodiscard]] std::size_t remaining() const noexcept { return in_.size() - position_; }
    [[nodiscard]] bool failed() const noexcept { return failed_; }

private:
    std::uint64_t get(std::size_t n)
    {
        return load_le(bytes(n));
    }
    std::span<const std::uint8_t> in_;
    std::size_t position_ = 0;
    bool failed_ = false;
};

// A dtype in 24 bytes: kind, bool store, then for quantized data value, param, store kind,
// level kind, block length, mode, store dim (u64), the five block dims, and zero padding.
void encode_dtype(byte_writer& w, const dtype& d)
{
    std::array<std::uint8_t, dtype_size> b{};
    b[0] = static_cast<std::uint8_t>(d.get_kind());
    if (d.is_bool()) {
        b[1] = static_cast<std::uint8_t>(d.get_bool_store());
    }
    if (const quant_scheme* s = d.scheme()) {
        b[2] = static_cast<std::uint8_t>(s->value);
        b[3] = static_cast<std::uint8_t>(s->param);
        b[4] = static_cast<std::uint8_t>(s->store.get_kind());
        b[5] = static_cast<std::uint8_t>(s->level.get_kind());
        b[6] = s->level.blocks().len();
        b[7] = static_cast<std::uint8_t>(s->mode);
        store_le(std::span{b}.subspan(8, 8), s->store.dim());
        std::copy(s->level.blocks().storage().begin(), s->level.blocks().storage().end(),
                  b.begin() + 16);
    }
    w.bytes(b.data(), b.size());
}

std::optional<dtype> decode_dtype(byte_reader& r)
{
    const auto b = r.bytes(dtype_size);
    if (b.size() != dtype_size || b[0] > static_cast<std::uint8_t>(dtype::kind::qfloat) ||
        std::any_of(b.begin() + 21, b.end(), [](std::uint8_t x) { return x != 0; })) {
        return std::nullopt;
    }
    const auto kind = static_cast<dtype::kind>(b[0]);
    const bool rest_zero =
        std::all_of(b.begin() + 2, b.end(), [](std::uint8_t x) { return x == 0; });
    if (kind == dtype::kind::boolean) {
        if (b[1] > static_cast<std::uint8_t>(bool_store::u32) || !rest_zero) {
            return std::nullopt;
        }
        return dtype::boolean(static_cast<bool_store>(b[1]));
    }
    if (kind != dtype::kind::qfloat) {
        return b[1] == 0 && rest_zero ? dtype::from_kind(kind) : std::nullopt;
    }
    if (b[1] != 0 || b[2] > static_cast<std::uint8_t>(quant_value::q2s) ||
        b[3] > static_cast<std::uint8_t>(quant_param::ue4m3) ||
        b[4] > static_cast<std::uint8_t>(quant_store::kind::packed_u32) ||
        b[5] > static_cast<std::uint8_t>(quant_level::kind::block) ||
        b[7] != static_cast<std::uint8_t>(quant_mode::symmetric)) {
        return std::nullopt;
    }
    const std::uint64_t dim = load_le(std::span{b}.subspan(8, 8));
    quant_scheme s;
    s.value = static_cast<quant_value>(b[2]);
    s.param = static_cast<quant_param>(b[3]);
    switch (static_cast<quant_store::kind>(b[4])) {
    case quant_store::kind::native:
        if (dim != 0) {
            return std::nullopt;
        }
        s.store = quant_store::native();
        break;
    case quant_store::kind::packed_native: s.store = quant_store::packed_native(dim); break;
    case quant_store::kind::packed_u32: s.store = quant_store::packed_u32(dim); break;
    }
    std::array<std::uint8_t, block_size::max_dims> storage{};
    std::copy(b.begin() + 16, b.begin() + 21, storage.begin());
    const auto blocks = block_size::from_parts(storage, b[6]);
    if (static_cast<quant_level::kind>(b[5]) == quant_level::kind::tensor) {
        if (!(blocks == block_size{})) {
            return std::nullopt;
        }
        s.level = quant_level::tensor();
    } else {
        s.level = quant_level::block(blocks); // a length past 5 is left for restore to reject
    }
    s.mode = quant_mode::symmetric;
    return dtype::qfloat(s);
}

void encode_payload(byte_writer& w, const payload_location& p)
{
    w.u64(p.offset);
    w.u64(p.length);
    w.u64(p.checksum);
}

payload_location decode_payload(byte_reader& r)
{
    payload_location p;
    p.offset = r.u64();
    p.length = r.u64();
    p.checksum = r.u64();
    return p;
}

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

std::uint64_t checksum(std::span<const std::uint8_t> bytes) noexcept
{
    return XXH3_64bits(bytes.data(), bytes.size());
}

namespace {
static_assert(sizeof(XXH3_state_t) <= 640 && alignof(XXH3_state_t) <= 64);
XXH3_state_t* as_state(std::byte* storage) { return reinterpret_cast<XXH3_state_t*>(storage); }
} // namespace

running_checksum::running_checksum() noexcept
{
    XXH3_INITSTATE(as_state(state_));
    XXH3_64bits_reset(as_state(state_));
}

void running_checksum::update(std::span<const std::uint8_t> bytes) noexcept
{
    XXH3_64bits_update(as_state(state_), bytes.data(), bytes.size());
}

std::uint64_t running_checksum::digest() const noexcept
{
    return XXH3_64bits_digest(as_state(const_cast<std::byte*>(state_)));
}

// The fields written so far, followed by their own checksum, as a fixed-size block.
template <std::size_t N>
std::array<std::uint8_t, N> sealed(std::vector<std::uint8_t>& out)
{
    byte_writer{out}.u64(checksum(out));
    std::array<std::uint8_t, N> bytes{};
    std::copy(out.begin(), out.end(), bytes.begin());
    return bytes;
}

std::array<std::uint8_t, preamble_size> encode_preamble(const frame& f)
{
    std::vector<std::uint8_t> out;
    byte_writer w{out};
    w.bytes(preamble_magic.data(), preamble_magic.size());
    w.u32(f.format_version);
    w.u32(f.flags);
    for (const std::uint16_t part : f.producer) {
        w.u16(part);
    }
    w.u16(0);
    w.u64(f.header_offset);
    w.u64(f.header_length);
    w.u64(f.header_checksum);
    w.u64(f.file_length);
    return sealed<preamble_size>(out);
}

std::array<std::uint8_t, trailer_size> encode_trailer(const frame& f)
{
    std::vector<std::uint8_t> out;
    byte_writer w{out};
    w.bytes(trailer_magic.data(), trailer_magic.size());
    w.u64(f.header_checksum);
    w.u64(f.file_length);
    return sealed<trailer_size>(out);
}

header_encoder::header_encoder(std::uint64_t entries, std::uint64_t sections, sink_type sink)
    : sink_(std::move(sink))
{
    buffer_.reserve(flush_size + 1024);
    byte_writer w{buffer_};
    w.u64(entries);
    w.u64(sections);
}

result<void> header_encoder::entry(param_id id, const dtype& original, const dtype& stored,
                                   std::span<const std::size_t> shape,
                                   const payload_location& payload, std::string_view name)
{
    byte_writer w{buffer_};
    w.u64(id.val());
    encode_dtype(w, original);
    encode_dtype(w, stored);
    w.u32(static_cast<std::uint32_t>(shape.size()));
    w.u32(static_cast<std::uint32_t>(name.size()));
    for (const std::size_t d : shape) {
        w.u64(d);
    }
    encode_payload(w, payload);
    w.bytes(name.data(), name.size());
    return flush_if_full();
}

result<void> header_encoder::identity(const run_identity& identity)
{
    byte_writer w{buffer_};
    w.u64(identity.step);
    w.u32(static_cast<std::uint32_t>(identity.run_id.size()));
    w.bytes(identity.run_id.data(), identity.run_id.size());
    w.u32(static_cast<std::uint32_t>(identity.parent_run_id.size()));
    w.bytes(identity.parent_run_id.data(), identity.parent_run_id.size());
    return flush_if_full();
}

result<void> header_encoder::groups(std::uint64_t count)
{
    byte_writer{buffer_}.u64(count);
    return flush_if_full();
}

result<void> header_encoder::group(std::string_view name, std::uint64_t entries)
{
    byte_writer w{buffer_};
    w.u32(static_cast<std::uint32_t>(name.size()));
    w.bytes(name.data(), name.size());
    w.u64(entries);
    return flush_if_full();
}

result<void> header_encoder::section(std::string_view name, const payload_location& payload)
{
    byte_writer w{buffer_};
    w.u32(static_cast<std::uint32_t>(name.size()));
    w.bytes(name.data(), name.size());
    encode_payload(w, payload);
    return flush_if_full();
}

result<void> header_encoder::finish()
{
    if (!buffer_.empty()) {
        BOOST_OUTCOME_TRY(sink_(buffer_));
        size_ += buffer_.size();
        buffer_.clear();
    }
    return success();
}

result<void> header_encoder::flush_if_full()
{
    return buffer_.size() >= flush_size ? finish() : success();
}

namespace {
bool has_groups(const checkpoint_index& index)
{
    return index.groups.size() > 1 ||
           (index.groups.size() == 1 && index.groups.front().name != "gradients");
}
} // namespace

std::uint32_t flags_of(const checkpoint_index& index)
{
    std::uint32_t flags = 0;
    if (std::any_of(index.entries.begin(), index.entries.end(),
                    [](const checkpoint_entry_info& e) { return !e.name.empty(); })) {
        flags |= flag_entry_names;
    }
    if (has_groups(index)) {
        flags |= flag_tensor_groups;
    }
    if (index.identity) {
        flags |= flag_run_identity;
    }
    return flags;
}

std::vector<std::uint8_t> encode_header(const checkpoint_index& index)
{
    std::vector<std::uint8_t> out;
    header_encoder encoder{index.entries.size(), index.sections.size(),
                           [&out](std::span<const std::uint8_t> piece) -> result<void> {
                               out.insert(out.end(), piece.begin(), piece.end());
                               return success();
                           }};
    if (index.identity) {
        static_cast<void>(encoder.identity(*index.identity));
    }
    if (has_groups(index)) {
        static_cast<void>(encoder.groups(index.groups.size()));
        for (const checkpoint_group_info& g : index.groups) {
            static_cast<void>(encoder.group(g.name, g.count));
        }
    }
    for (const checkpoint_entry_info& e : index.entries) {
        static_cast<void>(encoder.entry(e.id, e.original, e.stored, e.shape, e.payload, e.name));
    }
    for (const checkpoint_section_info& s : index.sections) {
        static_cast<void>(encoder.section(s.name, s.payload));
    }
    static_cast<void>(encoder.finish());
    return out;
}

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
