// Error codes and exceptions from Asio, cereal and the standard library, as `ruda::error`s.
#include <ruda/runtime/error_mapping.hpp>

#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>

#include <new>
#include <string>
#include <system_error>

namespace ruda {

error error_from_code(const boost::system::error_code& code, std::string_view what)
{
    std::string prefix{what};
    if (code == boost::asio::error::operation_aborted) {
        return {errc::cancelled, prefix + ": cancelled"};
    }
    const std::error_code std_code = code;
    return {std_code, prefix + ": " + code.message()};
}

error error_from_exception(std::exception_ptr failure, std::string_view what)
{
    std::string prefix{what};
    try {
        std::rethrow_exception(failure);
    } catch (const boost::system::system_error& e) {
        const error mapped = error_from_code(e.code(), what);
        return {mapped.code(), prefix + ": " + e.what()};
    } catch (const std::system_error& e) {
        if (e.code() == std::errc::operation_canceled) {
            return {errc::cancelled, prefix + ": cancelled"};
        }
        return {e.code(), prefix + ": " + e.what()};
    } catch (const std::bad_alloc&) {
        return {errc::allocation_too_large, prefix + ": out of memory"};
    } catch (const std::exception& e) {
        return {errc::read_failed, prefix + ": exception: " + e.what()};
    } catch (...) {
        return {errc::read_failed, prefix + ": unknown exception"};
    }
}

} // namespace ruda
