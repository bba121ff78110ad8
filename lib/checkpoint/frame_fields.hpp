// The fields of the checkpoint frame, written and read the same way by its encoder and its
// checked decoder: the magics, little-endian integers, a dtype in 24 bytes and a payload's
// place. A read past the end never reads: it marks the reader failed and yields zeros.
// Internal to the frame.
#pragma once

#include <ruda/checkpoint/detail/frame.hpp>
#include <ruda/checkpoint/detail/little_endian.hpp>

#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace ruda::detail::frame_fields {

inline constexpr std::array<std::uint8_t, 8> preamble_magic{'R', 'U', 'D', 'A', 'C', 'K', 'P', 'T'};
inline constexpr std::array<std::uint8_t, 8> trailer_magic{'R', 'U', 'D', 'A', 'E', 'N', 'D', '1'};
inline constexpr std::size_t dtype_size = 24;
// The least an entry (rank 0) and a section (a 1-byte name) take in the header.
inline constexpr std::size_t min_entry_size = header_entry_size(0);
inline constexpr std::size_t min_section_size = header_section_size(1);
inline constexpr std::size_t min_group_size = header_group_size(1);
static_assert(header_entry_size(0) == 8 + 2 * dtype_size + 8 + 3 * 8);

inline error malformed(const std::string& why) { return error{errc::malformed_record, why}; }

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
inline void encode_dtype(byte_writer& w, const dtype& d)
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

inline std::optional<dtype> decode_dtype(byte_reader& r)
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

inline void encode_payload(byte_writer& w, const payload_location& p)
{
    w.u64(p.offset);
    w.u64(p.length);
    w.u64(p.checksum);
}

inline payload_location decode_payload(byte_reader& r)
{
    payload_location p;
    p.offset = r.u64();
    p.length = r.u64();
    p.checksum = r.u64();
    return p;
}

} // namespace ruda::detail::frame_fields
