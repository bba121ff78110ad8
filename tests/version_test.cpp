// The version header agrees with the build system's project version.
#include <ruda/version.hpp>

#include <boost/test/unit_test.hpp>

#include <string>

BOOST_AUTO_TEST_SUITE(version)

BOOST_AUTO_TEST_CASE(header_matches_the_build)
{
    BOOST_TEST(std::string(RUDA_VERSION_STRING) == RUDA_BUILD_VERSION);
    BOOST_TEST(std::string(RUDA_VERSION_STRING) ==
               std::to_string(RUDA_VERSION_MAJOR) + "." + std::to_string(RUDA_VERSION_MINOR) +
                   "." + std::to_string(RUDA_VERSION_PATCH));
}

BOOST_AUTO_TEST_SUITE_END()
