// What a checkpoint file holds: named groups of tensors (the gradients, the weights, the
// optimizer's state...), named sections of user state, each any cereal-serializable value, and
// the run and step that wrote it.
#pragma once

#include <ruda/checkpoint/run_identity.hpp>
#include <ruda/error.hpp>
#include <ruda/optim/gradients_params_record.hpp>
#include <ruda/record/section_archive.hpp>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ruda {

/// One named section: the bytes of a value serialized with `section_output_archive`.
struct checkpoint_section {
    std::string name;
    std::vector<std::uint8_t> bytes;

    friend bool operator==(const checkpoint_section&, const checkpoint_section&) = default;
};

/// One named group of tensors: each keeps its id, name, dtype and shape, and a checkpoint
/// file its checksum.
struct tensor_group {
    std::string name;
    gradients_params_record tensors;

    friend bool operator==(const tensor_group&, const tensor_group&) = default;
};

/// The contents of one checkpoint: tensor groups, the "gradients" group always first (and
/// empty until set), then the others in the order they were put; sections in insertion order;
/// and the run that wrote it, if it says.
///
///     ruda::checkpoint ckpt{std::move(gradients)};             // the "gradients" group
///     ckpt.put_group("weights", std::move(weights)).value();
///     ckpt.put("step", step).value();
///     std::uint64_t step = 0;
///     ckpt.get("step", step).value();
///
/// A checkpoint of gradients alone is written exactly as before groups existed.
class checkpoint {
public:
    /// Longest section or group name, in bytes.
    static constexpr std::size_t max_name_length = 255;
    /// Most dimensions a tensor may have to be saved.
    static constexpr std::size_t max_rank = 64;
    /// Longest parameter name (`gradient_entry::name`), in bytes.
    static constexpr std::size_t max_parameter_name_length = 1024;
    /// The group `gradients()` is.
    static constexpr std::string_view gradients_group = "gradients";

    checkpoint() : checkpoint(gradients_params_record{}) {}
    // Not a braced list: its elements are const, so the record would be copied, not moved.
    explicit checkpoint(gradients_params_record gradients)
    {
        groups_.push_back({std::string{gradients_group}, std::move(gradients)});
    }

    /// The "gradients" group.
    [[nodiscard]] const gradients_params_record& gradients() const& noexcept
    {
        return groups_.front().tensors;
    }
    [[nodiscard]] gradients_params_record&& gradients() && noexcept
    {
        return std::move(groups_.front().tensors);
    }
    void set_gradients(gradients_params_record gradients)
    {
        groups_.front().tensors = std::move(gradients);
    }

    /// Puts `tensors` as group `name`, replacing a group of that name ("gradients" too).
    /// `errc::malformed_record` for a name that is empty, over `max_name_length` bytes or not
    /// UTF-8. The tensors are checked when the checkpoint is saved (`validate_for_saving`).
    result<void> put_group(std::string name, gradients_params_record tensors);
    /// Group `name`, or null.
    [[nodiscard]] const gradients_params_record* group(std::string_view name) const noexcept;
    /// Takes group `name` out of the checkpoint (the "gradients" group is left empty);
    /// `errc::not_found` when there is none.
    result<gradients_params_record> take_group(std::string_view name);
    /// Every group, "gradients" first.
    [[nodiscard]] const std::vector<tensor_group>& groups() const noexcept { return groups_; }

    /// The run and step that wrote the checkpoint, when recorded.
    [[nodiscard]] const std::optional<run_identity>& identity() const noexcept
    {
        return identity_;
    }
    /// Records the run, step and parent run; `errc::malformed_record` for a run id
    /// `check_identity` refuses.
    result<void> set_identity(run_identity identity);
    void clear_identity() noexcept { identity_.reset(); }

    /// Serializes `value` into section `name`, replacing a section of that name.
    /// `errc::malformed_record` for a name that is empty, over-long or not UTF-8, or a value
    /// cereal cannot save.
    template <class T>
    result<void> put(std::string name, const T& value)
    {
        std::vector<std::uint8_t> bytes;
        try {
            section_output_archive archive{bytes};
            archive(value);
        } catch (const std::exception& e) {
            return error{errc::malformed_record, "Serializing section " + name + ": " + e.what()};
        }
        return put_bytes(std::move(name), std::move(bytes));
    }

    /// Loads section `name` into `value`. `errc::not_found` when there is no such section;
    /// `errc::malformed_record` when reading `T` runs past its end or leaves bytes over, or when
    /// a container size or a bool is impossible. The bytes carry no type: a `T` of the same
    /// layout as the saved value's (a double read as an int64_t) loads without complaint.
    template <class T>
    result<void> get(std::string_view name, T& value) const
    {
        const checkpoint_section* section = find(name);
        if (section == nullptr) {
            return error{errc::not_found, "Checkpoint has no section " + std::string(name)};
        }
        try {
            section_input_archive archive{section->bytes};
            archive(value);
            if (archive.remaining() != 0) {
                return error{errc::malformed_record,
                             "Section " + std::string(name) + " has " +
                                 std::to_string(archive.remaining()) + " bytes left over"};
            }
        } catch (const std::exception& e) {
            return error{errc::malformed_record,
                         "Loading section " + std::string(name) + ": " + e.what()};
        }
        return success();
    }

    /// Stores already serialized bytes under `name` (what a loaded checkpoint holds). Takes
    /// logarithmic time, like `find`, whatever the number of sections.
    result<void> put_bytes(std::string name, std::vector<std::uint8_t> bytes);

    [[nodiscard]] const checkpoint_section* find(std::string_view name) const noexcept;
    [[nodiscard]] const std::vector<checkpoint_section>& sections() const noexcept
    {
        return sections_;
    }

    friend bool operator==(const checkpoint&, const checkpoint&) = default;

private:
    std::vector<tensor_group> groups_;
    std::vector<checkpoint_section> sections_;
    std::map<std::string, std::size_t, std::less<>> by_name_; // index into sections_
    std::optional<run_identity> identity_;
};

/// The checks a load makes on a record, made by every save before it writes a byte, with the
/// load's error codes: `validate_gradients_record` (`validate_tensor_group` for a group other
/// than the gradients), then at most `checkpoint::max_rank` dimensions and parameter names of
/// UTF-8 text, at most `max_parameter_name_length` bytes and unique (`errc::malformed_record`).
/// So no save leaves a file that cannot load.
[[nodiscard]] result<void> validate_for_saving(const gradients_params_record& record,
                                               bool gradients = true);
/// The same for every group of `contents`, a failure naming the group ("Group weights: …")
/// when it is not the gradients.
[[nodiscard]] result<void> validate_for_saving(const checkpoint& contents);

/// `errc::malformed_record` unless `name` is 1 to `checkpoint::max_name_length` bytes of UTF-8:
/// what a section's or a group's name must be. `what` names it in the message ("A section").
[[nodiscard]] result<void> check_item_name(std::string_view name, std::string_view what);

/// `errc::malformed_record` naming the first parameter name two entries share (empty names
/// do not count; "first": the one whose second use comes first): what a checkpoint, and a
/// safetensors export, refuses.
template <class Entries>
[[nodiscard]] result<void> unique_parameter_names(const Entries& entries)
{
    // Sorted by the names' hashes first: a model's names share long prefixes ("layers.12.")
    // that a map of names compares again at every step, a microsecond per name at 100,000.
    // Then by the name itself, so that crafted collisions cost a comparison, not a quadratic.
    struct named {
        std::size_t hash;
        std::string_view name;
        std::size_t index;
        auto operator<=>(const named&) const = default;
    };
    std::vector<named> names;
    names.reserve(std::size(entries));
    std::size_t index = 0;
    for (const auto& entry : entries) {
        if (!entry.name.empty()) {
            names.push_back({std::hash<std::string_view>{}(entry.name), entry.name, index});
        }
        ++index;
    }
    std::sort(names.begin(), names.end());
    const named* first = nullptr; // the first use of the name whose second use comes first
    const named* second = nullptr;
    for (std::size_t i = 1; i < names.size(); ++i) {
        if (names[i].name == names[i - 1].name && (i < 2 || names[i - 2].name != names[i].name) &&
            (second == nullptr || names[i].index < second->index)) {
            first = &names[i - 1];
            second = &names[i];
        }
    }
    if (second != nullptr) {
        return error{errc::malformed_record, "Parameters " + to_string(entries[first->index].id) +
                                                 " and " + to_string(entries[second->index].id) +
                                                 " have the same name " +
                                                 std::string{second->name}};
    }
    return success();
}

} // namespace ruda
