// libFuzzer target: the safetensors header reader alone, on untrusted JSON. The first two bytes
// give the size of the data area, the rest is the header. Whatever it accepts is sorted by
// parameter id with no id twice, and its byte ranges tile the data area exactly, each holding
// its shape's bytes.
#include "fuzz_input.hpp"

#include <ruda/checkpoint/detail/safetensors_header.hpp>

#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    fuzz::input in{data, size};
    const std::uint64_t data_size = in.byte() | std::uint64_t{in.byte()} << 8U;
    const auto rest = in.rest();
    const std::string_view json{reinterpret_cast<const char*>(rest.data()), rest.size()};
    auto plans = ruda::detail::parse_safetensors_header(json, "<fuzz>", data_size);
    if (!plans) {
        return 0;
    }
    std::uint64_t covered = 0;
    for (std::size_t i = 0; i < plans.value().size(); ++i) {
        const auto& plan = plans.value()[i];
        fuzz::require(i == 0 || plans.value()[i - 1].id < plan.id);
        fuzz::require(!plan.stored.is_quantized() && plan.begin <= plan.end);
        std::uint64_t elements = 1;
        for (const auto dim : plan.dims) {
            elements *= dim;
        }
        fuzz::require(plan.end - plan.begin == elements * plan.stored.size());
        covered += plan.end - plan.begin;
    }
    fuzz::require(covered == data_size);
    return 0;
}
