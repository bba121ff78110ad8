// cereal archives for the user-state sections of a checkpoint: compact little-endian binary
// into and out of memory. The input archive is bounded: every read and every container size
// is checked against the bytes that remain, so a hostile size fails before cereal allocates.
#pragma once

#include <cereal/cereal.hpp>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace ruda {

static_assert(std::endian::native == std::endian::little,
              "ruda's checkpoint sections are little-endian");
static_assert(sizeof(bool) == 1, "ruda's checkpoint sections store a bool in one byte");

/// Appends what it serializes to a byte vector.
class section_output_archive
    : public cereal::OutputArchive<section_output_archive, cereal::AllowEmptyClassElision> {
public:
    explicit section_output_archive(std::vector<std::uint8_t>& out)
        : OutputArchive(this), out_(out)
    {
    }

    void save_binary(const void* data, std::size_t size)
    {
        if (size == 0) {
            return;
        }
        // resize and memcpy: GCC 12 at -O3 warns falsely on insert() into an empty vector.
        const std::size_t at = out_.size();
        out_.resize(at + size);
        std::memcpy(out_.data() + at, data, size);
    }

private:
    std::vector<std::uint8_t>& out_;
};

/// Reads what `section_output_archive` wrote. Throws `cereal::Exception` on a read past the
/// end and on a container size larger than the bytes left (every element takes at least one),
/// so no claimed size makes it allocate more than a small multiple of its input.
class section_input_archive
    : public cereal::InputArchive<section_input_archive, cereal::AllowEmptyClassElision> {
public:
    explicit section_input_archive(std::span<const std::uint8_t> in) : InputArchive(this), in_(in)
    {
    }

    void load_binary(void* data, std::size_t size)
    {
        if (size > remaining()) {
            throw cereal::Exception("ruda section: reading " + std::to_string(size) +
                                    " bytes with " + std::to_string(remaining()) + " left");
        }
        if (size != 0) {
            std::memcpy(data, in_.data() + position_, size);
        }
        position_ += size;
    }

    void check_size(std::uint64_t count) const
    {
        if (count > remaining()) {
            throw cereal::Exception("ruda section: a container of " + std::to_string(count) +
                                    " elements with " + std::to_string(remaining()) +
                                    " bytes left");
        }
    }

    [[nodiscard]] std::size_t remaining() const noexcept { return in_.size() - position_; }

private:
    std::span<const std::uint8_t> in_;
    std::size_t position_ = 0;
};

template <class T>
std::enable_if_t<std::is_arithmetic_v<T>> CEREAL_SAVE_FUNCTION_NAME(section_output_archive& ar,
                                                                    const T& t)
{
    ar.save_binary(std::addressof(t), sizeof(t));
}

template <class T>
std::enable_if_t<std::is_arithmetic_v<T> && !std::is_same_v<T, bool>>
CEREAL_LOAD_FUNCTION_NAME(section_input_archive& ar, T& t)
{
    ar.load_binary(std::addressof(t), sizeof(t));
}

// A bool is one byte, 0 or 1: copying any other byte into a bool would be undefined behaviour.
inline void CEREAL_LOAD_FUNCTION_NAME(section_input_archive& ar, bool& t)
{
    std::uint8_t byte = 0;
    ar.load_binary(&byte, 1);
    if (byte > 1) {
        throw cereal::Exception("ruda section: " + std::to_string(byte) + " is not a bool");
    }
    t = byte == 1;
}

template <class Archive, class T>
CEREAL_ARCHIVE_RESTRICT(section_input_archive, section_output_archive)
CEREAL_SERIALIZE_FUNCTION_NAME(Archive& ar, cereal::NameValuePair<T>& t)
{
    ar(t.value);
}

template <class T>
void CEREAL_SAVE_FUNCTION_NAME(section_output_archive& ar, const cereal::SizeTag<T>& t)
{
    ar(t.size);
}

template <class T>
void CEREAL_LOAD_FUNCTION_NAME(section_input_archive& ar, cereal::SizeTag<T>& t)
{
    ar(t.size);
    ar.check_size(static_cast<std::uint64_t>(t.size));
}

template <class T>
void CEREAL_SAVE_FUNCTION_NAME(section_output_archive& ar, const cereal::BinaryData<T>& bd)
{
    ar.save_binary(bd.data, static_cast<std::size_t>(bd.size));
}

template <class T>
void CEREAL_LOAD_FUNCTION_NAME(section_input_archive& ar, cereal::BinaryData<T>& bd)
{
    ar.load_binary(bd.data, static_cast<std::size_t>(bd.size));
}

// A vector's size is checked in bytes. Arithmetic elements are read in bulk once the bytes
// they need are known to remain. Other elements (whose size in the input cereal cannot know)
// are read one at a time, the vector growing only by elements actually read, so a claimed
// size never makes it allocate more than a small multiple of the input: cereal's own load
// resizes to the claimed count first, which for large elements is many times the input.
template <class T, class A>
void CEREAL_LOAD_FUNCTION_NAME(section_input_archive& ar, std::vector<T, A>& vector)
{
    cereal::size_type count = 0;
    ar(cereal::make_size_tag(count));
    vector.clear();
    if constexpr (std::is_arithmetic_v<T>) {
        if (count > ar.remaining() / sizeof(T)) {
            throw cereal::Exception("ruda section: a vector of " + std::to_string(count) + " " +
                                    std::to_string(sizeof(T)) + "-byte values with " +
                                    std::to_string(ar.remaining()) + " bytes left");
        }
        vector.resize(static_cast<std::size_t>(count));
        ar(cereal::binary_data(vector.data(), static_cast<std::size_t>(count) * sizeof(T)));
    } else {
        for (cereal::size_type i = 0; i < count; ++i) {
            T element{};
            ar(element);
            vector.push_back(std::move(element));
        }
    }
}

// A bool is one byte in the input, one bit in the vector: read one at a time like the above.
template <class A>
void CEREAL_LOAD_FUNCTION_NAME(section_input_archive& ar, std::vector<bool, A>& vector)
{
    cereal::size_type count = 0;
    ar(cereal::make_size_tag(count));
    vector.clear();
    for (cereal::size_type i = 0; i < count; ++i) {
        bool element = false;
        ar(element);
        vector.push_back(element);
    }
}

} // namespace ruda

CEREAL_REGISTER_ARCHIVE(ruda::section_output_archive)
CEREAL_REGISTER_ARCHIVE(ruda::section_input_archive)
CEREAL_SETUP_ARCHIVE_TRAITS(ruda::section_input_archive, ruda::section_output_archive)
