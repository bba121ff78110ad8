// Distributed checkpoints over MPI: every placement bit for bit, the plan's balance, failures
// reported on every rank with "latest" left alone, and restores onto every other world size.
#include <ruda/dist/dist_checkpoint_manager.hpp>

#include "../support/error_text.hpp"
#include "mpi_test_support.hpp"

#include <algorithm>
#include <numeric>
#include <vector>

using ruda::dtype;
using ruda::errc;
using ruda::param_id;
using ruda::placement;
using ruda::test::world_rank;
using ruda::test::world_size;

namespace {

using ruda::test::says;
constexpr std::size_t sharded_elements = 1001;

// Element i of the sharded tensor is `i`; its slice `[offset, offset + length)`.
ruda::tensor_data global_slice(ruda::element_range r)
{
    std::vector<float> v(r.length);
    std::iota(v.begin(), v.end(), static_cast<float>(r.offset));
    return ruda::tensor_data::from_values(v, {r.length}).value();
}

ruda::tensor_data replicated_values(std::size_t n, double first)
{
    std::vector<double> v(n);
    std::iota(v.begin(), v.end(), first);
    return ruda::tensor_data::from_values(v, {n}).value();
}

ruda::tensor_data rank_values(int rank)
{
    return ruda::tensor_data::from_values(std::vector<float>(4, 1.5F + static_cast<float>(rank)),
                                          {2, 2})
        .value();
}

// What rank `rank` of `ranks` holds: replicated tensors (64 KiB and a small one), its own
// rank-local tensor and its even slice of the sharded one.
std::pair<ruda::checkpoint, ruda::placement_map> rank_state(int rank, int ranks)
{
    const auto slice = ruda::even_shard(sharded_elements, rank, ranks);
    std::vector<ruda::gradient_entry> entries{
        {param_id{1}, dtype::f64(), replicated_values(8192, 10), "big"},
        {param_id{2}, dtype::f64(), replicated_values(3, -3), "small"},
        {param_id{3}, dtype::f32(), rank_values(rank), "local"},
        {param_id{4}, dtype::f32(), global_slice(slice), "shard"},
    };
    ruda::checkpoint contents{ruda::gradients_params_record{std::move(entries)}};
    BOOST_REQUIRE(contents.put("rank", static_cast<std::int32_t>(rank)));
    ruda::placement_map where{{param_id{3}, placement::rank_local()},
                              {param_id{4}, placement::sharded({sharded_elements}, slice)}};
    return {std::move(contents), std::move(where)};
}

ruda::result<ruda::saved_checkpoint> save(ruda::dist_checkpoint_manager& manager,
                                          std::uint64_t step, ruda::checkpoint contents,
                                          ruda::placement_map where)
{
    auto pending = ruda::test::run_collective(
        manager.async_save_record(step, std::move(contents), std::move(where)));
    if (!pending) {
        return pending.error();
    }
    auto saved = pending.value().wait();
    if (!saved) {
        BOOST_TEST_MESSAGE("rank " << world_rank() << ": " << saved.error().message());
    }
    return saved;
}

} // namespace

BOOST_AUTO_TEST_SUITE(mpi_checkpoint)

BOOST_AUTO_TEST_CASE(every_placement_round_trips_with_balanced_writers)
{
    ruda::test::watchdog guard{"mpi round trip", std::chrono::seconds(90)};
    ruda::test::shared_dir dir;
    auto comm = ruda::test::communicator_over(MPI_COMM_WORLD);
    const int rank = world_rank();
    const int size = world_size();
    ruda::dist_checkpoint_manager manager{*comm, dir.path()};
    auto [contents, where] = rank_state(rank, size);
    const auto saved = save(manager, 3, contents, where);
    BOOST_REQUIRE(saved);
    BOOST_TEST((manager.latest_step().value() == std::optional<std::uint64_t>{3}));

    // Each rank wrote about the same bytes: the replicated 64 KiB are spread.
    std::uint64_t bytes = saved.value().bytes;
    std::vector<std::uint64_t> all(static_cast<std::size_t>(size));
    MPI_Allgather(&bytes, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
    const double mean = static_cast<double>(std::accumulate(all.begin(), all.end(), 0ULL)) / size;
    BOOST_TEST(static_cast<double>(*std::max_element(all.begin(), all.end())) <= 1.1 * mean);

    const auto restored = ruda::test::run_collective(manager.load_latest());
    BOOST_REQUIRE(restored);
    BOOST_TEST(restored.value().saved_world_size == static_cast<std::uint32_t>(size));
    BOOST_TEST((restored.value().contents.gradients() == contents.gradients()));
    std::int32_t saved_rank = -1;
    BOOST_TEST(restored.value().contents.get("rank", saved_rank).has_value());
    BOOST_TEST(saved_rank == rank);
}

BOOST_AUTO_TEST_CASE(a_plan_mismatch_is_reported_on_every_rank)
{
    ruda::test::watchdog guard{"mpi plan mismatch", std::chrono::seconds(90)};
    ruda::test::shared_dir dir;
    auto comm = ruda::test::communicator_over(MPI_COMM_WORLD);
    const int rank = world_rank();
    const int last = world_size() - 1;
    ruda::dist_checkpoint_manager manager{*comm, dir.path()};
    std::vector<ruda::gradient_entry> entries{
        {param_id{7}, dtype::f32(),
         ruda::tensor_data::from_values(std::vector<float>(6, 1.0F),
                                        rank == last ? ruda::shape{3, 2} : ruda::shape{2, 3})
             .value(),
         ""}};
    const auto saved =
        save(manager, 1, ruda::checkpoint{ruda::gradients_params_record{entries}}, {});
    if (last == 0) {
        BOOST_TEST(saved.has_value()); // one rank cannot disagree with itself
        return;
    }
    BOOST_REQUIRE(!saved);
    BOOST_TEST(saved.error() == errc::plan_mismatch);
    BOOST_TEST(says(saved.error(), "Parameter 7 is replicated f32 [2, 3] on rank 0 but "
                                   "replicated f32 [3, 2] on rank " +
                                       std::to_string(last)));
    BOOST_TEST(!manager.latest_step().value().has_value());
    BOOST_TEST(!std::filesystem::exists(dir / "step-00000000000000000001"));
}

BOOST_AUTO_TEST_CASE(a_rank_whose_write_fails_stops_the_commit_everywhere)
{
    ruda::test::watchdog guard{"mpi failed write", std::chrono::seconds(90)};
    ruda::test::shared_dir dir;
    auto comm = ruda::test::communicator_over(MPI_COMM_WORLD);
    const int rank = world_rank();
    const int size = world_size();
    const int last = size - 1;
    ruda::test::failing_fsync_ops ops;
    ruda::dist_checkpoint_manager manager{*comm, dir.path(), {.keep_last = 2, .ops = &ops}};
    auto [contents, where] = rank_state(rank, size);
    BOOST_REQUIRE(save(manager, 1, contents, where));

    ops.fail = rank == last;
    const auto failed = save(manager, 2, contents, where);
    BOOST_REQUIRE(!failed);
    BOOST_TEST(failed.error() == errc::io_error);
    BOOST_TEST(
        says(failed.error(), "Step 2 was not committed: rank " + std::to_string(last) + ": "));
    BOOST_TEST(says(failed.error(), "injected fsync failure"));
    BOOST_TEST((manager.latest_step().value() == std::optional<std::uint64_t>{1}));
    BOOST_TEST(!std::filesystem::exists(dir / "step-00000000000000000002/manifest.ruda"));
    const auto restored = ruda::test::run_collective(manager.load_latest());
    BOOST_REQUIRE(restored);
    BOOST_TEST(restored.value().step == 1U);

    ops.fail = false;
    BOOST_REQUIRE(save(manager, 3, contents, where));
    MPI_Barrier(MPI_COMM_WORLD);
    BOOST_TEST(!std::filesystem::exists(dir / "step-00000000000000000002"));
    BOOST_TEST(manager.steps().value() == (std::vector<std::uint64_t>{1, 3}));
}

BOOST_AUTO_TEST_CASE(restores_onto_every_world_size_from_every_other)
{
    ruda::test::watchdog guard{"mpi reshard", std::chrono::seconds(120)};
    ruda::test::shared_dir dir;
    const int rank = world_rank();
    const int size = world_size();
    for (int saved_by = 1; saved_by <= size; ++saved_by) {
        const auto where_saved = dir / ("saved-by-" + std::to_string(saved_by));
        MPI_Comm sub = MPI_COMM_NULL;
        MPI_Comm_split(MPI_COMM_WORLD, rank < saved_by ? 0 : MPI_UNDEFINED, rank, &sub);
        if (sub != MPI_COMM_NULL) {
            auto comm = ruda::test::communicator_over(sub);
            ruda::dist_checkpoint_manager manager{*comm, where_saved};
            auto [contents, where] = rank_state(rank, saved_by);
            BOOST_REQUIRE(save(manager, 1, contents, where));
            comm.reset();
            MPI_Comm_free(&sub);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        for (int loaded_by = 1; loaded_by <= size; ++loaded_by) {
            BOOST_TEST_CONTEXT("saved by " << saved_by << " ranks, loaded by " << loaded_by)
            {
                MPI_Comm_split(MPI_COMM_WORLD, rank < loaded_by ? 0 : MPI_UNDEFINED, rank, &sub);
                if (sub == MPI_COMM_NULL) {
                    continue;
                }
                auto comm = ruda::test::communicator_over(sub);
                ruda::dist_checkpoint_manager manager{*comm, where_saved};
                ruda::dist_restore_options options;
                options.sum_rank_local = saved_by != loaded_by;
                const auto restored = ruda::test::run_collective(manager.load(1, options));
                BOOST_REQUIRE(restored);
                const auto& entries = restored.value().contents.gradients().entries();
                BOOST_REQUIRE(entries.size() == 4U);
                BOOST_TEST((entries[0].data == replicated_values(8192, 10)));
                BOOST_TEST((entries[1].data == replicated_values(3, -3)));
                // Rank-local: its own when the world is the same, else the sum of every rank's.
                float expected = 1.5F + static_cast<float>(rank);
                if (saved_by != loaded_by) {
                    expected = 0;
                    for (int r = 0; r < saved_by; ++r) {
                        expected += 1.5F + static_cast<float>(r);
                    }
                }
                BOOST_TEST((entries[2].data ==
                            ruda::tensor_data::from_values(std::vector<float>(4, expected), {2, 2})
                                .value()));
                const auto slice = ruda::even_shard(sharded_elements, rank, loaded_by);
                BOOST_TEST((entries[3].data == global_slice(slice)));
                BOOST_TEST((restored.value().slices.at(param_id{4}) == slice));
                if (saved_by != loaded_by) {
                    const auto refused = ruda::test::run_collective(manager.load(1));
                    BOOST_TEST(refused.error() == errc::world_size_mismatch);
                    BOOST_TEST(says(refused.error(), "Parameter 3 is rank-local, saved by " +
                                                         std::to_string(saved_by) + " ranks"));
                }
                comm.reset();
                MPI_Comm_free(&sub);
            }
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
}

BOOST_AUTO_TEST_SUITE_END()
