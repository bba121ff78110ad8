// Progress of a save or a load, told one call at a time whatever the thread.
#include <ruda/checkpoint/detail/progress_meter.hpp>
#include <ruda/runtime/error_mapping.hpp>

#include <exception>

namespace ruda::detail {

result<void> progress_meter::add(std::uint64_t bytes)
{
    if (!report_ || bytes == 0) { // an empty payload changes nothing to report
        return success();
    }
    const std::lock_guard lock{mutex_};
    now_.bytes_done += bytes;
    try {
        report_(now_);
    } catch (...) {
        const error failure = error_from_exception(std::current_exception(), "on_progress");
        return error{errc::cancelled, "Stopped by " + failure.message()};
    }
    return success();
}

} // namespace ruda::detail
