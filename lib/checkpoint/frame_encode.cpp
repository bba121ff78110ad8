// Encoding the checkpoint frame: the preamble and the trailer, each sealed by its own checksum,
// and the header, streamed to its writer in pieces as the entries come.
#include "frame_fields.hpp"

#include <ruda/checkpoint/checkpoint.hpp>
#include <ruda/checkpoint/detail/frame.hpp>
#include <ruda/version.hpp>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <string>
#include <utility>

namespace ruda::detail {

using namespace frame_fields;

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

} // namespace ruda::detail
