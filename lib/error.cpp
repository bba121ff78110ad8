// The "ruda" error category and the hook that turns a failed `result<T>::value()` into a throw.
#include <ruda/error.hpp>

#include <ostream>

namespace ruda {
namespace {

class category final : public std::error_category {
public:
    [[nodiscard]] const char* name() const noexcept override { return "ruda"; }

    [[nodiscard]] std::string message(int value) const override
    {
        switch (static_cast<errc>(value)) {
        case errc::sync_read_unavailable: return "synchronous read is unavailable";
        case errc::missing_gradient: return "missing gradient";
        case errc::read_failed: return "read failed";
        case errc::duplicate_param_id: return "duplicate parameter id";
        case errc::invalid_dtype: return "invalid dtype";
        case errc::shape_overflow: return "shape overflows";
        case errc::byte_count_mismatch: return "byte count mismatch";
        case errc::invalid_quantization: return "invalid quantization";
        case errc::allocation_too_large: return "allocation too large";
        case errc::malformed_record: return "malformed record";
        case errc::unsupported_version: return "unsupported version";
        case errc::checksum_mismatch: return "checksum mismatch";
        case errc::io_error: return "I/O error";
        case errc::cancelled: return "cancelled";
        case errc::timed_out: return "timed out";
        case errc::backend_mismatch: return "backend mismatch";
        case errc::shape_mismatch: return "shape mismatch";
        case errc::unknown_parameter: return "no such parameter";
        case errc::device_unavailable: return "device unavailable";
        case errc::directory_in_use: return "checkpoint directory in use";
        case errc::unsupported_device: return "unsupported device";
        case errc::not_found: return "not found";
        case errc::invalid_tensor: return "invalid tensor";
        case errc::plan_mismatch: return "ranks disagree on the save plan";
        case errc::world_size_mismatch: return "world size mismatch";
        case errc::step_not_newer: return "step not above the newest checkpoint";
        case errc::other_run: return "checkpoint of another run";
        case errc::unsupported_optimizer: return "unsupported optimizer";
        case errc::optimizer_mismatch: return "optimizer state does not fit the optimizer";
        }
        return "unknown ruda error " + std::to_string(value);
    }
};

} // namespace

const std::error_category& ruda_category() noexcept
{
    static const category instance;
    return instance;
}

std::string_view to_name(errc e) noexcept
{
    switch (e) {
    case errc::sync_read_unavailable: return "sync_read_unavailable";
    case errc::missing_gradient: return "missing_gradient";
    case errc::read_failed: return "read_failed";
    case errc::duplicate_param_id: return "duplicate_param_id";
    case errc::invalid_dtype: return "invalid_dtype";
    case errc::shape_overflow: return "shape_overflow";
    case errc::byte_count_mismatch: return "byte_count_mismatch";
    case errc::invalid_quantization: return "invalid_quantization";
    case errc::allocation_too_large: return "allocation_too_large";
    case errc::malformed_record: return "malformed_record";
    case errc::unsupported_version: return "unsupported_version";
    case errc::checksum_mismatch: return "checksum_mismatch";
    case errc::io_error: return "io_error";
    case errc::cancelled: return "cancelled";
    case errc::timed_out: return "timed_out";
    case errc::backend_mismatch: return "backend_mismatch";
    case errc::shape_mismatch: return "shape_mismatch";
    case errc::unknown_parameter: return "unknown_parameter";
    case errc::device_unavailable: return "device_unavailable";
    case errc::directory_in_use: return "directory_in_use";
    case errc::unsupported_device: return "unsupported_device";
    case errc::not_found: return "not_found";
    case errc::invalid_tensor: return "invalid_tensor";
    case errc::plan_mismatch: return "plan_mismatch";
    case errc::world_size_mismatch: return "world_size_mismatch";
    case errc::step_not_newer: return "step_not_newer";
    case errc::other_run: return "other_run";
    case errc::unsupported_optimizer: return "unsupported_optimizer";
    case errc::optimizer_mismatch: return "optimizer_mismatch";
    }
    return {};
}

std::ostream& operator<<(std::ostream& os, errc e)
{
    return os << "ruda:" << static_cast<int>(e);
}

std::ostream& operator<<(std::ostream& os, const error& e)
{
    return os << e.message() << " (" << e.code().category().name() << ":" << e.code().value()
              << ")";
}

void outcome_throw_as_system_error_with_payload(const error& e)
{
    throw std::system_error(e.code(), e.message());
}

} // namespace ruda
