// A record's entry by its parameter's name, failing the test when there is none: how the torch
// suites look at what a snapshot of a named module holds.
#pragma once

#include <ruda/optim/gradients_params_record.hpp>

#include <boost/test/unit_test.hpp>

#include <stdexcept>
#include <string>

namespace ruda::test {

inline const ruda::gradient_entry& entry_named(const ruda::gradients_params_record& record,
                                               const std::string& name)
{
    for (const auto& e : record.entries()) {
        if (e.name == name) {
            return e;
        }
    }
    BOOST_FAIL("no entry " + name);
    throw std::logic_error{"unreachable"};
}

} // namespace ruda::test
