#include "../support/error_text.hpp"

#include <ruda/dist/save_plan.hpp>

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

using ruda::declared_tensor;
using ruda::dtype;
using ruda::errc;
using ruda::param_id;
using ruda::placement;

namespace {

using ruda::test::says;

declared_tensor f32(std::uint64_t id, ruda::shape dims, placement where = placement::replicated())
{
    std::uint64_t n = 1;
    for (const auto d : dims) {
        n *= d;
    }
    return {param_id{id}, dtype::f32(), dtype::f32(), std::move(dims), n * 4, std::move(where)};
}

// Every rank declares the same replicated tensors.
std::vector<std::vector<declared_tensor>> everywhere(const std::vector<declared_tensor>& tensors,
                                                     int ranks)
{
    return std::vector<std::vector<declared_tensor>>(static_cast<std::size_t>(ranks), tensors);
}

} // namespace

BOOST_AUTO_TEST_SUITE(dist_save_plan)

BOOST_AUTO_TEST_CASE(even_shard_tiles_any_count_over_any_ranks)
{
    for (std::uint64_t n : {0U, 1U, 7U, 8U, 1001U}) {
        for (int ranks = 1; ranks <= 5; ++ranks) {
            std::uint64_t next = 0;
            for (int r = 0; r < ranks; ++r) {
                const auto s = ruda::even_shard(n, r, ranks);
                BOOST_TEST(s.offset == next);
                BOOST_TEST(s.length <= n / static_cast<std::uint64_t>(ranks) + 1);
                next = s.end();
            }
            BOOST_TEST(next == n);
        }
    }
}

BOOST_AUTO_TEST_CASE(replicated_bytes_are_spread_within_a_tenth_of_the_mean)
{
    std::mt19937_64 random{42};
    for (int ranks = 1; ranks <= 8; ++ranks) {
        for (int trial = 0; trial < 20; ++trial) {
            std::vector<declared_tensor> tensors;
            const int count = 1 + static_cast<int>(random() % 40);
            for (int i = 0; i < count; ++i) {
                tensors.push_back(f32(static_cast<std::uint64_t>(i), {1 + random() % 5000}));
            }
            const auto plan = ruda::make_save_plan(everywhere(tensors, ranks));
            BOOST_REQUIRE(plan);
            BOOST_TEST(plan.value().world_size == static_cast<std::uint32_t>(ranks));
            BOOST_TEST(plan.value().imbalance() <= 1.1);
            for (const auto& t : plan.value().tensors) {
                BOOST_TEST(ruda::validate_layout(t, plan.value().world_size).has_value());
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(one_large_tensor_is_cut_over_every_rank)
{
    const auto plan = ruda::make_save_plan(everywhere({f32(1, {1000, 1000})}, 4));
    BOOST_REQUIRE(plan);
    const auto& pieces = plan.value().tensors.at(0).pieces;
    BOOST_TEST(pieces.size() == 4U);
    for (std::uint32_t r = 0; r < 4; ++r) {
        BOOST_TEST(pieces[r].rank == r);
        BOOST_TEST(pieces[r].range.length == 250000U);
        BOOST_TEST(pieces[r].bytes == 1000000U);
    }
    BOOST_TEST(plan.value().imbalance() == 1.0);
}

BOOST_AUTO_TEST_CASE(replicated_bytes_fill_around_rank_local_and_sharded_ones)
{
    std::vector<std::vector<declared_tensor>> declared(3);
    for (std::uint32_t r = 0; r < 3; ++r) {
        declared[r].push_back(f32(1, {1000}));
        declared[r].push_back(f32(2, {400}, placement::sharded({1200}, {400 * r, 400})));
        if (r == 0) { // rank 0 alone holds a large rank-local tensor
            declared[r].push_back(f32(3, {3000}, placement::rank_local()));
        }
    }
    const auto plan = ruda::make_save_plan(declared);
    BOOST_REQUIRE(plan);
    const auto bytes = plan.value().bytes_per_rank();
    // Rank 0 has 13600 bytes of its own already: the 4000 replicated bytes go to the others.
    BOOST_TEST(bytes[0] == 13600U);
    BOOST_TEST(bytes[1] == 3600U);
    BOOST_TEST(bytes[2] == 3600U);
    const auto& sharded = plan.value().tensors.at(1);
    BOOST_TEST(sharded.shape == ruda::shape{1200});
    BOOST_TEST(sharded.pieces.size() == 3U);
    BOOST_TEST(plan.value().tensors.at(2).pieces.size() == 1U);
}

BOOST_AUTO_TEST_CASE(a_quantized_tensor_is_never_cut)
{
    const auto q = dtype::qfloat(ruda::quant_scheme{});
    declared_tensor big{param_id{5}, dtype::f32(), q, {4096}, 4096 + 4, placement::replicated()};
    const auto plan = ruda::make_save_plan(everywhere({big, f32(6, {100})}, 4));
    BOOST_REQUIRE(plan);
    BOOST_TEST(plan.value().tensors.at(0).pieces.size() == 1U);
    BOOST_TEST(plan.value().tensors.at(0).pieces[0].bytes == 4100U);
}

BOOST_AUTO_TEST_CASE(ranks_that_disagree_are_refused_naming_the_parameter_and_ranks)
{
    auto declared = everywhere({f32(7, {2, 3}), f32(8, {4})}, 3);
    declared[2][0] = f32(7, {3, 2});
    auto plan = ruda::make_save_plan(declared);
    BOOST_REQUIRE(!plan);
    BOOST_TEST(plan.error() == errc::plan_mismatch);
    BOOST_TEST(says(plan.error(), "Parameter 7 is replicated f32 [2, 3] on rank 0 but "
                                  "replicated f32 [3, 2] on rank 2"));

    declared = everywhere({f32(7, {4})}, 2);
    declared[1][0].stored = dtype::f16();
    declared[1][0].bytes = 8;
    BOOST_TEST(ruda::make_save_plan(declared).error() == errc::plan_mismatch);

    declared = everywhere({f32(7, {4})}, 2);
    declared[1][0].where = placement::rank_local();
    plan = ruda::make_save_plan(declared);
    BOOST_TEST(plan.error() == errc::plan_mismatch);
    BOOST_TEST(says(plan.error(), "rank_local f32 [4] on rank 1"));

    declared = everywhere({f32(7, {4})}, 3);
    declared[1].clear();
    plan = ruda::make_save_plan(declared);
    BOOST_TEST(plan.error() == errc::plan_mismatch);
    BOOST_TEST(says(plan.error(), "Parameter 7 is replicated but rank 1 does not have it"));

    declared = everywhere({f32(7, {4}), f32(7, {4})}, 1);
    BOOST_TEST(ruda::make_save_plan(declared).error() == errc::duplicate_param_id);
}

BOOST_AUTO_TEST_CASE(shards_that_overlap_leave_a_gap_or_disagree_with_their_data_are_refused)
{
    const auto shard = [](std::uint64_t offset, std::uint64_t length) {
        return f32(9, {length}, placement::sharded({10}, {offset, length}));
    };
    std::vector<std::vector<declared_tensor>> declared{{shard(0, 6)}, {shard(5, 5)}};
    auto plan = ruda::make_save_plan(declared);
    BOOST_TEST(plan.error() == errc::plan_mismatch);
    BOOST_TEST(says(plan.error(), "the slice of rank 1 starts at element 5 with 5 elements where "
                                  "6 of 10 are covered"));

    declared = {{shard(0, 4)}, {shard(5, 5)}};
    BOOST_TEST(ruda::make_save_plan(declared).error() == errc::plan_mismatch);

    declared = {{shard(0, 4)}, {shard(4, 4)}};
    plan = ruda::make_save_plan(declared);
    BOOST_TEST(says(plan.error(), "the slices cover 8 of 10 elements"));

    declared = {{shard(0, 5)}, {shard(5, 5)}};
    declared[1][0].shape = {4};
    plan = ruda::make_save_plan(declared);
    BOOST_TEST(plan.error() == errc::plan_mismatch);
    BOOST_TEST(says(plan.error(), "a slice of 5 elements holds 4 elements"));

    declared = {{shard(0, 5)}, {shard(5, 5)}};
    BOOST_TEST(ruda::make_save_plan(declared).has_value());
}

BOOST_AUTO_TEST_CASE(validate_layout_refuses_what_a_hostile_manifest_could_hold)
{
    ruda::tensor_layout t{param_id{3},  ruda::placement_kind::replicated,
                          dtype::f32(), dtype::f32(),
                          {10},         {{0, {0, 6}, 24, 0}, {1, {6, 4}, 16, 0}}};
    BOOST_TEST(ruda::validate_layout(t, 2).has_value());
    const auto refused = [](const ruda::tensor_layout& bad, std::uint32_t world, const char* why) {
        const auto r = ruda::validate_layout(bad, world);
        BOOST_TEST_CONTEXT(why)
        {
            BOOST_REQUIRE(!r);
            BOOST_TEST(r.error() == errc::malformed_record);
            BOOST_TEST(says(r.error(), why));
            BOOST_TEST(says(r.error(), "Parameter 3"));
        }
    };
    refused(t, 1, "in rank 1's file, in a world of 1");
    auto bad = t;
    bad.pieces[1].range = {5, 5};
    refused(bad, 2, "must tile it exactly once");
    bad = t;
    bad.pieces[1].range = {6, 3};
    bad.pieces[1].bytes = 12;
    refused(bad, 2, "the pieces cover 9 of 10 elements");
    bad = t;
    bad.pieces[1].bytes = 17;
    refused(bad, 2, "cannot be cut");
    bad = t;
    bad.pieces.clear();
    refused(bad, 2, "no piece");
    bad = t;
    bad.shape = {std::size_t{1} << 40U, std::size_t{1} << 40U};
    refused(bad, 2, "overflow");
    bad = t;
    bad.kind = ruda::placement_kind::rank_local;
    refused(bad, 2, "one whole tensor per rank");
}

BOOST_AUTO_TEST_SUITE_END()
