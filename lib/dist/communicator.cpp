#include <ruda/dist/communicator.hpp>

#include <string>
#include <system_error>
#include <utility>

namespace ruda {

boost::asio::awaitable<result<void>> solo_communicator::barrier() { co_return success(); }

boost::asio::awaitable<result<byte_buffer>> solo_communicator::broadcast(byte_buffer bytes,
                                                                         int root)
{
    if (root != 0) {
        co_return error{std::make_error_code(std::errc::invalid_argument),
                        "Broadcast from rank " + std::to_string(root) + " in a world of 1"};
    }
    co_return std::move(bytes);
}

boost::asio::awaitable<result<std::vector<byte_buffer>>>
solo_communicator::all_gather(byte_buffer bytes)
{
    std::vector<byte_buffer> all;
    all.push_back(std::move(bytes));
    co_return all;
}

boost::asio::awaitable<result<bool>> solo_communicator::agree(bool ok) { co_return ok; }

} // namespace ruda
