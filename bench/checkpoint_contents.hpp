// What bench/checkpoint saves and loads: gradients of known values (the torch peers make the
// same), and a trainer's whole state of the same model.
#pragma once

#include <ruda/ruda.hpp>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace bench {

// Tensor i holds i + k * 0.001 at index k, in f32 arithmetic (the torch peers make the same),
// plus `offset`; ids from `first_id` on.
inline ruda::gradients_params_record make_record(std::size_t tensors, std::size_t elements,
                                          ruda::dtype dtype, float offset = 0,
                                          std::uint64_t first_id = 1)
{
    std::vector<ruda::gradient_entry> entries;
    for (std::size_t i = 0; i < tensors; ++i) {
        std::vector<float> values(elements);
        for (std::size_t k = 0; k < elements; ++k) {
            values[k] = static_cast<float>(i) + static_cast<float>(k) * 1e-3F + offset;
        }
        auto data = ruda::tensor_data::from_values(std::move(values), {elements}).value();
        entries.push_back(
            {ruda::param_id{first_id + i}, dtype, std::move(data).convert(dtype).value()});
    }
    return ruda::gradients_params_record{std::move(entries)};
}

inline ruda::checkpoint make_checkpoint(std::size_t tensors, std::size_t elements, ruda::dtype dtype)
{
    ruda::checkpoint c{make_record(tensors, elements, dtype)};
    c.put("step", std::uint64_t{1000}).value();
    return c;
}

// A trainer's whole state of the same model: the gradients, the weights, and Adam's two
// moments per parameter in the optimizer group, four times the gradients' bytes.
inline ruda::checkpoint make_training_state(std::size_t tensors, std::size_t elements, ruda::dtype dtype)
{
    ruda::checkpoint c = make_checkpoint(tensors, elements, dtype);
    c.put_group("weights", make_record(tensors, elements, dtype, 0.5F)).value();
    auto moments = make_record(tensors, elements, dtype, 0.25F).into_entries();
    for (auto& entry : make_record(tensors, elements, dtype, 0.75F, tensors + 1).into_entries()) {
        moments.push_back(std::move(entry));
    }
    c.put_group("optimizer", ruda::gradients_params_record{std::move(moments)}).value();
    return c;
}

} // namespace bench
