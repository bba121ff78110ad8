// Tensor groups in a checkpoint file: named groups of tensors (weights, gradients, optimizer
// state with integer step counts) round trip with every payload checksummed, ids shared
// between groups, loads of some groups and some names, the run identity, a checkpoint of
// gradients alone written as before groups existed, and every bad name or table refused.
#include "checkpoint_test_support.hpp"

#include <ruda/checkpoint/checkpoint.hpp>

#include <boost/test/unit_test.hpp>

namespace {

using ruda::errc;
using ruda::test::temp_dir;

ruda::gradient_entry f32_entry(const std::string& name, float value, ruda::shape dims = {2, 3})
{
    std::size_t n = 1;
    for (const std::size_t d : dims) {
        n *= d;
    }
    return {ruda::param_id::from_name(name), ruda::dtype::f32(),
            ruda::tensor_data::from_values(std::vector<float>(n, value), dims).value(), name};
}

ruda::gradient_entry counter(const std::string& name, std::int64_t value)
{
    return {ruda::param_id::from_name(name), ruda::dtype::i64(),
            ruda::tensor_data::from_values(std::vector<std::int64_t>{value}, {}).value(), name};
}

// A trainer's state: gradients and weights of two parameters under the same ids, and an
// optimizer's state with its step counts.
ruda::checkpoint training_state()
{
    ruda::checkpoint c{ruda::gradients_params_record{{f32_entry("fc1.weight", 0.5F),
                                                      f32_entry("fc2.weight", -0.5F, {3})}}};
    c.put_group("weights", ruda::gradients_params_record{{f32_entry("fc1.weight", 1.0F),
                                                          f32_entry("fc2.weight", 2.0F, {3})}})
        .value();
    c.put_group("optimizer",
                ruda::gradients_params_record{{f32_entry("fc1.weight.exp_avg", 0.25F),
                                               counter("fc1.weight.step", 7),
                                               f32_entry("fc2.weight.exp_avg", 0.75F, {3}),
                                               counter("fc2.weight.step", 7)}})
        .value();
    c.put("step", std::uint64_t{42}).value();
    return c;
}

void expect_error(const ruda::result<ruda::checkpoint>& loaded, errc code, const std::string& text)
{
    BOOST_REQUIRE(!loaded);
    BOOST_TEST(loaded.error() == code, loaded.error().message());
    BOOST_TEST(loaded.error().message().find(text) != std::string::npos, loaded.error().message());
}

std::vector<std::string> names_in(const ruda::gradients_params_record& record)
{
    std::vector<std::string> names;
    for (const auto& e : record.entries()) {
        names.push_back(e.name);
    }
    std::sort(names.begin(), names.end());
    return names;
}

} // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_groups)

BOOST_AUTO_TEST_CASE(groups_round_trip_with_their_ids_names_and_checksums)
{
    const temp_dir dir;
    const auto path = dir / "state.ruda";
    const auto saved = training_state();
    BOOST_REQUIRE(ruda::save_checkpoint_file(path, saved));
    const auto bytes = ruda::test::read_bytes(path);
    BOOST_TEST((bytes[12] & ruda::detail::flag_tensor_groups) != 0); // older readers refuse it

    const auto loaded = ruda::load_checkpoint_file(path).value();
    BOOST_TEST((loaded == saved));
    BOOST_REQUIRE_EQUAL(loaded.groups().size(), 3U);
    BOOST_TEST(loaded.groups()[1].name == "weights");
    BOOST_TEST(loaded.groups()[2].name == "optimizer");

    const auto reader = ruda::checkpoint_reader::open(path).value();
    const auto& index = reader.index();
    BOOST_REQUIRE_EQUAL(index.groups.size(), 3U);
    BOOST_TEST(index.groups[0].name == "gradients");
    BOOST_TEST(index.groups[1].first == 2U);
    BOOST_TEST(index.groups[2].count == 4U);
    BOOST_TEST(index.group_of(3) == "weights");
    BOOST_TEST(index.entries[0].id == index.entries[2].id); // one parameter, two groups
    // Every tensor of every group has its checksum: one changed byte in a step count fails.
    const auto step = std::find_if(index.entries.begin(), index.entries.end(),
                                   [](const auto& e) { return e.name == "fc2.weight.step"; });
    BOOST_REQUIRE(step != index.entries.end());
    auto damaged = bytes;
    damaged[step->payload.offset] ^= 1U;
    ruda::test::write_bytes(path, damaged);
    expect_error(ruda::load_checkpoint_file(path), errc::checksum_mismatch,
                 "parameter " + ruda::to_string(step->id));
}

// A checkpoint of 100,000 tensors must not hold a second copy of their entries while it is
// built: a group list made from a braced list copied them (its elements are const).
BOOST_AUTO_TEST_CASE(records_are_moved_into_their_groups_not_copied)
{
    ruda::gradients_params_record gradients{{f32_entry("fc1.weight", 0.5F)}};
    ruda::gradients_params_record weights{{f32_entry("fc1.weight", 1.0F)}};
    const auto* gradient_entries = gradients.entries().data();
    const auto* weight_entries = weights.entries().data();
    ruda::checkpoint c{std::move(gradients)};
    c.put_group("weights", std::move(weights)).value();
    BOOST_TEST(c.gradients().entries().data() == gradient_entries);
    BOOST_TEST(c.group("weights")->entries().data() == weight_entries);
}

BOOST_AUTO_TEST_CASE(a_checkpoint_of_gradients_alone_is_written_as_before_groups)
{
    const temp_dir dir;
    ruda::checkpoint plain{ruda::test::valid_sample()};
    plain.put("step", 3).value();
    ruda::checkpoint explicit_group;
    explicit_group.put_group("gradients", ruda::test::valid_sample()).value();
    explicit_group.put("step", 3).value();
    BOOST_REQUIRE(ruda::save_checkpoint_file(dir / "plain.ruda", plain));
    BOOST_REQUIRE(ruda::save_checkpoint_file(dir / "group.ruda", explicit_group));
    const auto bytes = ruda::test::read_bytes(dir / "plain.ruda");
    BOOST_TEST(ruda::test::le64(bytes, 8) == 1U); // format version 1, no flag
    BOOST_TEST(bytes == ruda::test::read_bytes(dir / "group.ruda"));
    const auto loaded = ruda::load_checkpoint_file(dir / "plain.ruda").value();
    BOOST_TEST(loaded.groups().size() == 1U);
    BOOST_TEST(!loaded.identity());
}

BOOST_AUTO_TEST_CASE(loads_take_some_groups_and_some_names)
{
    const temp_dir dir;
    const auto path = dir / "state.ruda";
    BOOST_REQUIRE(ruda::save_checkpoint_file(path, training_state()));

    const auto weights = ruda::load_checkpoint_file(path, {.only_groups = {{"weights"}}}).value();
    BOOST_TEST(weights.groups().size() == 2U); // "gradients" is always there, empty here
    BOOST_TEST(weights.gradients().entries().empty());
    BOOST_TEST(weights.group("weights")->entries().size() == 2U);
    BOOST_TEST(weights.group("optimizer") == nullptr);
    std::uint64_t step = 0;
    BOOST_TEST(weights.get("step", step).has_value());
    BOOST_TEST(step == 42U);

    // "fc1" selects fc1.weight in each group, and its optimizer state under it.
    const auto fc1 = ruda::load_checkpoint_file(path, {.only_names = {{"fc1"}}}).value();
    BOOST_TEST(names_in(fc1.gradients()) == std::vector<std::string>{"fc1.weight"});
    BOOST_TEST(names_in(*fc1.group("optimizer")) ==
               (std::vector<std::string>{"fc1.weight.exp_avg", "fc1.weight.step"}));
    const auto exact = ruda::load_checkpoint_file(
        path, {.only_groups = {{"optimizer"}}, .only_names = {{"fc2.weight.step"}}});
    BOOST_TEST(names_in(*exact.value().group("optimizer")) ==
               std::vector<std::string>{"fc2.weight.step"});

    // Ids select across groups: the weight and the gradient of one parameter.
    const auto id = ruda::param_id::from_name("fc2.weight");
    const auto by_id = ruda::load_checkpoint_file(path, {.only_ids = {{id}}}).value();
    BOOST_TEST(by_id.gradients().entries().size() == 1U);
    BOOST_TEST(by_id.group("weights")->entries().size() == 1U);
    BOOST_TEST(by_id.group("optimizer")->entries().empty());

    expect_error(ruda::load_checkpoint_file(path, {.only_groups = {{"scheduler"}}}),
                 errc::not_found, "has no group scheduler");
    expect_error(ruda::load_checkpoint_file(path, {.only_names = {{"fc"}}}),
                 errc::missing_gradient, "has no tensor named fc");
    expect_error(ruda::load_checkpoint_file(
                     path, {.only_groups = {{"optimizer"}}, .only_ids = {{id}}}),
                 errc::missing_gradient, "parameter " + ruda::to_string(id));
}

BOOST_AUTO_TEST_CASE(group_names_and_contents_are_checked_where_made_and_at_saving)
{
    ruda::checkpoint c;
    for (const std::string& bad : {std::string{}, std::string(256, 'g'), std::string{"caf\xe9"}}) {
        const auto put = c.put_group(bad, {});
        BOOST_REQUIRE(!put);
        BOOST_TEST(put.error() == errc::malformed_record);
        BOOST_TEST(put.error().message().find("A group name") == 0U, put.error().message());
    }
    BOOST_TEST(c.put_group(std::string(255, 'g'), {}).has_value());
    BOOST_TEST(c.put_group("weights", ruda::gradients_params_record{{f32_entry("a", 1.0F)}}).has_value());
    BOOST_TEST(c.put_group("weights", ruda::gradients_params_record{{f32_entry("b", 1.0F)}}).has_value());
    BOOST_TEST(names_in(*c.group("weights")) == std::vector<std::string>{"b"}); // replaced
    BOOST_TEST(c.take_group("weights").value().entries().size() == 1U);
    BOOST_TEST(c.group("weights") == nullptr);
    BOOST_TEST(c.take_group("weights").error() == errc::not_found);

    const temp_dir dir;
    const auto refused = [&](ruda::gradients_params_record group, errc code,
                             const std::string& text, std::string name = "weights") {
        ruda::checkpoint state = training_state();
        state.put_group(std::move(name), std::move(group)).value();
        const auto saved = ruda::save_checkpoint_file(dir / "bad.ruda", state);
        BOOST_REQUIRE(!saved);
        BOOST_TEST(saved.error() == code, saved.error().message());
        BOOST_TEST(saved.error().message().find(text) != std::string::npos,
                   saved.error().message());
        BOOST_TEST(!std::filesystem::exists(dir / "bad.ruda"));
    };
    refused(ruda::gradients_params_record{{f32_entry("a", 1.0F), f32_entry("a", 2.0F)}},
            errc::duplicate_param_id, "Group weights: Duplicate");
    auto twice = f32_entry("b", 1.0F);
    twice.id = ruda::param_id{5};
    refused(ruda::gradients_params_record{{f32_entry("b", 1.0F), twice}}, errc::malformed_record,
            "have the same name b");
    // Integers are for the other groups; gradients are floats (or quantized).
    refused(ruda::gradients_params_record{{counter("fc1.weight.step", 1)}}, errc::invalid_dtype,
            "Invalid gradient dtype", "gradients");
    auto mixed = counter("n", 1);
    mixed.dtype = ruda::dtype::i32(); // an integer stored as another: never converted
    refused(ruda::gradients_params_record{{mixed}}, errc::invalid_dtype, "Group weights");
}

BOOST_AUTO_TEST_CASE(forged_group_tables_are_refused)
{
    const temp_dir dir;
    const auto path = dir / "state.ruda";
    BOOST_REQUIRE(ruda::save_checkpoint_file(path, training_state()));
    const auto whole = ruda::test::read_bytes(path);
    const auto forge = [&](const std::function<void(ruda::checkpoint_index&)>& edit) {
        ruda::test::write_bytes(path, whole);
        auto index = ruda::checkpoint_reader::open(path).value().index();
        edit(index);
        ruda::test::write_bytes(
            path, ruda::test::reframe(whole, ruda::detail::encode_header(index),
                                      [&](ruda::detail::frame& f) {
                                          f.flags = ruda::detail::flags_of(index);
                                      }));
    };
    forge([](auto& i) { i.groups[2].name = "weights"; });
    expect_error(ruda::load_checkpoint_file(path), errc::malformed_record,
                 "two groups named weights");
    forge([](auto& i) { i.groups[1].count = 3; });
    expect_error(ruda::load_checkpoint_file(path), errc::malformed_record,
                 "groups hold more than its 8 entries");
    forge([](auto& i) { i.groups[2].count = 1; });
    expect_error(ruda::load_checkpoint_file(path), errc::malformed_record,
                 "groups hold 5 of its 8 entries");
    forge([](auto& i) { i.groups[1].name = "caf\xe9"; });
    expect_error(ruda::load_checkpoint_file(path), errc::malformed_record, "not UTF-8");
    forge([](auto& i) { i.groups[1].name = std::string(256, 'w'); });
    expect_error(ruda::load_checkpoint_file(path), errc::malformed_record,
                 "a name of invalid length 256");
    forge([](auto& i) { i.entries[2].name = i.entries[3].name; }); // within weights
    expect_error(ruda::load_checkpoint_file(path), errc::malformed_record,
                 "group weights: Parameters");
    forge([](auto& i) { i.entries[3].stored = ruda::dtype::i32(); }); // weights: i32 for f32
    expect_error(ruda::load_checkpoint_file(path), errc::invalid_dtype, "group weights");
    // A groups table behind no flag: the header does not read as one.
    ruda::test::write_bytes(path, whole);
    ruda::test::rewrite(path, [](auto&) {}, [](auto& f) { f.flags = 0; });
    BOOST_TEST(!ruda::load_checkpoint_file(path));
}

BOOST_AUTO_TEST_CASE(the_run_identity_is_recorded_and_checked)
{
    const temp_dir dir;
    ruda::checkpoint c = training_state();
    BOOST_TEST(c.set_identity({"run-7f3a", 42}).has_value());
    BOOST_REQUIRE(ruda::save_checkpoint_file(dir / "a.ruda", c));
    const auto reader = ruda::checkpoint_reader::open(dir / "a.ruda").value();
    BOOST_REQUIRE(reader.index().identity);
    BOOST_TEST(reader.index().identity->run_id == "run-7f3a");
    BOOST_TEST(reader.index().identity->step == 42U);
    BOOST_TEST((ruda::load_checkpoint_file(dir / "a.ruda").value().identity() == c.identity()));

    // The save's own identity wins over the checkpoint's, without copying it.
    BOOST_REQUIRE(ruda::save_checkpoint_file(dir / "b.ruda", c,
                                             {.identity = ruda::run_identity{"other", 43}}));
    BOOST_TEST(ruda::load_checkpoint_file(dir / "b.ruda").value().identity()->run_id == "other");

    for (const std::string& bad : {std::string{}, std::string(129, 'r'), std::string{"a\nb"},
                                  std::string{"caf\xe9"}}) {
        BOOST_TEST(c.set_identity({bad, 1}).error() == errc::malformed_record);
        const auto saved = ruda::save_checkpoint_file(dir / "c.ruda", c,
                                                      {.identity = ruda::run_identity{bad, 1}});
        BOOST_TEST(saved.error() == errc::malformed_record);
        BOOST_TEST(!std::filesystem::exists(dir / "c.ruda"));
    }
    BOOST_TEST(ruda::generate_run_id().size() == 32U);
    BOOST_TEST(ruda::generate_run_id() != ruda::generate_run_id());
}

BOOST_AUTO_TEST_SUITE_END()
