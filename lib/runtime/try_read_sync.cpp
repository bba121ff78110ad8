// Where `try_read_sync` parks a context whose read ignored cancellation: destroying it could
// run that read's handlers against freed memory, so it lives until the process ends.
#include <ruda/runtime/try_read_sync.hpp>

#include <mutex>
#include <vector>

namespace ruda::detail {

void abandon_context(std::unique_ptr<sync_context> context)
{
    static std::mutex guard;
    // Never destroyed: static destruction would unwind the abandoned read after its device.
    static auto* abandoned = new std::vector<std::unique_ptr<sync_context>>();
    const std::lock_guard lock{guard};
    abandoned->push_back(std::move(context));
}

} // namespace ruda::detail
