// How ruda's asynchronous operations meet Asio's completion tokens. Each completes with one
// argument, `void(ruda::result<T>)`: the value, or the error code together with its message,
// as every synchronous ruda call returns. So `use_awaitable` gives a `result<T>` to test,
// `use_future` a future of one, `deferred` and callbacks take one, and `as_tuple` wraps it in
// a one-element tuple. `redirect_error(token, ec)` has no error_code argument to redirect, and
// would silently leave `ec` clear on a failure: it is refused at compile time instead, by the
// specialization below.
#pragma once

#include <ruda/error.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/redirect_error.hpp>

namespace ruda::detail {

template <class T>
inline constexpr bool always_false = false;

} // namespace ruda::detail

namespace boost::asio {

template <class CompletionToken, class T>
struct async_result<redirect_error_t<CompletionToken>, void(ruda::result<T>)> {
    static_assert(ruda::detail::always_false<T>,
                  "ruda operations complete with ruda::result<T>, which holds the error code and "
                  "its message: there is no error_code for redirect_error to redirect. Test the "
                  "result instead: `auto r = co_await op(..., use_awaitable); if (!r) ...`");
};

} // namespace boost::asio
