// The element type of a tensor's bytes: every Burn `DType` variant in Burn's order, with its
// storage size and float-ness exactly as Burn defines them (quantized sizes included).
#pragma once

#include <ruda/tensor/quant_scheme.hpp>

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>

namespace ruda {

/// How booleans are stored: one byte (`native`, `u8`) or a 4-byte word (`u32`).
enum class bool_store : std::uint8_t { native, u8, u32 };

/// The element type of tensor data. `kind` follows Burn's variant order, which is also the
/// variant index in serialized records.
///
///     ruda::dtype t = ruda::dtype::bf16();
///     assert(t.size() == 2 && t.is_float());
class dtype {
public:
    enum class kind : std::uint8_t {
        f64, f32, flex32, f16, bf16, i64, i32, i16, i8, u64, u32, u16, u8, boolean, qfloat
    };

    static dtype f64() noexcept { return dtype{kind::f64}; }
    static dtype f32() noexcept { return dtype{kind::f32}; }
    static dtype flex32() noexcept { return dtype{kind::flex32}; }
    static dtype f16() noexcept { return dtype{kind::f16}; }
    static dtype bf16() noexcept { return dtype{kind::bf16}; }
    static dtype i64() noexcept { return dtype{kind::i64}; }
    static dtype i32() noexcept { return dtype{kind::i32}; }
    static dtype i16() noexcept { return dtype{kind::i16}; }
    static dtype i8() noexcept { return dtype{kind::i8}; }
    static dtype u64() noexcept { return dtype{kind::u64}; }
    static dtype u32() noexcept { return dtype{kind::u32}; }
    static dtype u16() noexcept { return dtype{kind::u16}; }
    static dtype u8() noexcept { return dtype{kind::u8}; }
    static dtype boolean(bool_store store = bool_store::native) noexcept
    {
        dtype d{kind::boolean};
        d.bool_store_ = store;
        return d;
    }
    static dtype qfloat(const quant_scheme& scheme) noexcept
    {
        dtype d{kind::qfloat};
        d.scheme_ = scheme;
        return d;
    }

    /// The dtype of a non-quantized, non-bool variant (`kind::boolean` gives native bools).
    /// Returns nothing for `kind::qfloat`, which needs a scheme.
    static std::optional<dtype> from_kind(kind k) noexcept;

    [[nodiscard]] kind get_kind() const noexcept { return kind_; }
    /// Bytes of one storage element. For QFloat this is Burn's storage element size, not the
    /// size of one logical value: 4 for `packed_u32`, 1 for 8-bit values and e2m1 stored
    /// natively, 1 for e2m1 packed natively, and 0 ("fractional") otherwise.
    [[nodiscard]] std::size_t size() const noexcept;
    /// F64, F32, Flex32, F16 and BF16. QFloat is not a float dtype.
    [[nodiscard]] bool is_float() const noexcept { return kind_ <= kind::bf16; }
    [[nodiscard]] bool is_quantized() const noexcept { return kind_ == kind::qfloat; }
    [[nodiscard]] bool is_int() const noexcept { return kind_ >= kind::i64 && kind_ <= kind::i8; }
    [[nodiscard]] bool is_uint() const noexcept { return kind_ >= kind::u64 && kind_ <= kind::u8; }
    [[nodiscard]] bool is_bool() const noexcept { return kind_ == kind::boolean; }

    /// The bool storage; meaningful only for `kind::boolean`.
    [[nodiscard]] ruda::bool_store get_bool_store() const noexcept { return bool_store_; }
    /// The scheme of a QFloat dtype, null for any other.
    [[nodiscard]] const quant_scheme* scheme() const noexcept
    {
        return kind_ == kind::qfloat ? &scheme_ : nullptr;
    }

    friend bool operator==(const dtype& a, const dtype& b) noexcept
    {
        if (a.kind_ != b.kind_) {
            return false;
        }
        switch (a.kind_) {
        case kind::boolean: return a.bool_store_ == b.bool_store_;
        case kind::qfloat: return a.scheme_ == b.scheme_;
        default: return true;
        }
    }

private:
    explicit dtype(kind k) noexcept : kind_(k) {}

    kind kind_;
    ruda::bool_store bool_store_ = ruda::bool_store::native;
    quant_scheme scheme_{};
};

/// "f32", "bool(u8)", "qfloat(q8s, param f32, store packed_u32(0), level tensor)".
std::string to_string(const dtype& d);
std::string to_string(dtype::kind k);
/// Writes `to_string(d)`, for logs and test output.
std::ostream& operator<<(std::ostream& os, const dtype& d);

} // namespace ruda
