// Host-owned tensor bytes with their shape and dtype (Burn's `TensorData`): unchecked and typed
// construction, checked element counts, typed views and dtype conversion with Burn's rules.
// The bytes are a `ruda::storage`, so copies of a tensor_data share them.
#pragma once

#include <ruda/error.hpp>
#include <ruda/tensor/dtype.hpp>
#include <ruda/tensor/half.hpp>
#include <ruda/tensor/storage.hpp>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iosfwd>
#include <span>
#include <type_traits>
#include <string>
#include <vector>

static_assert(std::endian::native == std::endian::little,
              "ruda stores tensor bytes little-endian and supports little-endian hosts only");

namespace ruda {

/// Dimensions of a tensor, outermost first. Rank 0 (empty) holds one element.
using shape = std::vector<std::size_t>;

/// "[2, 3]"; "[]" for rank 0. Every ruda message shows a shape this way.
[[nodiscard]] std::string to_string(const shape& dims);

/// The dtype kind that stores elements of type `T`, for the typed calls below.
template <class T>
struct element_kind;
template <dtype::kind K>
using kind_constant = std::integral_constant<dtype::kind, K>;
template <> struct element_kind<double> : kind_constant<dtype::kind::f64> {};
template <> struct element_kind<float> : kind_constant<dtype::kind::f32> {};
template <> struct element_kind<float16> : kind_constant<dtype::kind::f16> {};
template <> struct element_kind<bfloat16> : kind_constant<dtype::kind::bf16> {};
template <> struct element_kind<std::int64_t> : kind_constant<dtype::kind::i64> {};
template <> struct element_kind<std::int32_t> : kind_constant<dtype::kind::i32> {};
template <> struct element_kind<std::int16_t> : kind_constant<dtype::kind::i16> {};
template <> struct element_kind<std::int8_t> : kind_constant<dtype::kind::i8> {};
template <> struct element_kind<std::uint64_t> : kind_constant<dtype::kind::u64> {};
template <> struct element_kind<std::uint32_t> : kind_constant<dtype::kind::u32> {};
template <> struct element_kind<std::uint16_t> : kind_constant<dtype::kind::u16> {};
template <> struct element_kind<std::uint8_t> : kind_constant<dtype::kind::u8> {};

/// Whether `tensor_data` has typed calls for `T`.
template <class T>
concept element = requires { element_kind<T>::value; };

/// The product of `dims`, or `errc::shape_overflow` when it does not fit in `std::size_t`.
result<std::size_t> checked_num_elements(std::span<const std::size_t> dims);

/// The bytes of a tensor, its shape and its dtype. Bytes are little-endian elements laid out
/// row-major; for QFloat they are the packed values followed by the scales.
///
///     auto t = ruda::tensor_data::from_values(std::vector<float>{1, 2, 3, 4}, {2, 2}).value();
///     auto h = t.convert(ruda::dtype::bf16()).value();   // 8 bytes of bf16
class tensor_data {
public:
    /// Unchecked, like Burn's `from_bytes`: any combination can be built, so a validator can be
    /// tested on malformed data. The bytes may be a `std::vector<std::uint8_t>` (adopted, not
    /// copied) or any `ruda::storage` (shared).
    tensor_data(ruda::storage bytes, ruda::shape dims, ruda::dtype type)
        : bytes_(std::move(bytes)), shape_(std::move(dims)), dtype_(type)
    {
    }

    /// Typed construction. Fails with `byte_count_mismatch` when the number of values is not
    /// the product of `dims`, and `shape_overflow` when that product overflows.
    template <element T>
    static result<tensor_data> from_values(const std::vector<T>& values, ruda::shape dims)
    {
        return from_elements(values.data(), values.size(), sizeof(T),
                             *ruda::dtype::from_kind(element_kind<T>::value), std::move(dims));
    }

    /// The bytes, shared with every copy of this tensor_data; read-only.
    [[nodiscard]] const ruda::storage& bytes() const& noexcept { return bytes_; }
    /// Moves the storage out.
    [[nodiscard]] ruda::storage into_storage() && noexcept { return std::move(bytes_); }
    /// A copy of the bytes in a vector.
    [[nodiscard]] std::vector<std::uint8_t> into_bytes() && { return bytes_.to_vector(); }
    /// The same shape and dtype over other bytes; unchecked, like the constructor.
    [[nodiscard]] tensor_data with_bytes(ruda::storage bytes) && noexcept
    {
        return tensor_data{std::move(bytes), std::move(shape_), dtype_};
    }
    [[nodiscard]] const ruda::shape& shape() const noexcept { return shape_; }
    [[nodiscard]] ruda::dtype dtype() const noexcept { return dtype_; }
    [[nodiscard]] std::size_t rank() const noexcept { return shape_.size(); }

    /// The product of the shape (1 at rank 0). Wraps on overflow exactly like Burn's; use
    /// `checked_num_elements()` on untrusted data.
    [[nodiscard]] std::size_t num_elements() const noexcept;
    /// The product of the shape, or `errc::shape_overflow`.
    [[nodiscard]] result<std::size_t> checked_num_elements() const;

    /// Converts the elements to `target` with Burn's rules:
    /// - the same dtype returns the data unchanged, unvalidated (QFloat included);
    /// - otherwise floats round to nearest even, overflow to infinity and keep NaN payloads with
    ///   the quiet bit forced; narrowing from f64 to f16/bf16 rounds through f32; ints convert
    ///   exactly; bool targets store non-zero as 1; a Flex32 target yields F32 data.
    /// Fails with `invalid_dtype` where Burn panics: QFloat on either side, a float or int value
    /// out of the target int's range (or NaN), and bytes whose length is not the shape's element
    /// count times the source element size; with `shape_overflow` when the shape overflows.
    [[nodiscard]] result<tensor_data> convert(ruda::dtype target) const&;
    [[nodiscard]] result<tensor_data> convert(ruda::dtype target) &&;

    /// The elements as `T`. Fails with `invalid_dtype` unless the dtype stores `T` (`float`
    /// also reads Flex32), and with `byte_count_mismatch` unless the bytes hold exactly the
    /// shape's element count.
    template <element T>
    [[nodiscard]] result<std::span<const T>> values() const
    {
        BOOST_OUTCOME_TRY(auto count,
                          checked_values(element_kind<T>::value, sizeof(T), alignof(T)));
        return std::span<const T>(reinterpret_cast<const T*>(bytes_.data()), count);
    }

    friend bool operator==(const tensor_data&, const tensor_data&) = default;

private:
    static result<tensor_data> from_elements(const void* data, std::size_t count,
                                             std::size_t element_size, ruda::dtype type,
                                             ruda::shape dims);
    [[nodiscard]] result<std::size_t> checked_values(dtype::kind kind, std::size_t size,
                                                     std::size_t align) const;

    ruda::storage bytes_;
    ruda::shape shape_;
    ruda::dtype dtype_;
};

/// Writes "tensor_data(f32, [2, 3], 24 bytes)", for logs and test output.
std::ostream& operator<<(std::ostream& os, const tensor_data& t);

} // namespace ruda
