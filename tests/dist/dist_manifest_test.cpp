#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/dist/dist_manifest.hpp>

#include "../support/error_text.hpp"
#include "../checkpoint/checkpoint_test_support.hpp"

#include <boost/test/unit_test.hpp>

#include <string>

using ruda::dtype;
using ruda::errc;
using ruda::param_id;
using ruda::placement_kind;

namespace {

using ruda::test::says;
ruda::dist_manifest sample_manifest()
{
    ruda::dist_manifest m;
    m.step = 12;
    m.world_size = 2;
    m.tensors.push_back({param_id{1},
                         placement_kind::replicated,
                         dtype::f32(),
                         dtype::f16(),
                         {2, 5},
                         {{0, {0, 6}, 12, 111}, {1, {6, 4}, 8, 222}}});
    m.tensors.push_back({param_id{4},
                         placement_kind::rank_local,
                         dtype::f32(),
                         dtype::f32(),
                         {3},
                         {{0, {0, 3}, 12, 333}, {1, {0, 3}, 12, 444}}});
    m.tensors.push_back({param_id{9},
                         placement_kind::sharded,
                         dtype::bf16(),
                         dtype::bf16(),
                         {8},
                         {{1, {0, 5}, 10, 555}, {0, {5, 3}, 6, 666}}});
    return m;
}

} // namespace

BOOST_AUTO_TEST_SUITE(dist_manifest)

BOOST_AUTO_TEST_CASE(round_trips_through_a_checksummed_file)
{
    ruda::test::temp_dir dir;
    const auto m = sample_manifest();
    const auto written = ruda::write_manifest(dir / "manifest.ruda", m);
    BOOST_REQUIRE(written);
    BOOST_TEST(!std::filesystem::exists(dir / "manifest.ruda.tmp"));
    const auto read = ruda::read_manifest(dir / "manifest.ruda");
    BOOST_REQUIRE(read);
    BOOST_TEST((read.value() == m));
    BOOST_TEST(ruda::rank_file_name(3) == "rank-00003.ruda");
}

BOOST_AUTO_TEST_CASE(a_damaged_or_foreign_file_is_refused)
{
    ruda::test::temp_dir dir;
    BOOST_REQUIRE(ruda::write_manifest(dir / "manifest.ruda", sample_manifest()));
    auto bytes = ruda::test::read_bytes(dir / "manifest.ruda");
    bytes[bytes.size() / 2] ^= 0x40U;
    ruda::test::write_bytes(dir / "manifest.ruda", bytes);
    const auto damaged = ruda::read_manifest(dir / "manifest.ruda");
    BOOST_REQUIRE(!damaged);
    BOOST_TEST(
        (damaged.error() == errc::checksum_mismatch || damaged.error() == errc::malformed_record));

    BOOST_REQUIRE(ruda::save_checkpoint_file(dir / "plain.ruda", ruda::checkpoint{}));
    const auto plain = ruda::read_manifest(dir / "plain.ruda");
    BOOST_TEST(plain.error() == errc::malformed_record);
    BOOST_TEST(says(plain.error(), "is not a distributed checkpoint manifest"));

    BOOST_TEST(ruda::read_manifest(dir / "missing.ruda").error() == errc::io_error);
}

BOOST_AUTO_TEST_CASE(a_manifest_that_does_not_add_up_is_refused_before_any_read)
{
    ruda::test::temp_dir dir;
    const auto refused = [&dir](const ruda::dist_manifest& m, errc code, const char* why) {
        BOOST_TEST_CONTEXT(why)
        {
            BOOST_REQUIRE(ruda::write_manifest(dir / "manifest.ruda", m));
            const auto read = ruda::read_manifest(dir / "manifest.ruda");
            BOOST_REQUIRE(!read);
            BOOST_TEST(read.error() == code);
            BOOST_TEST(says(read.error(), why));
        }
    };
    auto m = sample_manifest();
    m.version = 2;
    refused(m, errc::unsupported_version, "manifest version 2");
    m = sample_manifest();
    m.world_size = 0;
    refused(m, errc::malformed_record, "of no rank");
    m = sample_manifest();
    std::swap(m.tensors[0], m.tensors[1]);
    refused(m, errc::malformed_record, "out of order or listed twice");
    m = sample_manifest();
    m.tensors[2].pieces[1].range = {4, 4};
    m.tensors[2].pieces[1].bytes = 8;
    refused(m, errc::malformed_record, "Parameter 9 (sharded)");
    m = sample_manifest();
    m.tensors[1].pieces[1].rank = 2;
    refused(m, errc::malformed_record, "in a world of 2");
}

BOOST_AUTO_TEST_SUITE_END()
