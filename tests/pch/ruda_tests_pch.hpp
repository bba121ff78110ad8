// The headers nearly every test includes, compiled once for the whole test program.
#include <boost/test/unit_test.hpp>
#include <ruda/ruda.hpp>
