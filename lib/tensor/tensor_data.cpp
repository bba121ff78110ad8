// tensor_data: checked element counts, typed construction and views, and Burn's dtype
// conversion rules (burn-backend `TensorData::convert_dtype` and `element/cast.rs`).
#include <ruda/tensor/tensor_data.hpp>

#include <charconv>
#include <cmath>
#include <limits>
#include <new>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>

namespace ruda {
namespace {

// Storage of bool elements: one byte or one 4-byte word, non-zero meaning true.
struct bool8 {
    std::uint8_t v;
};
struct bool32 {
    std::uint32_t v;
};

template <class T>
constexpr bool is_half_v = std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>;
template <class T>
constexpr bool is_float_v = std::is_floating_point_v<T> || is_half_v<T>;
template <class T>
constexpr bool is_bool_v = std::is_same_v<T, bool8> || std::is_same_v<T, bool32>;

template <class T>
double widen(T v) noexcept
{
    if constexpr (is_half_v<T>) {
        return to_f32(v);
    } else {
        return static_cast<double>(v);
    }
}

// Float targets from a float value held exactly in a double (every f16/bf16/f32 value is):
// narrowing to the half types goes through f32, as Burn does.
template <class D>
D narrow(double d) noexcept
{
    if constexpr (std::is_same_v<D, float16>) {
        return f16_from_f64(d);
    } else if constexpr (std::is_same_v<D, bfloat16>) {
        return bf16_from_f64(d);
    } else {
        return static_cast<D>(d);
    }
}

template <class S>
std::string value_text(S s)
{
    char buf[64];
    std::to_chars_result r{};
    if constexpr (is_float_v<S>) {
        r = std::to_chars(buf, buf + sizeof buf, widen(s));
    } else if constexpr (is_bool_v<S>) {
        r = std::to_chars(buf, buf + sizeof buf, s.v);
    } else {
        r = std::to_chars(buf, buf + sizeof buf, s);
    }
    return std::string(buf, r.ptr);
}

// One element of S as D, or false where Burn panics (NaN, infinite or out-of-range values
// into an int type).
template <class S, class D>
bool cast(S s, D& d) noexcept
{
    if constexpr (is_bool_v<D>) {
        bool truth = false;
        if constexpr (is_float_v<S>) {
            truth = widen(s) != 0.0; // NaN is non-zero
        } else if constexpr (is_bool_v<S>) {
            truth = s.v != 0;
        } else {
            truth = s != 0;
        }
        d.v = truth ? 1 : 0;
        return true;
    } else if constexpr (is_bool_v<S>) {
        return cast(static_cast<std::uint8_t>(s.v != 0 ? 1 : 0), d);
    } else if constexpr (is_float_v<D>) {
        if constexpr (is_float_v<S>) {
            d = narrow<D>(widen(s));
        } else if constexpr (is_half_v<D>) {
            d = narrow<D>(static_cast<float>(s)); // int -> f32 -> half
        } else {
            d = static_cast<D>(s);
        }
        return true;
    } else if constexpr (is_float_v<S>) {
        const double t = std::trunc(widen(s));
        // Both bounds are powers of two, exact in a double: [min, max + 1).
        constexpr double lo = static_cast<double>(std::numeric_limits<D>::min());
        constexpr double hi =
            std::numeric_limits<D>::is_signed
                ? -static_cast<double>(std::numeric_limits<D>::min())
                : 2.0 * (static_cast<double>(std::numeric_limits<D>::max() / 2) + 1.0);
        if (!(t >= lo && t < hi)) { // false for NaN
            return false;
        }
        d = static_cast<D>(t);
        return true;
    } else {
        if (!std::in_range<D>(s)) {
            return false;
        }
        d = static_cast<D>(s);
        return true;
    }
}

template <class T>
struct tag {
    using type = T;
};

// Calls f(tag<T>{}) with the storage type of a non-quantized dtype; Flex32 is f32.
template <class F>
decltype(auto) visit_storage(const dtype& t, F&& f)
{
    switch (t.get_kind()) {
    case dtype::kind::f64: return f(tag<double>{});
    case dtype::kind::f32:
    case dtype::kind::flex32: return f(tag<float>{});
    case dtype::kind::f16: return f(tag<float16>{});
    case dtype::kind::bf16: return f(tag<bfloat16>{});
    case dtype::kind::i64: return f(tag<std::int64_t>{});
    case dtype::kind::i32: return f(tag<std::int32_t>{});
    case dtype::kind::i16: return f(tag<std::int16_t>{});
    case dtype::kind::i8: return f(tag<std::int8_t>{});
    case dtype::kind::u64: return f(tag<std::uint64_t>{});
    case dtype::kind::u32: return f(tag<std::uint32_t>{});
    case dtype::kind::u16: return f(tag<std::uint16_t>{});
    case dtype::kind::u8: return f(tag<std::uint8_t>{});
    case dtype::kind::boolean:
    case dtype::kind::qfloat: break;
    }
    if (t.get_bool_store() == bool_store::u32) {
        return f(tag<bool32>{});
    }
    return f(tag<bool8>{});
}

// Element-wise conversion of n elements; `in` and `out` may be the same buffer when the
// element sizes are equal (each element is read before it is written).
template <class S, class D>
result<void> convert_elements(const std::uint8_t* in, std::uint8_t* out, std::size_t n,
                              const dtype& from, const dtype& to)
{
    if constexpr (std::is_same_v<S, float> && is_half_v<D>) {
        // The hot gradient paths use the vectorized bulk conversions.
        ruda::convert(std::span<const float>(reinterpret_cast<const float*>(in), n),
                      std::span<D>(reinterpret_cast<D*>(out), n));
    } else if constexpr (is_half_v<S> && std::is_same_v<D, float>) {
        ruda::convert(std::span<const S>(reinterpret_cast<const S*>(in), n),
                      std::span<float>(reinterpret_cast<float*>(out), n));
    } else {
        for (std::size_t i = 0; i < n; ++i) {
            S s;
            std::memcpy(&s, in + i * sizeof(S), sizeof(S));
            D d{};
            if (!cast(s, d)) {
                return error{errc::invalid_dtype,
                             "Cannot convert element " + std::to_string(i) + " (" + value_text(s) +
                                 ") from " + to_string(from) + " to " + to_string(to) +
                                 ": value is NaN, infinite or out of range"};
            }
            std::memcpy(out + i * sizeof(D), &d, sizeof(D));
        }
    }
    return success();
}

// Burn labels Flex32 results F32.
dtype result_dtype(const dtype& target)
{
    return target.get_kind() == dtype::kind::flex32 ? dtype::f32() : target;
}

// Checks a conversion and returns the element count, before any byte is touched.
result<std::size_t> check_convertible(const tensor_data& data, const dtype& target)
{
    if (data.dtype().is_quantized() || target.is_quantized()) {
        return error{errc::invalid_dtype, "Quantized data cannot be converted: " +
                                              to_string(data.dtype()) + " to " + to_string(target)};
    }
    BOOST_OUTCOME_TRY(auto n, data.checked_num_elements());
    const std::size_t size = data.dtype().size();
    if (n > std::numeric_limits<std::size_t>::max() / size || data.bytes().size() != n * size) {
        return error{errc::invalid_dtype,
                     "Cannot convert " + to_string(data.dtype()) + " data of shape " +
                         to_string(data.shape()) + " to " + to_string(target) + ": " +
                         std::to_string(data.bytes().size()) +
                         " bytes do not hold its element count times " + std::to_string(size)};
    }
    return n;
}

// Converts `in` into `out`, which must hold n target elements.
result<void> convert_bytes(const std::uint8_t* in, std::uint8_t* out, std::size_t n,
                           const dtype& from, const dtype& to)
{
    return visit_storage(from, [&](auto s) {
        return visit_storage(to, [&](auto d) {
            return convert_elements<typename decltype(s)::type, typename decltype(d)::type>(
                in, out, n, from, to);
        });
    });
}

} // namespace

result<std::size_t> checked_num_elements(std::span<const std::size_t> dims)
{
    std::size_t count = 1;
    for (const std::size_t d : dims) {
        if (d != 0 && count > std::numeric_limits<std::size_t>::max() / d) {
            return error{errc::shape_overflow, "Shape " +
                                                   to_string(shape(dims.begin(), dims.end())) +
                                                   " overflows the element count"};
        }
        count *= d;
    }
    return count;
}

std::size_t tensor_data::num_elements() const noexcept
{
    std::size_t count = 1;
    for (const std::size_t d : shape_) {
        count *= d; // wraps, as Burn's unchecked product does
    }
    return count;
}

result<std::size_t> tensor_data::checked_num_elements() const
{
    return ruda::checked_num_elements(shape_);
}

result<tensor_data> tensor_data::from_elements(const void* data, std::size_t count,
                                               std::size_t element_size, ruda::dtype type,
                                               ruda::shape dims)
{
    BOOST_OUTCOME_TRY(auto expected, ruda::checked_num_elements(dims));
    if (count != expected) {
        return error{errc::byte_count_mismatch,
                     std::to_string(count) + " values do not fill shape " + to_string(dims) +
                         " of " + std::to_string(expected) + " elements"};
    }
    return tensor_data{
        storage::copy_of({static_cast<const std::uint8_t*>(data), count * element_size}),
        std::move(dims), type};
}

result<std::size_t> tensor_data::checked_values(dtype::kind kind, std::size_t size,
                                                std::size_t align) const
{
    const bool stores = dtype_.get_kind() == kind ||
                        (kind == dtype::kind::f32 && dtype_.get_kind() == dtype::kind::flex32);
    if (!stores) {
        return error{errc::invalid_dtype, "Data of dtype " + to_string(dtype_) +
                                              " cannot be read as " + to_string(kind)};
    }
    BOOST_OUTCOME_TRY(auto n, checked_num_elements());
    if (n > std::numeric_limits<std::size_t>::max() / size || bytes_.size() != n * size ||
        reinterpret_cast<std::uintptr_t>(bytes_.data()) % align != 0) {
        return error{errc::byte_count_mismatch,
                     std::to_string(bytes_.size()) + " bytes of " + to_string(dtype_) +
                         " do not hold shape " + to_string(shape_)};
    }
    return n;
}

result<tensor_data> tensor_data::convert(ruda::dtype target) const&
{
    if (target == dtype_) {
        return *this;
    }
    BOOST_OUTCOME_TRY(auto n, check_convertible(*this, target));
    // n * target size cannot overflow: n elements of at least one byte are already in memory.
    auto out = storage::try_allocate(n * target.size());
    if (!out) {
        return error{errc::allocation_too_large,
                     "Cannot allocate " + std::to_string(n * target.size()) + " bytes to convert " +
                         to_string(dtype_) + " data of shape " + to_string(shape_) + " to " +
                         to_string(target)};
    }
    BOOST_OUTCOME_TRY(convert_bytes(bytes_.data(), out.value().writable_data(), n, dtype_, target));
    return tensor_data{std::move(out).value(), shape_, result_dtype(target)};
}

result<tensor_data> tensor_data::convert(ruda::dtype target) &&
{
    if (target == dtype_) {
        return std::move(*this);
    }
    // Equal element sizes convert in place, as Burn does, but only into float or bool targets,
    // which cannot fail (a failing conversion must leave the source untouched), and only in
    // memory no other tensor_data shares.
    const bool infallible = target.is_float() || target.is_bool();
    if (target.size() != dtype_.size() || !infallible || !bytes_.writable()) {
        return std::as_const(*this).convert(target);
    }
    BOOST_OUTCOME_TRY(auto n, check_convertible(*this, target));
    storage out = std::move(bytes_);
    std::uint8_t* data = out.writable_data();
    BOOST_OUTCOME_TRY(convert_bytes(data, data, n, dtype_, target));
    return tensor_data{std::move(out), std::move(shape_), result_dtype(target)};
}

std::ostream& operator<<(std::ostream& os, const tensor_data& t)
{
    os << "tensor_data(" << t.dtype() << ", [";
    const char* separator = "";
    for (const std::size_t dim : t.shape()) {
        os << separator << dim;
        separator = ", ";
    }
    return os << "], " << t.bytes().size() << " bytes)";
}

std::string to_string(const shape& dims)
{
    std::string out = "[";
    for (std::size_t i = 0; i < dims.size(); ++i) {
        if (i != 0) {
            out += ", ";
        }
        out += std::to_string(dims[i]);
    }
    return out + "]";
}

} // namespace ruda
