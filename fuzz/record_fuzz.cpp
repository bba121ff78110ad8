// libFuzzer target: from_record on records decoded from the input (ids drawn from a small set
// so duplicates happen, any dtypes and quantization schemes including block lengths past 5,
// shapes with dims up to 2^64 - 1, byte lengths that disagree with them). Validation must
// reject a bad record before allocating for it (-malloc_limit_mb catches a large allocation),
// and a record that validates must restore, every tensor in its original dtype.
#include "fuzz_input.hpp"

#include <ruda/backend/cpu_backend.hpp>
#include <ruda/optim/gradients_params.hpp>

#include <vector>

namespace {

using cpu = ruda::cpu_backend;

ruda::dtype read_dtype(fuzz::input& in)
{
    const auto kind = static_cast<ruda::dtype::kind>(in.byte() % 15);
    if (kind == ruda::dtype::kind::boolean) {
        return ruda::dtype::boolean(static_cast<ruda::bool_store>(in.byte() % 3));
    }
    if (kind != ruda::dtype::kind::qfloat) {
        return *ruda::dtype::from_kind(kind);
    }
    ruda::quant_scheme s;
    s.value = static_cast<ruda::quant_value>(in.byte() % 9);
    s.param = static_cast<ruda::quant_param>(in.byte() % 5);
    const std::uint8_t store = in.byte();
    const std::size_t dim = store >> 4U;
    switch (store % 3) {
    case 0: s.store = ruda::quant_store::native(); break;
    case 1: s.store = ruda::quant_store::packed_native(dim); break;
    default: s.store = ruda::quant_store::packed_u32(dim); break;
    }
    const std::uint8_t level = in.byte();
    if (level % 2 == 1) {
        std::array<std::uint8_t, ruda::block_size::max_dims> blocks{};
        for (auto& b : blocks) {
            b = in.byte() % 9;
        }
        s.level = ruda::quant_level::block(ruda::block_size::from_parts(blocks, (level >> 1U) % 8));
    }
    return ruda::dtype::qfloat(s);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    fuzz::input in{data, size};
    const std::size_t count = in.byte() % 6;
    std::vector<ruda::gradient_entry> entries;
    for (std::size_t k = 0; k < count && !in.empty(); ++k) {
        const ruda::param_id id{in.byte() % 4U};
        const ruda::dtype original = read_dtype(in);
        const ruda::dtype stored = in.byte() % 2 == 0 ? original : read_dtype(in);
        ruda::shape dims(in.byte() % 5);
        for (std::size_t& d : dims) {
            const std::uint8_t b = in.byte();
            d = b == 255 ? in.u64() : b % 16;
        }
        const std::size_t length = in.byte() * 4U;
        const auto bytes = in.bytes(length);
        entries.push_back({id, original,
                           ruda::tensor_data{{bytes.begin(), bytes.end()}, dims, stored}});
    }
    const ruda::gradients_params_record record{entries};
    const bool valid = ruda::validate_gradients_record(record).has_value();
    auto restored = ruda::gradients_params::from_record<cpu>(record, {});
    fuzz::require(restored.has_value() == valid);
    if (!valid) {
        return 0;
    }
    for (const auto& entry : entries) {
        const auto tensor = restored.value().get<cpu>(entry.id);
        fuzz::require(tensor.has_value());
        fuzz::require(ruda::dtype_of<cpu>(*tensor) == entry.dtype);
    }
    return 0;
}
