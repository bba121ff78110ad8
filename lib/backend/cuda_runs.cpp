// Runs of small tensors: which adjacent tensors of a snapshot one copy reads.
#include "cuda_runs.hpp"

namespace ruda::detail {

result<void> group_cuda_runs(const cuda_context& context,
                             std::span<std::shared_ptr<const cuda_tensor_desc>* const> tensors,
                             std::size_t max_bytes)
{
    constexpr std::size_t small = 64 * 1024;
    const driver& api = context.api();
    BOOST_OUTCOME_TRY(context.make_current());
    for (std::size_t i = 0; i < tensors.size();) {
        const cuda_tensor_desc& first = **tensors[i];
        std::size_t end = i + 1;
        std::size_t bytes = first.bytes;
        CUdeviceptr allocation = 0;
        std::size_t allocation_bytes = 0; // looked up once a second tensor is adjacent
        while (first.bytes > 0 && first.bytes <= small && end < tensors.size()) {
            const cuda_tensor_desc& next = **tensors[end];
            if (next.bytes == 0 || next.bytes > small || next.producer != first.producer ||
                next.address != first.address + bytes || bytes + next.bytes > max_bytes) {
                break;
            }
            // One copy may not span two allocations, however adjacent their addresses.
            if (allocation_bytes == 0 &&
                api.cuMemGetAddressRange(&allocation, &allocation_bytes, first.address) !=
                    cuda_success) {
                break;
            }
            if (next.address + next.bytes > allocation + allocation_bytes) {
                break;
            }
            bytes += next.bytes;
            ++end;
        }
        if (end - i > 1) {
            auto run = std::make_shared<cuda_run>();
            run->address = first.address;
            run->bytes = bytes;
            run->tensors = end - i;
            run->producer = first.producer;
            std::size_t offset = 0;
            for (std::size_t k = i; k < end; ++k) {
                auto member = std::make_shared<cuda_tensor_desc>(**tensors[k]);
                member->run = run;
                member->run_offset = offset;
                offset += member->bytes;
                *tensors[k] = std::move(member);
            }
        }
        i = end;
    }
    return success();
}

} // namespace ruda::detail
