// The Boost.Test module of ruda's unit tests; each layer adds its suites in its own files.
#define BOOST_TEST_MODULE ruda
#include <boost/test/unit_test.hpp>
