// Checkpoint sections: any cereal-serializable value round-trips through put/get; a missing
// section, a value of another type, leftover bytes and a hostile container size are errors,
// and a hostile size fails before anything is allocated for it.
#include <ruda/checkpoint/checkpoint.hpp>
#include <ruda/optim/record_serialization.hpp>

#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <boost/test/unit_test.hpp>

#include <limits>
#include <string>
#include <vector>

namespace {

using ruda::errc;

struct scheduler {
    std::string name;
    double warmup = 0;
    std::vector<std::uint32_t> milestones;

    template <class Archive>
    void serialize(Archive& ar)
    {
        ar(CEREAL_NVP(name), CEREAL_NVP(warmup), CEREAL_NVP(milestones));
    }
    friend bool operator==(const scheduler&, const scheduler&) = default;
};

} // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_sections)

BOOST_AUTO_TEST_CASE(values_round_trip)
{
    ruda::checkpoint c;
    const scheduler s{"cosine", 0.25, {10, 20, 40}};
    BOOST_REQUIRE(c.put("scheduler", s));
    BOOST_REQUIRE(c.put("step", std::uint64_t{99}));
    BOOST_REQUIRE(c.put("nan", std::numeric_limits<double>::quiet_NaN()));
    const auto record = ruda::gradients_params_record{
        {{5, ruda::dtype::f32(), ruda::tensor_data::from_values(std::vector<float>{1, 2}, {2}).value()}}};
    BOOST_REQUIRE(c.put("record", record)); // a record can also be a section

    scheduler back;
    BOOST_REQUIRE(c.get("scheduler", back));
    BOOST_TEST((back == s));
    std::uint64_t step = 0;
    BOOST_REQUIRE(c.get("step", step));
    BOOST_TEST(step == 99U);
    double nan = 0;
    BOOST_REQUIRE(c.get("nan", nan));
    BOOST_TEST(nan != nan);
    ruda::gradients_params_record record_back{{}};
    BOOST_REQUIRE(c.get("record", record_back));
    BOOST_TEST((record_back == record));

    // put replaces; order is insertion order.
    BOOST_REQUIRE(c.put("step", std::uint64_t{100}));
    BOOST_REQUIRE(c.get("step", step));
    BOOST_TEST(step == 100U);
    BOOST_TEST(c.sections().size() == 4U);
    BOOST_TEST(c.sections()[1].name == "step");
}

BOOST_AUTO_TEST_CASE(bad_names_missing_sections_and_wrong_types_are_errors)
{
    ruda::checkpoint c;
    BOOST_TEST(c.put("", 1).error() == errc::malformed_record);
    BOOST_TEST(c.put(std::string(256, 'x'), 1).error() == errc::malformed_record);
    BOOST_CHECK(c.put(std::string(255, 'x'), 1));

    int value = 0;
    const auto missing = c.get("nothing", value);
    BOOST_TEST(missing.error() == errc::malformed_record);
    BOOST_TEST(missing.error().message() == "Checkpoint has no section nothing");

    BOOST_REQUIRE(c.put("pair", std::vector<std::uint8_t>{1, 2}));
    scheduler s;
    const auto wrong = c.get("pair", s); // reads past the end
    BOOST_TEST(wrong.error() == errc::malformed_record);
    BOOST_TEST(wrong.error().message().find("Loading section pair: ruda section: reading") == 0U);
    std::uint8_t one = 0;
    const auto left = c.get("pair", one); // reads only part of it
    BOOST_TEST(left.error() == errc::malformed_record);
    BOOST_TEST(left.error().message() == "Section pair has 9 bytes left over");
}

BOOST_AUTO_TEST_CASE(a_hostile_size_fails_before_allocating)
{
    // A vector claiming 2^62 elements in a 16-byte section: without the bound cereal would
    // resize first and throw bad_alloc or exhaust memory.
    std::vector<std::uint8_t> bytes(8, 0);
    const std::uint64_t claimed = std::uint64_t{1} << 62U;
    for (std::size_t i = 0; i < 8; ++i) {
        bytes[i] = static_cast<std::uint8_t>(claimed >> (8 * i));
    }
    bytes.resize(16, 0);
    ruda::checkpoint c;
    BOOST_REQUIRE(c.put_bytes("v", bytes));
    std::vector<double> v;
    const auto loaded = c.get("v", v);
    BOOST_TEST(loaded.error() == errc::malformed_record);
    BOOST_TEST(loaded.error().message().find("a container of 4611686018427387904 elements with 8 "
                                             "bytes left") != std::string::npos);
    BOOST_TEST(v.capacity() == 0U);

    // The same for a string.
    std::string s;
    BOOST_TEST(c.get("v", s).error() == errc::malformed_record);
}

BOOST_AUTO_TEST_CASE(a_bool_must_be_0_or_1)
{
    // Found by the section fuzz target: cereal copies any byte into a bool (an optional's
    // flag, say), which is undefined behaviour; the section archive refuses.
    ruda::checkpoint c;
    BOOST_REQUIRE(c.put_bytes("b", {2}));
    bool b = false;
    const auto loaded = c.get("b", b);
    BOOST_TEST(loaded.error() == errc::malformed_record);
    BOOST_TEST(loaded.error().message().find("2 is not a bool") != std::string::npos);
    BOOST_REQUIRE(c.put("t", true));
    BOOST_REQUIRE(c.get("t", b));
    BOOST_TEST(b);
}

BOOST_AUTO_TEST_SUITE_END()
