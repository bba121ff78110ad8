// How the distributed checkpoint's plans, reports and manifest are written as bytes: cereal
// functions for the section archives (bounded on input), used between ranks and in the manifest.
#pragma once

#include <ruda/checkpoint/checkpoint.hpp>
#include <ruda/dist/communicator.hpp>
#include <ruda/dist/save_plan.hpp>
#include <ruda/record/section_archive.hpp>
#include <ruda/record/tensor_serialization.hpp>

#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>

#include <exception>
#include <string>

namespace ruda {

template <class Archive>
void save(Archive& ar, const param_id& id)
{
    ar(id.val());
}

template <class Archive>
void load(Archive& ar, param_id& id)
{
    std::uint64_t value = 0;
    ar(value);
    id = param_id{value};
}

// A placement kind is one byte, and no other value than ruda's three loads.
template <class Archive>
void serialize_kind(Archive& ar, placement_kind& kind)
{
    if constexpr (Archive::is_loading::value) {
        kind = detail::load_enum(ar, "placement", placement_kind::sharded);
    } else {
        detail::save_enum(ar, "placement", kind);
    }
}

template <class Archive>
void serialize(Archive& ar, element_range& r)
{
    ar(r.offset, r.length);
}

template <class Archive>
void serialize(Archive& ar, placement& p)
{
    serialize_kind(ar, p.kind);
    ar(p.global_shape, p.slice);
}

template <class Archive>
void serialize(Archive& ar, declared_tensor& d)
{
    ar(d.id, d.original, d.stored, d.shape, d.bytes, d.where);
}

template <class Archive>
void serialize(Archive& ar, tensor_piece& p)
{
    ar(p.rank, p.range, p.bytes, p.checksum);
}

template <class Archive>
void serialize(Archive& ar, tensor_layout& t)
{
    ar(t.id);
    serialize_kind(ar, t.kind);
    ar(t.original, t.stored, t.shape, t.pieces);
}

namespace detail {

template <class T>
byte_buffer to_wire(const T& value)
{
    byte_buffer bytes;
    section_output_archive archive{bytes};
    archive(value);
    return bytes;
}

/// `errc::malformed_record` naming `what` when the bytes are not exactly one `T`.
template <class T>
result<T> from_wire(std::span<const std::uint8_t> bytes, const std::string& what)
{
    T value{};
    try {
        section_input_archive archive{bytes};
        archive(value);
        if (archive.remaining() != 0) {
            return error{errc::malformed_record,
                         what + ": " + std::to_string(archive.remaining()) + " bytes left over"};
        }
    } catch (const std::exception& e) {
        return error{errc::malformed_record, what + ": " + e.what()};
    }
    return value;
}

} // namespace detail
} // namespace ruda
