// Exhaustive corruption of a small checkpoint (a quantized entry, several dtypes, a rank-0
// tensor and a section): every single-bit flip, every single-byte change and every truncated
// prefix must fail to load with an error; none may load, and none may crash.
#include "checkpoint_test_support.hpp"

#include <ruda/checkpoint/checkpoint_file.hpp>

#include <boost/test/unit_test.hpp>

#include <map>
#include <sstream>

namespace {

using ruda::errc;

std::vector<std::uint8_t> small_checkpoint_bytes()
{
    const ruda::test::temp_dir dir;
    std::vector<ruda::gradient_entry> entries;
    entries.push_back({ruda::param_id{11}, ruda::dtype::f32(),
                       ruda::tensor_data::from_values(std::vector<float>{1.5F, -2.0F, 0.25F}, {3})
                           .value()});
    entries.push_back({ruda::param_id{12}, ruda::dtype::bf16(),
                       ruda::tensor_data::from_values(std::vector<float>{3.0F, 4.0F}, {2})
                           .value()
                           .convert(ruda::dtype::bf16())
                           .value()});
    const auto q8 = ruda::test::quantized(ruda::quant_value::q8s, ruda::quant_param::f32,
                                          ruda::quant_store::native());
    entries.push_back({ruda::param_id{13}, q8, ruda::test::patterned(4 + 4, {2, 2}, q8)});
    entries.push_back({ruda::param_id{14}, ruda::dtype::f64(),
                       ruda::tensor_data::from_values(std::vector<double>{-7.0}, {}).value()});
    ruda::checkpoint c{ruda::gradients_params_record{std::move(entries)}};
    c.put("step", std::uint64_t{77}).value();
    const auto path = dir / "small.ruda";
    ruda::save_checkpoint_file(path, c).value();
    return ruda::test::read_bytes(path);
}

// Loads every variant `make(i, out)` produces for i in [0, count) and tallies the errors; any
// variant that loads is a failure.
template <class Make>
std::map<std::string, std::size_t> load_all(std::size_t count, Make make, std::size_t& loaded)
{
    std::map<std::string, std::size_t> codes;
    std::vector<std::uint8_t> variant;
    for (std::size_t i = 0; i < count; ++i) {
        if (!make(i, variant)) {
            continue;
        }
        const auto result = ruda::load_checkpoint_bytes(variant);
        if (result) {
            ++loaded;
            BOOST_ERROR("variant " << i << " loaded");
            continue;
        }
        std::ostringstream name;
        name << result.error().code().message();
        ++codes[name.str()];
    }
    return codes;
}

std::string summary(const std::map<std::string, std::size_t>& codes)
{
    std::ostringstream out;
    for (const auto& [code, n] : codes) {
        out << " " << code << ": " << n << ";";
    }
    return out.str();
}

} // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_corruption)

BOOST_AUTO_TEST_CASE(the_intact_file_loads)
{
    const auto bytes = small_checkpoint_bytes();
    const auto loaded = ruda::load_checkpoint_bytes(bytes);
    BOOST_REQUIRE(loaded);
    BOOST_TEST(loaded.value().gradients().entries().size() == 4U);
    BOOST_TEST(loaded.value().sections().size() == 1U);
}

BOOST_AUTO_TEST_CASE(every_single_bit_flip_is_detected)
{
    const auto bytes = small_checkpoint_bytes();
    std::size_t loaded = 0;
    const auto codes = load_all(bytes.size() * 8, [&](std::size_t i, auto& out) {
        out = bytes;
        out[i / 8] ^= static_cast<std::uint8_t>(1U << (i % 8));
        return true;
    }, loaded);
    BOOST_TEST(loaded == 0U);
    BOOST_TEST_MESSAGE(bytes.size() * 8 << " bit flips of a " << bytes.size()
                                        << "-byte checkpoint:" << summary(codes));
}

BOOST_AUTO_TEST_CASE(every_single_byte_change_is_detected)
{
    const auto bytes = small_checkpoint_bytes();
    std::size_t loaded = 0;
    const auto codes = load_all(bytes.size() * 256, [&](std::size_t i, auto& out) {
        const auto value = static_cast<std::uint8_t>(i % 256);
        if (value == bytes[i / 256]) {
            return false; // not a change
        }
        out = bytes;
        out[i / 256] = value;
        return true;
    }, loaded);
    BOOST_TEST(loaded == 0U);
    BOOST_TEST_MESSAGE(bytes.size() * 255 << " byte changes:" << summary(codes));
}

BOOST_AUTO_TEST_CASE(every_truncated_prefix_is_detected)
{
    const auto bytes = small_checkpoint_bytes();
    std::size_t loaded = 0;
    const auto codes = load_all(bytes.size(), [&](std::size_t i, auto& out) {
        out.assign(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(i));
        return true;
    }, loaded);
    BOOST_TEST(loaded == 0U);
    BOOST_TEST(codes.size() == 1U); // always malformed_record
    BOOST_TEST_MESSAGE(bytes.size() << " truncated prefixes:" << summary(codes));
}

BOOST_AUTO_TEST_SUITE_END()
