// cereal serialization of gradient entries and records, so a record embeds in a user's own
// archive next to the model and optimizer state. Versioned; loading malformed input throws
// `cereal::Exception` like any cereal load (validate with `validate_gradients_record` after).
#pragma once

#include <ruda/optim/gradients_params_record.hpp>
#include <ruda/record/tensor_serialization.hpp>

#include <cereal/cereal.hpp>
#include <cereal/types/string.hpp>

#include <cstdint>
#include <vector>

namespace ruda {

// Version 2 adds the parameter's name; version 1 archives load with an empty one.
template <class Archive>
void save(Archive& ar, const gradient_entry& e, std::uint32_t /*version*/)
{
    const std::uint64_t id = e.id.val();
    ar(cereal::make_nvp("id", id), cereal::make_nvp("dtype", e.dtype),
       cereal::make_nvp("data", e.data), cereal::make_nvp("name", e.name));
}

template <class Archive>
void load(Archive& ar, gradient_entry& e, std::uint32_t version)
{
    std::uint64_t id = 0;
    ar(cereal::make_nvp("id", id), cereal::make_nvp("dtype", e.dtype),
       cereal::make_nvp("data", e.data));
    e.id = param_id{id};
    e.name.clear();
    if (version >= 2) {
        ar(cereal::make_nvp("name", e.name));
    }
}

template <class Archive>
void save(Archive& ar, const gradients_params_record& r, std::uint32_t /*version*/)
{
    const auto& entries = r.entries();
    // A count then unnamed entries: a size tag would turn this object into a JSON array.
    ar(cereal::make_nvp("count", static_cast<std::uint64_t>(entries.size())));
    for (const gradient_entry& entry : entries) {
        ar(entry);
    }
}

template <class Archive>
void load(Archive& ar, gradients_params_record& r, std::uint32_t /*version*/)
{
    std::uint64_t count = 0;
    ar(cereal::make_nvp("count", count));
    // No reserve(count): the count is not trusted; each entry must actually be there.
    std::vector<gradient_entry> entries;
    for (std::uint64_t i = 0; i < count; ++i) {
        gradient_entry entry{param_id{0}, dtype::f32(), tensor_data{{}, shape{0}, dtype::f32()}};
        ar(entry);
        entries.push_back(std::move(entry));
    }
    r = gradients_params_record{std::move(entries)};
}

} // namespace ruda

CEREAL_CLASS_VERSION(ruda::gradient_entry, 2)
CEREAL_CLASS_VERSION(ruda::gradients_params_record, 1)
