// What a checkpoint file's verified frame says about its contents, before any payload is read:
// the entry table and the sections, with where each payload lies and its checksum.
#pragma once

#include <ruda/checkpoint/run_identity.hpp>
#include <ruda/optim/param_id.hpp>
#include <ruda/tensor/dtype.hpp>
#include <ruda/tensor/tensor_data.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ruda {

/// The checkpoint file format this ruda writes and the newest it reads (docs/FORMAT.md).
inline constexpr std::uint32_t checkpoint_format_version = 1;

/// Where one payload lies in the file, and its XXH3-64 checksum.
struct payload_location {
    std::uint64_t offset = 0;
    std::uint64_t length = 0;
    std::uint64_t checksum = 0;

    friend bool operator==(const payload_location&, const payload_location&) = default;
};

struct checkpoint_entry_info {
    param_id id{0};
    dtype original = dtype::f32(); ///< the dtype the gradient had on its device
    dtype stored = dtype::f32();   ///< the dtype of the payload
    ruda::shape shape;
    payload_location payload;
    std::string name; ///< the parameter's name, or empty

    friend bool operator==(const checkpoint_entry_info&, const checkpoint_entry_info&) = default;
};

struct checkpoint_section_info {
    std::string name;
    payload_location payload;

    friend bool operator==(const checkpoint_section_info&,
                           const checkpoint_section_info&) = default;
};

/// A group of tensors: entries [first, first + count) of the index.
struct checkpoint_group_info {
    std::string name;
    std::size_t first = 0;
    std::size_t count = 0;

    friend bool operator==(const checkpoint_group_info&, const checkpoint_group_info&) = default;
};

struct checkpoint_index {
    std::uint32_t format_version = 0;
    std::string producer; ///< the ruda version that wrote the file, "major.minor.patch"
    std::uint64_t file_length = 0;
    std::vector<checkpoint_entry_info> entries;
    std::vector<checkpoint_section_info> sections;
    /// The groups of the entries, in file order, which cover them all. A file without groups
    /// has one: "gradients", all its entries.
    std::vector<checkpoint_group_info> groups;
    /// The run and step that wrote the file, when it records them (a manager's saves do).
    std::optional<run_identity> identity;

    /// The name of entry `k`'s group ("gradients" in an index without groups).
    [[nodiscard]] std::string_view group_of(std::size_t k) const noexcept
    {
        for (const checkpoint_group_info& g : groups) {
            if (k >= g.first && k < g.first + g.count) {
                return g.name;
            }
        }
        return "gradients";
    }
};

} // namespace ruda
