// cereal serialization of the tensor types: quantization schemes, dtypes and tensor_data, for
// binary, portable binary, JSON and XML archives. Tensor bytes take cereal's bulk binary path
// (base64 in JSON and XML). Loading malformed input throws `cereal::Exception`, as cereal
// itself does; treat these archives as trusted input and check untrusted bytes first (for JSON
// and XML, their nesting: ruda/record/text_nesting.hpp).
#pragma once

#include <ruda/tensor/dtype.hpp>
#include <ruda/tensor/quant_scheme.hpp>
#include <ruda/tensor/storage.hpp>
#include <ruda/tensor/tensor_data.hpp>

#include <cereal/cereal.hpp>
#include <cereal/details/traits.hpp>
#include <cereal/types/vector.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace ruda::detail {

// Reads an enum stored as its underlying value and rejects values past `last`.
template <class E, class Archive>
E load_enum(Archive& ar, const char* name, E last)
{
    std::uint8_t raw = 0;
    ar(cereal::make_nvp(name, raw));
    if (raw > static_cast<std::uint8_t>(last)) {
        throw cereal::Exception(std::string("ruda: invalid ") + name + " " + std::to_string(raw));
    }
    return static_cast<E>(raw);
}

template <class Archive, class E>
void save_enum(Archive& ar, const char* name, E value)
{
    ar(cereal::make_nvp(name, static_cast<std::uint8_t>(value)));
}

} // namespace ruda::detail

namespace ruda {

template <class Archive>
void save(Archive& ar, const quant_scheme& s, std::uint32_t /*version*/)
{
    detail::save_enum(ar, "value", s.value);
    detail::save_enum(ar, "param", s.param);
    detail::save_enum(ar, "store", s.store.get_kind());
    ar(cereal::make_nvp("store_dim", static_cast<std::uint64_t>(s.store.dim())));
    detail::save_enum(ar, "level", s.level.get_kind());
    const auto& blocks = s.level.blocks();
    ar(cereal::make_nvp("block_len", blocks.len()));
    for (std::size_t i = 0; i < block_size::max_dims; ++i) {
        ar(cereal::make_nvp("block_" + std::to_string(i), blocks.storage()[i]));
    }
    detail::save_enum(ar, "mode", s.mode);
}

template <class Archive>
void load(Archive& ar, quant_scheme& s, std::uint32_t /*version*/)
{
    s.value = detail::load_enum(ar, "value", quant_value::q2s);
    s.param = detail::load_enum(ar, "param", quant_param::ue4m3);
    const auto store = detail::load_enum(ar, "store", quant_store::kind::packed_u32);
    std::uint64_t dim = 0;
    ar(cereal::make_nvp("store_dim", dim));
    switch (store) {
    case quant_store::kind::native: s.store = quant_store::native(); break;
    case quant_store::kind::packed_native: s.store = quant_store::packed_native(dim); break;
    case quant_store::kind::packed_u32: s.store = quant_store::packed_u32(dim); break;
    }
    const auto level = detail::load_enum(ar, "level", quant_level::kind::block);
    std::uint8_t len = 0;
    ar(cereal::make_nvp("block_len", len));
    std::array<std::uint8_t, block_size::max_dims> storage{};
    for (std::size_t i = 0; i < block_size::max_dims; ++i) {
        ar(cereal::make_nvp("block_" + std::to_string(i), storage[i]));
    }
    // Kept as read, a length past 5 included: restore rejects it with a clear error.
    const auto blocks = block_size::from_parts(storage, len);
    s.level =
        level == quant_level::kind::tensor ? quant_level::tensor() : quant_level::block(blocks);
    s.mode = detail::load_enum(ar, "mode", quant_mode::symmetric);
}

template <class Archive>
void save(Archive& ar, const dtype& d, std::uint32_t /*version*/)
{
    detail::save_enum(ar, "kind", d.get_kind());
    if (d.get_kind() == dtype::kind::boolean) {
        detail::save_enum(ar, "bool_store", d.get_bool_store());
    }
    if (const quant_scheme* scheme = d.scheme()) {
        ar(cereal::make_nvp("scheme", *scheme));
    }
}

template <class Archive>
void load(Archive& ar, dtype& d, std::uint32_t /*version*/)
{
    const auto kind = detail::load_enum(ar, "kind", dtype::kind::qfloat);
    if (kind == dtype::kind::boolean) {
        d = dtype::boolean(detail::load_enum(ar, "bool_store", bool_store::u32));
    } else if (kind == dtype::kind::qfloat) {
        quant_scheme scheme{};
        ar(cereal::make_nvp("scheme", scheme));
        d = dtype::qfloat(scheme);
    } else {
        d = *dtype::from_kind(kind);
    }
}

template <class Archive>
void save(Archive& ar, const tensor_data& t, std::uint32_t /*version*/)
{
    ar(cereal::make_nvp("dtype", t.dtype()));
    const std::vector<std::uint64_t> dims(t.shape().begin(), t.shape().end());
    ar(cereal::make_nvp("shape", dims));
    const storage& bytes = t.bytes();
    const std::uint8_t none = 0; // cereal copies from the pointer even for 0 bytes
    const std::uint8_t* data = bytes.empty() ? &none : bytes.data();
    if constexpr (cereal::traits::is_text_archive<Archive>::value) {
        ar(cereal::make_nvp("byte_count", static_cast<std::uint64_t>(bytes.size())));
        ar.saveBinaryValue(data, bytes.size(), "bytes");
    } else {
        // What cereal writes for a std::vector<std::uint8_t>: its size tag, then one bulk write.
        ar(cereal::make_size_tag(static_cast<cereal::size_type>(bytes.size())));
        ar(cereal::binary_data(data, bytes.size()));
    }
}

template <class Archive>
void load(Archive& ar, tensor_data& t, std::uint32_t /*version*/)
{
    dtype type = dtype::f32();
    ar(cereal::make_nvp("dtype", type));
    std::vector<std::uint64_t> dims;
    ar(cereal::make_nvp("shape", dims));
    // Read straight into unfilled memory: nothing zero-fills it first.
    cereal::size_type count = 0;
    if constexpr (cereal::traits::is_text_archive<Archive>::value) {
        std::uint64_t text_count = 0;
        ar(cereal::make_nvp("byte_count", text_count));
        count = text_count;
    } else {
        ar(cereal::make_size_tag(count));
    }
    storage bytes = storage::allocate(static_cast<std::size_t>(count));
    std::uint8_t none = 0; // cereal copies into the pointer even for 0 bytes
    std::uint8_t* data = bytes.empty() ? &none : bytes.writable_data();
    if constexpr (cereal::traits::is_text_archive<Archive>::value) {
        ar.loadBinaryValue(data, bytes.size(), "bytes");
    } else {
        ar(cereal::binary_data(data, bytes.size()));
    }
    t = tensor_data{std::move(bytes), shape(dims.begin(), dims.end()), type};
}

} // namespace ruda

CEREAL_CLASS_VERSION(ruda::quant_scheme, 1)
CEREAL_CLASS_VERSION(ruda::dtype, 1)
CEREAL_CLASS_VERSION(ruda::tensor_data, 1)
