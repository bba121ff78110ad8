// The byte layout of a checkpoint file (docs/FORMAT.md): encoding the preamble, header and
// trailer, and decoding them with every size, offset and checksum checked before use.
#pragma once

#include <ruda/checkpoint/checkpoint_index.hpp>
#include <ruda/error.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

namespace ruda::detail {

inline constexpr std::size_t preamble_size = 64;
inline constexpr std::size_t trailer_size = 32;
inline constexpr std::size_t payload_alignment = 64;

/// Preamble flag: entries carry their parameter's name (the word after the rank is its length,
/// the name follows the payload location). Set only when some entry has a name, so a file
/// without names reads in every ruda that reads format version 1.
inline constexpr std::uint32_t flag_entry_names = 1;
/// Preamble flag: the entries come in named groups (a group table follows the counts, and the
/// entries are listed group by group). Set only when a checkpoint holds a group other than
/// "gradients", so a checkpoint of gradients alone is written as before groups existed.
inline constexpr std::uint32_t flag_tensor_groups = 2;
/// Preamble flag: the header records the run id and step that wrote the file, right after the
/// counts.
inline constexpr std::uint32_t flag_run_identity = 4;
/// Every flag this ruda reads.
inline constexpr std::uint32_t known_flags =
    flag_entry_names | flag_tensor_groups | flag_run_identity;

/// What the header takes: its two counts, then per entry its id, two dtypes, rank and name
/// length, dimensions, payload location and name, per section its name's length, the name and
/// its payload location.
inline constexpr std::uint64_t header_counts_size = 16;
[[nodiscard]] constexpr std::uint64_t header_entry_size(std::uint64_t rank,
                                                        std::uint64_t name_length = 0) noexcept
{
    return 8 + 2 * 24 + 8 + 8 * rank + 24 + name_length;
}
[[nodiscard]] constexpr std::uint64_t header_section_size(std::uint64_t name_length) noexcept
{
    return 4 + name_length + 24;
}
/// The run identity: the step, the run id's length and the run id, the parent run id's length
/// (0 for none) and the parent run id.
[[nodiscard]] constexpr std::uint64_t header_identity_size(std::uint64_t run_id_length,
                                                           std::uint64_t parent_length) noexcept
{
    return 8 + 4 + run_id_length + 4 + parent_length;
}
/// The group table's count, then per group its name's length, the name and its entry count.
inline constexpr std::uint64_t header_group_count_size = 8;
[[nodiscard]] constexpr std::uint64_t header_group_size(std::uint64_t name_length) noexcept
{
    return 4 + name_length + 8;
}

/// What the preamble records.
struct frame {
    std::uint32_t format_version = checkpoint_format_version;
    std::uint32_t flags = 0;
    std::array<std::uint16_t, 3> producer{};
    std::uint64_t header_offset = 0;
    std::uint64_t header_length = 0;
    std::uint64_t header_checksum = 0;
    std::uint64_t file_length = 0;
};

/// XXH3-64 of `bytes`.
[[nodiscard]] std::uint64_t checksum(std::span<const std::uint8_t> bytes) noexcept;

/// XXH3-64 over bytes given piece by piece: the same value as `checksum` of them all.
class running_checksum {
public:
    running_checksum() noexcept;
    void update(std::span<const std::uint8_t> bytes) noexcept;
    [[nodiscard]] std::uint64_t digest() const noexcept;

private:
    alignas(64) std::byte state_[640]; // an XXH3_state_t; frame.cpp checks that it fits
};

/// `offset` rounded up to the payload alignment.
[[nodiscard]] constexpr std::uint64_t align_up(std::uint64_t offset) noexcept
{
    return (offset + payload_alignment - 1) / payload_alignment * payload_alignment;
}

[[nodiscard]] std::array<std::uint8_t, preamble_size> encode_preamble(const frame& f);
[[nodiscard]] std::array<std::uint8_t, trailer_size> encode_trailer(const frame& f);
/// Encodes the header (entry table, then sections) in pieces of about 64 KiB handed to a sink
/// as they fill, so a save streams a header of any size through a small buffer.
class header_encoder {
public:
    using sink_type = std::function<result<void>(std::span<const std::uint8_t>)>;
    /// The header of `entries` entries and `sections` sections, in that order. A file with
    /// `flag_run_identity` has `identity` next, one with `flag_tensor_groups` then `groups`
    /// and each `group` in turn, before the entries.
    header_encoder(std::uint64_t entries, std::uint64_t sections, sink_type sink);
    [[nodiscard]] result<void> identity(const run_identity& identity);
    [[nodiscard]] result<void> groups(std::uint64_t count);
    [[nodiscard]] result<void> group(std::string_view name, std::uint64_t entries);
    /// An entry; `name` is empty for one without a name (the only kind a file without
    /// `flag_entry_names` may hold).
    [[nodiscard]] result<void> entry(param_id id, const dtype& original, const dtype& stored,
                                     std::span<const std::size_t> shape,
                                     const payload_location& payload, std::string_view name);
    [[nodiscard]] result<void> section(std::string_view name, const payload_location& payload);
    /// Hands over the last piece.
    [[nodiscard]] result<void> finish();
    /// Bytes handed to the sink so far.
    [[nodiscard]] std::uint64_t size() const noexcept { return size_; }

private:
    static constexpr std::size_t flush_size = std::size_t{64} << 10U;
    result<void> flush_if_full();

    sink_type sink_;
    std::vector<std::uint8_t> buffer_;
    std::uint64_t size_ = 0;
};

/// The entry table and sections of `index` (its payload locations filled in), in memory, with
/// its identity when it has one and its groups when there are several or one not named
/// "gradients"; `flags_of(index)` are the flags such a header needs.
[[nodiscard]] std::vector<std::uint8_t> encode_header(const checkpoint_index& index);
[[nodiscard]] std::uint32_t flags_of(const checkpoint_index& index);

/// Checks the preamble of a file of `file_length` bytes: magic, format version (a newer one is
/// `unsupported_version`), flags, its checksum, the recorded length, and a header that lies
/// inside the file, right before the trailer, within `max_header_bytes`.
[[nodiscard]] result<frame> decode_preamble(std::span<const std::uint8_t, preamble_size> bytes,
                                            std::uint64_t file_length,
                                            std::uint64_t max_header_bytes);
/// Checks that the trailer is intact and agrees with the preamble.
[[nodiscard]] result<void> check_trailer(std::span<const std::uint8_t, trailer_size> bytes,
                                         const frame& f);
/// Checks the header's checksum and decodes it. Every count is checked against the bytes
/// left before anything is reserved; every payload must be aligned, lie between the preamble
/// and the header, and overlap no other; section names must be unique and 1 to 255 bytes.
[[nodiscard]] result<checkpoint_index> decode_header(std::span<const std::uint8_t> header,
                                                     const frame& f);

} // namespace ruda::detail
