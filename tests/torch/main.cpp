// The Boost.Test module of the torch suites (built with ruda::torch only).
#define BOOST_TEST_MODULE ruda_torch
#include <boost/test/unit_test.hpp>
