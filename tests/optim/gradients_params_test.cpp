// gradients_params as a container and param_id: replacement, backend tags that never crash,
// sorted ids.
#include <ruda/backend/async_backend.hpp>
#include <ruda/backend/cpu_backend.hpp>
#include <ruda/optim/gradients_params.hpp>

#include <boost/test/unit_test.hpp>

#include <set>
#include <sstream>
#include <unordered_set>

namespace {

using cpu = ruda::cpu_backend;

ruda::tensor_primitive<cpu> cpu_grad(float value)
{
    auto data = ruda::tensor_data::from_values(std::vector<float>{value}, {1}).value();
    return cpu::float_from_data(std::move(data), {}).value();
}

float value_of(const ruda::tensor_primitive<cpu>& tensor)
{
    return std::get<cpu::float_tensor>(tensor).data().values<float>().value()[0];
}

} // namespace

BOOST_AUTO_TEST_SUITE(optim_container)

BOOST_AUTO_TEST_CASE(param_ids)
{
    const ruda::param_id id{42};
    BOOST_TEST(id.val() == 42U);
    BOOST_TEST(ruda::to_string(id) == "42");
    std::ostringstream written;
    written << id;
    BOOST_TEST(written.str() == "42");
    BOOST_TEST(id == ruda::param_id{42}); // printable: BOOST_TEST shows both sides
    BOOST_TEST((ruda::param_id{1} < ruda::param_id{2}));
    std::set<std::uint64_t> generated;
    for (int i = 0; i < 64; ++i) {
        generated.insert(ruda::param_id::generate().val());
    }
    BOOST_TEST(generated.size() == 64U);
    const std::unordered_set<ruda::param_id> hashed{ruda::param_id{3}, ruda::param_id{3}};
    BOOST_TEST(hashed.size() == 1U);
}

BOOST_AUTO_TEST_CASE(an_empty_record_is_default_constructed)
{
    const ruda::gradients_params_record record;
    BOOST_TEST(record.entries().empty());
    BOOST_TEST((record == ruda::gradients_params_record{std::vector<ruda::gradient_entry>{}}));
}

BOOST_AUTO_TEST_CASE(param_ids_from_names_are_xxh3_of_the_name)
{
    // XXH3-64 of the empty input, the algorithm's published value: ids never change with the
    // process, the machine or the xxHash release (XXH3 is frozen since 0.8.0).
    BOOST_TEST(ruda::param_id::from_name("").val() == 0x2D06800538D394C2ULL);
    const auto id = [](const char* name) { return ruda::param_id::from_name(name).val(); };
    BOOST_TEST(id("fc1.weight") == id("fc1.weight"));
    BOOST_TEST(id("fc1.weight") != id("fc1.bias"));
    BOOST_TEST(id("fc1.weight") != id("fc2.weight"));
}

BOOST_AUTO_TEST_CASE(insert_replaces_and_ids_are_sorted)
{
    ruda::gradients_params grads;
    BOOST_TEST(grads.empty());
    grads.insert<cpu>(ruda::param_id{9}, cpu_grad(1));
    grads.insert<cpu>(ruda::param_id{2}, cpu_grad(2));
    grads.insert<cpu>(ruda::param_id{9}, cpu_grad(3));
    BOOST_TEST(grads.size() == 2U);
    const auto ids = grads.ids();
    BOOST_REQUIRE_EQUAL(ids.size(), 2U);
    BOOST_TEST(ids[0].val() == 2U);
    BOOST_TEST(ids[1].val() == 9U);
    BOOST_TEST(value_of(*grads.get<cpu>(ruda::param_id{9})) == 3.0F);
    BOOST_TEST(!grads.get<cpu>(ruda::param_id{5}).has_value());
}

BOOST_AUTO_TEST_CASE(another_backend_gives_nothing_and_stays)
{
    ruda::gradients_params grads;
    grads.insert<cpu>(ruda::param_id{1}, cpu_grad(1));
    BOOST_TEST(!grads.get<ruda::async_backend>(ruda::param_id{1}).has_value());
    BOOST_TEST(!grads.remove<ruda::async_backend>(ruda::param_id{1}).has_value());
    BOOST_TEST(grads.size() == 1U);
    const auto removed = grads.remove<cpu>(ruda::param_id{1});
    BOOST_REQUIRE(removed.has_value());
    BOOST_TEST(value_of(*removed) == 1.0F);
    BOOST_TEST(grads.empty());
}

BOOST_AUTO_TEST_CASE(get_shares_the_storage)
{
    ruda::gradients_params grads;
    const auto grad = cpu_grad(7);
    grads.insert<cpu>(ruda::param_id{1}, grad);
    const auto got = grads.get<cpu>(ruda::param_id{1});
    BOOST_TEST(std::get<cpu::float_tensor>(*got).shares_storage_with(
        std::get<cpu::float_tensor>(grad)));
}

BOOST_AUTO_TEST_SUITE_END()
