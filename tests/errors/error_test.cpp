// The error model: errc in its category, messages, and result<T> throwing with the message.
#include <ruda/error.hpp>

#include <boost/test/unit_test.hpp>

#include <set>
#include <sstream>
#include <string_view>

namespace {

ruda::result<int> parse_positive(int v)
{
    if (v <= 0) {
        return ruda::error{ruda::errc::invalid_dtype, "value " + std::to_string(v) + " is not positive"};
    }
    return v;
}

ruda::result<int> doubled(int v)
{
    BOOST_OUTCOME_TRY(auto x, parse_positive(v));
    return 2 * x;
}

constexpr int errc_count = static_cast<int>(ruda::errc::optimizer_mismatch);

} // namespace

BOOST_AUTO_TEST_SUITE(error)

BOOST_AUTO_TEST_CASE(errc_is_an_error_code_enum_in_the_ruda_category)
{
    static_assert(std::is_error_code_enum_v<ruda::errc>);
    const std::error_code ec = ruda::errc::timed_out;
    BOOST_TEST(std::string(ec.category().name()) == "ruda");
    BOOST_TEST(ec == ruda::errc::timed_out);
    BOOST_TEST(ec != ruda::errc::cancelled);
    BOOST_TEST(static_cast<bool>(ec));
}

BOOST_AUTO_TEST_CASE(every_code_has_its_own_message)
{
    std::set<std::string> messages;
    for (int v = 1; v <= errc_count; ++v) {
        const std::string m = ruda::make_error_code(static_cast<ruda::errc>(v)).message();
        BOOST_TEST(m.find("unknown") == std::string::npos, "code " << v << ": " << m);
        messages.insert(m);
    }
    BOOST_TEST(messages.size() == static_cast<std::size_t>(errc_count));
    BOOST_TEST(ruda::make_error_code(static_cast<ruda::errc>(999)).message().find("unknown") !=
               std::string::npos);
}

BOOST_AUTO_TEST_CASE(every_code_has_its_own_name)
{
    std::set<std::string_view> names;
    for (int v = 1; v <= errc_count; ++v) {
        const std::string_view name = ruda::to_name(static_cast<ruda::errc>(v));
        BOOST_TEST(!name.empty(), "code " << v);
        names.insert(name);
    }
    BOOST_TEST(names.size() == static_cast<std::size_t>(errc_count));
    BOOST_TEST(ruda::to_name(ruda::errc::not_found) == "not_found");
    BOOST_TEST(ruda::to_name(static_cast<ruda::errc>(999)).empty());
}

BOOST_AUTO_TEST_CASE(contract_names_exist)
{
    using ruda::errc;
    for (errc e : {errc::sync_read_unavailable, errc::missing_gradient, errc::read_failed,
                   errc::duplicate_param_id, errc::invalid_dtype, errc::shape_overflow,
                   errc::byte_count_mismatch, errc::invalid_quantization,
                   errc::allocation_too_large, errc::malformed_record, errc::unsupported_version,
                   errc::checksum_mismatch, errc::io_error, errc::cancelled, errc::timed_out,
                   errc::backend_mismatch, errc::shape_mismatch, errc::unknown_parameter,
                   errc::device_unavailable, errc::directory_in_use, errc::unsupported_device,
                   errc::not_found, errc::invalid_tensor, errc::plan_mismatch,
                   errc::world_size_mismatch, errc::step_not_newer, errc::other_run,
                   errc::unsupported_optimizer, errc::optimizer_mismatch}) {
        BOOST_TEST(static_cast<int>(e) >= 1);
        BOOST_TEST(static_cast<int>(e) <= errc_count);
    }
}

BOOST_AUTO_TEST_CASE(error_carries_code_and_message)
{
    const ruda::error e{ruda::errc::missing_gradient, "Missing gradient for parameter 42"};
    BOOST_TEST(e.code() == ruda::errc::missing_gradient);
    BOOST_TEST(e == ruda::errc::missing_gradient);
    BOOST_TEST(e.message() == "Missing gradient for parameter 42");

    const ruda::error bare = ruda::errc::cancelled;
    BOOST_TEST(bare.message() == "cancelled");

    const ruda::error foreign{std::make_error_code(std::errc::no_space_on_device), "disk full"};
    BOOST_TEST((foreign.code() == std::errc::no_space_on_device));
    BOOST_TEST(!(foreign == ruda::errc::io_error));
    std::ostringstream text;
    text << e << " / " << ruda::errc::timed_out;
    BOOST_TEST(text.str() == "Missing gradient for parameter 42 (ruda:2) / ruda:15");
}

BOOST_AUTO_TEST_CASE(result_holds_a_value_or_an_error)
{
    auto ok = doubled(21);
    BOOST_TEST_REQUIRE(ok.has_value());
    BOOST_TEST(ok.value() == 42);

    auto bad = doubled(-1);
    BOOST_TEST_REQUIRE(bad.has_error());
    BOOST_TEST(bad.error() == ruda::errc::invalid_dtype);
    BOOST_TEST(bad.error().message() == "value -1 is not positive");

    ruda::result<void> done = ruda::success();
    BOOST_TEST(done.has_value());
    ruda::result<void> failed = ruda::errc::io_error;
    BOOST_TEST(failed.error() == ruda::errc::io_error);
}

BOOST_AUTO_TEST_CASE(value_on_an_error_throws_system_error_with_the_message)
{
    auto bad = doubled(-5);
    try {
        (void)bad.value();
        BOOST_FAIL("value() did not throw");
    } catch (const std::system_error& e) {
        BOOST_TEST(e.code() == ruda::errc::invalid_dtype);
        BOOST_TEST(std::string(e.what()).find("value -5 is not positive") != std::string::npos);
    }
}

BOOST_AUTO_TEST_SUITE_END()
