// Completes an asynchronous operation the way Asio requires: posted (never inline) to the
// handler's executor, with the handler's cancellation slot cleared on that thread first.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>

#include <utility>

namespace ruda::detail {

/// `executor` with outstanding work tracked, so its context keeps running until the
/// completion has been posted to it.
inline boost::asio::any_io_executor track_work(boost::asio::any_io_executor executor)
{
    return boost::asio::prefer(std::move(executor),
                               boost::asio::execution::outstanding_work.tracked);
}

/// Posts `handler(args...)` to `work` (from `track_work`), clearing the cancellation slot
/// there: the slot may only be touched on the thread that emits it.
template <class Handler, class... Args>
void post_completion(boost::asio::any_io_executor work, Handler handler, Args... args)
{
    // A tracked copy stays with the posting thread until post() returns, so the target
    // context cannot run out of work (and be destroyed) while that thread is still inside.
    auto target = work;
    boost::asio::post(target, [h = std::move(handler), w = std::move(work),
                               ... a = std::move(args)]() mutable {
        boost::asio::get_associated_cancellation_slot(h).clear();
        std::move(h)(std::move(a)...);
    });
}

} // namespace ruda::detail
