// Quantization schemes of quantized (QFloat) tensors, with Burn's exact layout rules: value
// types, scale types, how values are stored and packed, and per-tensor or per-block scales.
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

namespace ruda {

/// The type of one quantized value, in Burn's declaration (and serialization) order.
enum class quant_value : std::uint8_t { q8f, e5m2, e4m3, q4f, e2m1, q2f, q8s, q4s, q2s };

/// The type of a scale, in Burn's order.
enum class quant_param : std::uint8_t { f32, f16, bf16, ue8m0, ue4m3 };

/// Burn has a single quantization mode.
enum class quant_mode : std::uint8_t { symmetric };

/// Bits of one value: 8, 4 or 2.
std::size_t size_bits(quant_value v) noexcept;
/// Values stored per byte by native packing: 2 for e2m1, 1 otherwise.
std::size_t native_packing(quant_value v) noexcept;
/// Bytes of one scale: 4 / 2 / 2 / 1 / 1.
std::size_t size_bytes(quant_param p) noexcept;

/// How values are laid out. The packing dimension counts from the innermost axis: 0 is the last
/// axis, so values pack along axis `rank - dim - 1`.
class quant_store {
public:
    enum class kind : std::uint8_t { native, packed_native, packed_u32 };

    /// One storage byte per logical value.
    static constexpr quant_store native() noexcept { return {kind::native, 0}; }
    /// Several values per byte (e2m1 only) along `dim`.
    static constexpr quant_store packed_native(std::size_t dim) noexcept
    {
        return {kind::packed_native, dim};
    }
    /// Values packed into little-endian u32 words along `dim`.
    static constexpr quant_store packed_u32(std::size_t dim) noexcept
    {
        return {kind::packed_u32, dim};
    }

    [[nodiscard]] constexpr kind get_kind() const noexcept { return kind_; }
    /// The packing dimension; 0 for `native`. Kept in 32 bits, so that a dtype stays small:
    /// a dimension past 2^32 - 1 (no tensor has that many) reads back as 2^32 - 1, which every
    /// rank check still refuses.
    [[nodiscard]] constexpr std::size_t dim() const noexcept { return dim_; }
    /// Bits of one storage element holding values of type `v`.
    [[nodiscard]] std::size_t size_bits(quant_value v) const noexcept;

    friend constexpr auto operator<=>(const quant_store&, const quant_store&) = default;

private:
    constexpr quant_store(kind k, std::size_t dim) noexcept
        : kind_(k), dim_(dim > UINT32_MAX ? UINT32_MAX : static_cast<std::uint32_t>(dim))
    {
    }
    kind kind_;
    std::uint32_t dim_;
};

/// Block dimensions of block-level quantization: up to `max_dims` entries, stored as bytes.
class block_size {
public:
    static constexpr std::size_t max_dims = 5;

    /// No block dims (`len` 0).
    block_size() = default;

    /// Copies up to `max_dims` values (like Burn's `BlockSize::new`); zeros are kept, since Burn
    /// accepts them and restore rejects them.
    block_size(std::initializer_list<std::uint8_t> dims) noexcept;
    explicit block_size(std::span<const std::uint8_t> dims) noexcept;
    /// The raw fields as stored (for decoding). A `len` above `max_dims` is kept so that a
    /// validator can reject it; see `valid()`.
    static block_size from_parts(std::array<std::uint8_t, max_dims> storage,
                                 std::uint8_t len) noexcept;

    /// False when `len` exceeds `max_dims`, which only a corrupt record produces.
    [[nodiscard]] bool valid() const noexcept { return len_ <= max_dims; }
    [[nodiscard]] std::uint8_t len() const noexcept { return len_; }
    [[nodiscard]] const std::array<std::uint8_t, max_dims>& storage() const noexcept
    {
        return storage_;
    }
    /// The first `len` entries (at most `max_dims`).
    [[nodiscard]] std::span<const std::uint8_t> as_slice() const noexcept;

    /// Block dims for a tensor of `rank`, right-aligned: the first `min(rank, len)` stored
    /// entries go into the last positions and the leading ones are 1, so `[2,4,8]` at rank 2
    /// gives `[2,4]` and `[4]` at rank 3 gives `[1,1,4]`.
    [[nodiscard]] std::vector<std::size_t> to_dim_vec(std::size_t rank) const;

    friend auto operator<=>(const block_size&, const block_size&) = default;

private:
    std::array<std::uint8_t, max_dims> storage_{1, 1, 1, 1, 1};
    std::uint8_t len_ = 0;
};

/// Whether one scale covers the whole tensor or one block.
class quant_level {
public:
    enum class kind : std::uint8_t { tensor, block };

    static quant_level tensor() noexcept { return quant_level{kind::tensor, block_size{}}; }
    static quant_level block(block_size size) noexcept { return quant_level{kind::block, size}; }

    [[nodiscard]] kind get_kind() const noexcept { return kind_; }
    /// The block dims; empty for `tensor`.
    [[nodiscard]] const block_size& blocks() const noexcept { return blocks_; }

    friend auto operator<=>(const quant_level&, const quant_level&) = default;

private:
    quant_level(kind k, block_size size) noexcept : kind_(k), blocks_(size) {}
    kind kind_;
    block_size blocks_;
};

/// A quantization scheme `{value, param, store, level, mode}`; the default is Burn's:
/// q8f values, f32 scales, packed into u32 along the last axis, one scale per tensor.
struct quant_scheme {
    quant_value value = quant_value::q8f;
    quant_param param = quant_param::f32;
    quant_store store = quant_store::packed_u32(0);
    quant_level level = quant_level::tensor();
    quant_mode mode = quant_mode::symmetric;

    /// Values per storage element: `store.size_bits(value) / size_bits(value)`.
    [[nodiscard]] std::size_t num_quants() const noexcept;

    friend auto operator<=>(const quant_scheme&, const quant_scheme&) = default;
};

std::string to_string(quant_value v);
std::string to_string(quant_param p);
std::string to_string(const quant_store& s);
std::string to_string(const quant_level& l);
std::string to_string(const quant_scheme& s);

} // namespace ruda
