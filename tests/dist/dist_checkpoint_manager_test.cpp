// The distributed manager in a world of one (solo_communicator): the commit, the restore of
// every placement, failures that leave "latest" alone, retention. The mpirun suites run the
// same manager over MPI with 1, 2 and 4 ranks.
#include <ruda/backend/cpu_backend.hpp>
#include <ruda/dist/dist_checkpoint_manager.hpp>

#include "../checkpoint/checkpoint_test_support.hpp"
#include "../support/async_test.hpp"

#include <boost/test/unit_test.hpp>

#include <numeric>
#include <string>
#include <vector>

using ruda::dtype;
using ruda::errc;
using ruda::param_id;
using ruda::placement;

namespace {

ruda::tensor_data counting_floats(std::size_t n, float first, ruda::shape dims = {})
{
    std::vector<float> v(n);
    std::iota(v.begin(), v.end(), first);
    return ruda::tensor_data::from_values(v, dims.empty() ? ruda::shape{n} : dims).value();
}

ruda::checkpoint sample_from(float first)
{
    std::vector<ruda::gradient_entry> entries;
    entries.push_back({param_id{1}, dtype::f32(), counting_floats(12, first, {3, 4}), "fc.weight"});
    entries.push_back({param_id{2}, dtype::f32(), counting_floats(5, first + 100), ""});
    entries.push_back({param_id{3}, dtype::f32(), counting_floats(8, first + 200), ""});
    ruda::checkpoint c{ruda::gradients_params_record{std::move(entries)}};
    BOOST_REQUIRE(c.put("step", std::uint64_t{7}));
    return c;
}

ruda::placement_map placements()
{
    return {{param_id{2}, placement::rank_local()}, {param_id{3}, placement::sharded({8}, {0, 8})}};
}

template <class T>
ruda::result<T> run(boost::asio::io_context& io, boost::asio::awaitable<ruda::result<T>> op)
{
    auto out = ruda::test::run_to_end(io, std::move(op));
    BOOST_REQUIRE(out.has_value());
    return std::move(*out);
}

ruda::result<ruda::saved_checkpoint> save(boost::asio::io_context& io,
                                          ruda::dist_checkpoint_manager& manager,
                                          std::uint64_t step, ruda::checkpoint contents)
{
    auto pending = run(io, manager.async_save_record(step, std::move(contents), placements()));
    if (!pending) {
        return pending.error();
    }
    return run(
        io,
        [](ruda::pending_save p) -> boost::asio::awaitable<ruda::result<ruda::saved_checkpoint>> {
            co_return co_await p.async_wait(boost::asio::use_awaitable);
        }(pending.value()));
}

} // namespace

BOOST_AUTO_TEST_SUITE(dist_checkpoint_manager)

BOOST_AUTO_TEST_CASE(every_placement_round_trips_bit_for_bit)
{
    ruda::test::watchdog guard{"dist round trip"};
    boost::asio::io_context io;
    ruda::test::temp_dir dir;
    ruda::solo_communicator world;
    ruda::dist_checkpoint_manager manager{world, dir.path()};
    const auto saved = save(io, manager, 5, sample_from(1));
    BOOST_REQUIRE(saved);
    BOOST_TEST(saved.value().step == 5U);
    BOOST_TEST(std::filesystem::exists(dir / "step-00000000000000000005/manifest.ruda"));
    BOOST_TEST(std::filesystem::exists(dir / "step-00000000000000000005/rank-00000.ruda"));
    BOOST_TEST((manager.latest_step().value() == std::optional<std::uint64_t>{5}));

    const auto restored = run(io, manager.load_latest());
    BOOST_REQUIRE(restored);
    BOOST_TEST(restored.value().step == 5U);
    BOOST_TEST(restored.value().saved_world_size == 1U);
    const auto expected = sample_from(1);
    BOOST_TEST((restored.value().contents.gradients() == expected.gradients()));
    std::uint64_t step = 0;
    BOOST_TEST(restored.value().contents.get("step", step).has_value());
    BOOST_TEST(step == 7U);
    BOOST_TEST((restored.value().slices.at(param_id{3}) == ruda::element_range{0, 8}));

    // A slice of the sharded tensor, asked for explicitly.
    ruda::dist_restore_options part;
    part.slices[param_id{3}] = {2, 3};
    const auto sliced = run(io, manager.load(5, part));
    BOOST_REQUIRE(sliced);
    const auto& entry = sliced.value().contents.gradients().entries().at(2);
    BOOST_TEST((entry.data == counting_floats(3, 203)));
    part.slices[param_id{3}] = {6, 3};
    BOOST_TEST(run(io, manager.load(5, part)).error() == errc::shape_mismatch);
}

BOOST_AUTO_TEST_CASE(snapshots_gradients_through_a_backend)
{
    ruda::test::watchdog guard{"dist snapshot"};
    boost::asio::io_context io;
    ruda::test::temp_dir dir;
    ruda::solo_communicator world;
    ruda::dist_checkpoint_manager manager{world, dir.path(), {.keep_last = 2}};
    ruda::gradients_params grads;
    grads.insert<ruda::cpu_backend>(
        param_id{4}, ruda::cpu_backend::float_from_data(counting_floats(6, 0.5F), {}).value());
    auto pending = run(io, manager.async_save<ruda::cpu_backend>(1, grads, {}));
    BOOST_REQUIRE(pending);
    BOOST_REQUIRE(pending.value().wait());
    const auto restored = run(io, manager.load(1));
    BOOST_REQUIRE(restored);
    BOOST_TEST((restored.value().contents.gradients().entries().at(0).data == counting_floats(6, 0.5F)));
}

BOOST_AUTO_TEST_CASE(a_failed_write_commits_nothing_and_the_next_save_cleans_it)
{
    ruda::test::watchdog guard{"dist failed write"};
    boost::asio::io_context io;
    ruda::test::temp_dir dir;
    ruda::solo_communicator world;
    ruda::test::failing_fsync_ops ops;
    ruda::dist_checkpoint_manager manager{world, dir.path(), {.keep_last = 2, .ops = &ops}};
    BOOST_REQUIRE(save(io, manager, 1, sample_from(1)));
    ops.fail = true;
    const auto failed = save(io, manager, 2, sample_from(2));
    BOOST_REQUIRE(!failed);
    BOOST_TEST(failed.error() == errc::io_error);
    BOOST_TEST(failed.error().message().find("Step 2 was not committed: rank 0: ") !=
               std::string::npos);
    BOOST_TEST(failed.error().message().find("injected fsync failure") != std::string::npos);
    BOOST_TEST((manager.latest_step().value() == std::optional<std::uint64_t>{1}));
    BOOST_TEST(manager.steps().value() == std::vector<std::uint64_t>{1});
    BOOST_TEST(!std::filesystem::exists(dir / "step-00000000000000000002/manifest.ruda"));
    const auto still = run(io, manager.load_latest());
    BOOST_REQUIRE(still);
    BOOST_TEST((still.value().contents.gradients() == sample_from(1).gradients()));

    ops.fail = false;
    BOOST_REQUIRE(save(io, manager, 3, sample_from(3)));
    BOOST_TEST(!std::filesystem::exists(dir / "step-00000000000000000002"));
    BOOST_TEST(manager.steps().value() == (std::vector<std::uint64_t>{1, 3}));
    BOOST_REQUIRE(save(io, manager, 4, sample_from(4)));
    BOOST_TEST(manager.steps().value() == (std::vector<std::uint64_t>{3, 4}));
    BOOST_TEST(!std::filesystem::exists(dir / "step-00000000000000000001"));
}

BOOST_AUTO_TEST_CASE(a_committed_step_is_never_written_over)
{
    ruda::test::watchdog guard{"dist committed step"};
    boost::asio::io_context io;
    ruda::test::temp_dir dir;
    ruda::solo_communicator world;
    ruda::dist_checkpoint_manager manager{world, dir.path()};
    BOOST_REQUIRE(save(io, manager, 1, sample_from(1)));
    const auto again = save(io, manager, 1, sample_from(9));
    BOOST_REQUIRE(!again);
    BOOST_TEST(again.error().message().find("Step 1 is committed already") != std::string::npos);
    const auto restored = run(io, manager.load(1));
    BOOST_REQUIRE(restored);
    BOOST_TEST((restored.value().contents.gradients() == sample_from(1).gradients()));
}

BOOST_AUTO_TEST_CASE(loads_that_cannot_succeed_say_why)
{
    ruda::test::watchdog guard{"dist load failures"};
    boost::asio::io_context io;
    ruda::test::temp_dir dir;
    ruda::solo_communicator world;
    ruda::dist_checkpoint_manager manager{world, dir.path()};
    BOOST_TEST(run(io, manager.load_latest()).error() == errc::not_found);
    BOOST_REQUIRE(save(io, manager, 1, sample_from(1)));
    // A rank file swapped for another save's: the manifest's checksums tell.
    ruda::dist_checkpoint_manager other{world, dir / "other"};
    BOOST_REQUIRE(save(io, other, 1, sample_from(50)));
    std::filesystem::copy_file(dir / "other/step-00000000000000000001/rank-00000.ruda",
                               dir / "step-00000000000000000001/rank-00000.ruda",
                               std::filesystem::copy_options::overwrite_existing);
    const auto swapped = run(io, manager.load(1));
    BOOST_REQUIRE(!swapped);
    BOOST_TEST(swapped.error() == errc::checksum_mismatch);
    BOOST_TEST(swapped.error().message().find("Parameter 1 in ") != std::string::npos);
    std::filesystem::remove(dir / "step-00000000000000000001/rank-00000.ruda");
    BOOST_TEST(run(io, manager.load(1)).error() == errc::io_error);
}

BOOST_AUTO_TEST_SUITE_END()
