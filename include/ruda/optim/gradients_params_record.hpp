// The host-owned snapshot of a model's gradients: per parameter its id, the dtype the
// gradient had on the device, and the data as stored (which a precision setting may narrow).
#pragma once

#include <ruda/error.hpp>
#include <ruda/optim/param_id.hpp>
#include <ruda/record/precision.hpp>
#include <ruda/tensor/dtype.hpp>
#include <ruda/tensor/tensor_data.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ruda {

/// One gradient: its parameter id, its original dtype, its stored data, and the parameter's
/// name when one was given ("fc1.bias"; empty when not), which checkpoints keep.
struct gradient_entry {
    param_id id{0};
    ruda::dtype dtype;
    tensor_data data;
    std::string name{};

    friend bool operator==(const gradient_entry&, const gradient_entry&) = default;
};

/// Any list of entries makes a record, malformed ones included: restoring validates it.
class gradients_params_record {
public:
    /// No entries.
    gradients_params_record() = default;
    explicit gradients_params_record(std::vector<gradient_entry> entries)
        : entries_(std::move(entries))
    {
    }

    [[nodiscard]] const std::vector<gradient_entry>& entries() const& noexcept
    {
        return entries_;
    }
    [[nodiscard]] std::vector<gradient_entry> into_entries() && noexcept
    {
        return std::move(entries_);
    }

    /// The record as precision `S` stores it: non-quantized data converted to
    /// `S::float_dtype()`, quantized data untouched, the original dtypes kept.
    template <precision_settings S>
    [[nodiscard]] result<gradients_params_record> into_item() const
    {
        std::vector<gradient_entry> stored;
        stored.reserve(entries_.size());
        for (const gradient_entry& entry : entries_) {
            if (entry.data.dtype().is_quantized()) {
                stored.push_back(entry);
                continue;
            }
            auto data = entry.data.convert(S::float_dtype());
            if (!data) {
                return parameter_error("Storing gradient", entry.id, data.error());
            }
            stored.push_back({entry.id, entry.dtype, std::move(data).value(), entry.name});
        }
        return gradients_params_record{std::move(stored)};
    }

    friend bool operator==(const gradients_params_record&,
                           const gradients_params_record&) = default;

private:
    std::vector<gradient_entry> entries_;
};

} // namespace ruda
