// torch's default generators by name: "cpu", and "cuda:N" for each GPU libtorch sees. States
// are read and written under each generator's own mutex, as torch's own calls do.
#include <ruda/optim/torch_generator_state.hpp>

#include "../backend/torch_conversions.hpp"
#include "torch_host_copy.hpp"

#include <ruda/optim/validate_record.hpp>

#include <ATen/Context.h>
#include <ATen/core/Generator.h>

#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ruda {
namespace {

struct named_generator {
    std::string name;
    at::Generator generator;
};

std::vector<named_generator> default_generators()
{
    std::vector<named_generator> out;
    out.push_back({"cpu", at::globalContext().defaultGenerator(c10::DeviceType::CPU)});
    if (at::globalContext().hasCUDA()) {
        for (std::size_t d = 0; d < at::getNumGPUs(); ++d) {
            const c10::Device device{c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(d)};
            out.push_back({device.str(), at::globalContext().defaultGenerator(device)});
        }
    }
    return out;
}

result<at::Tensor> state_of(at::Generator& generator, const std::string& name)
{
    try {
        const std::lock_guard lock{generator.mutex()};
        return generator.get_state();
    } catch (const std::exception& e) {
        return error{errc::read_failed, "Generator " + name + ": " + e.what()};
    }
}

} // namespace

result<gradients_params_record> generator_states()
{
    std::vector<gradient_entry> entries;
    for (auto& [name, generator] : default_generators()) {
        BOOST_OUTCOME_TRY(const auto state, state_of(generator, name));
        BOOST_OUTCOME_TRY(auto entry, detail::host_copy(name, state));
        entries.push_back(std::move(entry));
    }
    std::sort(entries.begin(), entries.end(),
              [](const gradient_entry& a, const gradient_entry& b) { return a.id < b.id; });
    return gradients_params_record{std::move(entries)};
}

namespace {

// Each entry's generator and its state as a tensor, every entry checked.
result<std::vector<std::pair<at::Generator, at::Tensor>>>
plan_states(const gradients_params_record& states)
{
    if (auto valid = validate_tensor_group(states); !valid) {
        return error{valid.error().code(), "Generator states: " + valid.error().message()};
    }
    auto generators = default_generators();
    std::vector<std::pair<at::Generator, at::Tensor>> plan;
    for (const gradient_entry& entry : states.entries()) {
        const auto found = std::find_if(generators.begin(), generators.end(),
                                        [&](const auto& g) { return g.name == entry.name; });
        if (found == generators.end()) {
            return error{errc::unknown_parameter,
                         "Generator " + (entry.name.empty() ? to_string(entry.id) : entry.name) +
                             " is none of this process's (cpu, and cuda:N for each GPU "
                             "libtorch sees)"};
        }
        if (entry.dtype != dtype::u8() || entry.data.dtype() != dtype::u8()) {
            return error{errc::invalid_dtype, "Generator " + entry.name + ": state of dtype " +
                                                  to_string(entry.dtype) + ", not u8"};
        }
        BOOST_OUTCOME_TRY(const auto current, state_of(found->generator, found->name));
        const auto want = static_cast<std::size_t>(current.numel());
        if (entry.data.bytes().size() != want || entry.data.shape().size() != 1) {
            return error{errc::byte_count_mismatch,
                         "Generator " + entry.name + ": a state of " +
                             std::to_string(entry.data.bytes().size()) +
                             " bytes, and this libtorch's is " + std::to_string(want)};
        }
        BOOST_OUTCOME_TRY(auto tensor, detail::tensor_of(entry, c10::Device{c10::kCPU}));
        plan.emplace_back(found->generator, std::move(tensor));
    }
    return plan;
}

} // namespace

result<void> check_generator_states(const gradients_params_record& states)
{
    BOOST_OUTCOME_TRY(plan_states(states));
    return success();
}

result<void> restore_generator_states(const gradients_params_record& states)
{
    BOOST_OUTCOME_TRY(auto plan, plan_states(states));
    for (auto& [generator, state] : plan) {
        try {
            const std::lock_guard lock{generator.mutex()};
            generator.set_state(state);
        } catch (const std::exception& e) {
            return error{errc::read_failed, std::string{"Setting a generator's state: "} +
                                                e.what()};
        }
    }
    return success();
}

} // namespace ruda
