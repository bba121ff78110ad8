// Checkpoint sections: any cereal-serializable value round-trips through put/get; a missing
// section, a value of another type, leftover bytes and a hostile container size are errors,
// and a hostile size fails before anything is allocated for it.
#include "../checkpoint/checkpoint_test_support.hpp"

#include <ruda/checkpoint/checkpoint.hpp>
#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/optim/record_serialization.hpp>

#include <cereal/types/array.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <boost/test/unit_test.hpp>

#include <array>
#include <limits>
#include <memory>
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

// An allocator that remembers the largest allocation asked of it.
template <class T>
struct largest_allocation {
    using value_type = T;
    std::shared_ptr<std::size_t> largest = std::make_shared<std::size_t>(0);

    largest_allocation() = default;
    template <class U>
    largest_allocation(const largest_allocation<U>& other) : largest(other.largest) // NOLINT
    {
    }
    T* allocate(std::size_t n)
    {
        *largest = std::max(*largest, n * sizeof(T));
        return std::allocator<T>{}.allocate(n);
    }
    void deallocate(T* p, std::size_t n) { std::allocator<T>{}.deallocate(p, n); }
    friend bool operator==(const largest_allocation&, const largest_allocation&) = default;
};

// A section of `size` bytes whose first 8 claim `count` elements.
std::vector<std::uint8_t> claiming(std::uint64_t count, std::size_t size)
{
    std::vector<std::uint8_t> bytes(size, 0);
    for (std::size_t i = 0; i < 8; ++i) {
        bytes[i] = static_cast<std::uint8_t>(count >> (8 * i));
    }
    return bytes;
}

} // namespace

BOOST_AUTO_TEST_SUITE(record_sections)

BOOST_AUTO_TEST_CASE(values_round_trip)
{
    ruda::checkpoint c;
    const scheduler s{"cosine", 0.25, {10, 20, 40}};
    BOOST_REQUIRE(c.put("scheduler", s));
    BOOST_REQUIRE(c.put("step", std::uint64_t{99}));
    BOOST_REQUIRE(c.put("nan", std::numeric_limits<double>::quiet_NaN()));
    const auto record = ruda::gradients_params_record{
        {{ruda::param_id{5}, ruda::dtype::f32(), ruda::tensor_data::from_values(std::vector<float>{1, 2}, {2}).value()}}};
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
    ruda::gradients_params_record record_back;
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
    // Names are UTF-8 text: a stray byte, an overlong form and a surrogate are refused.
    for (const std::string bad : {"caf\xe9", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80"}) {
        const auto refused = c.put(bad, 1);
        BOOST_TEST(refused.error() == errc::malformed_record);
        BOOST_TEST(refused.error().message() == "A section name must be UTF-8 text");
    }
    BOOST_CHECK(c.put("caf\xc3\xa9 \xf0\x9f\x98\x80", 1));

    int value = 0;
    const auto missing = c.get("nothing", value);
    BOOST_TEST(missing.error() == errc::not_found);
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

BOOST_AUTO_TEST_CASE(a_vector_size_is_checked_in_bytes_not_elements)
{
    // 2^20 elements claimed with 1 MiB after the count: one byte each would fit, but 8-byte
    // values do not, so nothing is allocated for them.
    ruda::checkpoint c;
    BOOST_REQUIRE(c.put_bytes("v", claiming(std::uint64_t{1} << 20U, (std::size_t{1} << 20U) + 8)));
    std::vector<std::uint64_t, largest_allocation<std::uint64_t>> wide;
    const auto refused = c.get("v", wide);
    BOOST_TEST(refused.error() == errc::malformed_record);
    BOOST_TEST(refused.error().message().find("a vector of 1048576 8-byte values") !=
               std::string::npos);
    BOOST_TEST(*wide.get_allocator().largest == 0U);

    // Elements of 4 KiB each, which cereal would allocate 4 GiB for before reading one: read
    // one at a time, the vector never holds more than the section has room for.
    std::vector<std::array<double, 512>, largest_allocation<std::array<double, 512>>> blocks;
    BOOST_TEST(c.get("v", blocks).error() == errc::malformed_record);
    BOOST_TEST(*blocks.get_allocator().largest <= std::size_t{2} << 20U);

    // What a vector's save wrote still loads.
    const std::vector<std::array<double, 512>> written(3, std::array<double, 512>{1.5, -2.0});
    BOOST_REQUIRE(c.put("blocks", written));
    std::vector<std::array<double, 512>> read;
    BOOST_REQUIRE(c.get("blocks", read));
    BOOST_TEST((read == written));
    BOOST_REQUIRE(c.put("bits", std::vector<bool>{true, false, true}));
    std::vector<bool> bits;
    BOOST_REQUIRE(c.get("bits", bits));
    BOOST_TEST((bits == std::vector<bool>{true, false, true}));
}

BOOST_AUTO_TEST_CASE(many_sections_save_and_load_in_n_log_n)
{
    // 100,000 sections: once a linear search each, so a 3.6 MB file took 15 s to load; now a
    // map lookup.
    constexpr std::uint32_t count = 100000;
    ruda::checkpoint c;
    for (std::uint32_t k = 0; k < count; ++k) {
        BOOST_REQUIRE(c.put("s" + std::to_string(k), k));
    }
    BOOST_REQUIRE(c.put("s7", std::uint32_t{70})); // replaces in place
    BOOST_TEST(c.sections().size() == count);
    std::uint32_t value = 0;
    BOOST_REQUIRE(c.get("s99999", value));
    BOOST_TEST(value == 99999U);
    BOOST_REQUIRE(c.get("s7", value));
    BOOST_TEST(value == 70U);
    BOOST_TEST(c.sections()[7].name == "s7");

    const ruda::test::temp_dir dir;
    BOOST_REQUIRE(ruda::save_checkpoint_file(dir / "many.ruda", c));
    const auto loaded = ruda::load_checkpoint_file(dir / "many.ruda");
    BOOST_REQUIRE(loaded);
    BOOST_TEST((loaded.value() == c));
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
