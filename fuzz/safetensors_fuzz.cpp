// libFuzzer target: safetensors import from untrusted bytes. The header's length, JSON (parsed
// iteratively), names, dtypes, shapes and byte ranges are all checked before a tensor is
// allocated, so no input may crash it or make it allocate beyond the file's own size
// (-malloc_limit_mb); whatever imports is a valid tensor group (float, integer and bool tensors
// stored as themselves) whose tensors hold exactly their shape's bytes.
#include "fuzz_input.hpp"

#include <ruda/checkpoint/safetensors.hpp>
#include <ruda/optim/validate_record.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const auto record = ruda::import_safetensors_bytes({data, size},
                                                       {.max_header_bytes = std::uint64_t{1} << 20U});
    if (!record) {
        return 0;
    }
    fuzz::require(ruda::validate_tensor_group(record.value()).has_value());
    std::size_t total = 0;
    for (const auto& entry : record.value().entries()) {
        fuzz::require(!entry.data.dtype().is_quantized());
        fuzz::require(entry.data.bytes().size() ==
                      entry.data.num_elements() * entry.data.dtype().size());
        total += entry.data.bytes().size();
    }
    fuzz::require(total <= size);
    return 0;
}
