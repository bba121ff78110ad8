// What a CUDA device's reads and uploads share: the pinned staging ring, the landings, the
// counters, the worker (which reads run on and uploads must not), and the largest copy.
// Internal to the CUDA device.
#pragma once

#include "cuda_in_flight.hpp"
#include "cuda_landings.hpp"
#include "cuda_pinned_ring.hpp"

#include <boost/asio/io_context.hpp>

#include <cstddef>

namespace ruda::detail {

struct cuda_shared_parts {
    pinned_ring& ring;
    cuda_landings& landings;
    cuda_tally& tally;
    boost::asio::io_context& worker;
    std::size_t piece_bytes;
};

} // namespace ruda::detail
