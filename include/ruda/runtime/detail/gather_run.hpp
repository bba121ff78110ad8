// One gather in progress: its workers, their cancellation signals and the weight budget.
// `ruda::gather` (runtime/gather.hpp) is the public face.
#pragma once

#include <ruda/error.hpp>
#include <ruda/runtime/detail/post_completion.hpp>
#include <ruda/runtime/error_mapping.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace ruda::detail {

// One gather in progress. Workers run on one strand, so the state needs no lock. Each worker
// has its own cancellation signal, emitted only while that worker is suspended inside an
// operation: Asio 1.81's co_spawn lets the cancellation of a coroutine that has not started,
// or that finishes without ever suspending, escape from io_context::run() as an exception.
// Operations start in index order; a worker whose next operation does not fit the weight
// budget parks on `budget_freed_` (a timer that never expires, cancelled to wake them all)
// until an operation in flight finishes.
template <class T, class Factory, class Weight>
class gather_run : public std::enable_shared_from_this<gather_run<T, Factory, Weight>> {
public:
    using handler_type = boost::asio::any_completion_handler<void(result<std::vector<T>>)>;

    gather_run(std::size_t count, std::size_t max_in_flight, std::size_t max_weight,
               Weight weight, Factory factory, boost::asio::any_io_executor executor)
        : count_(count), max_weight_(max_weight), weight_(std::move(weight)),
          factory_(std::move(factory)), strand_(boost::asio::make_strand(executor)),
          budget_freed_(strand_, std::chrono::steady_clock::time_point::max()),
          work_(track_work(std::move(executor)))
    {
        values_.resize(count_);
        const std::size_t workers =
            std::min(std::max<std::size_t>(max_in_flight, 1), count_);
        for (std::size_t k = 0; k < workers; ++k) {
            signals_.push_back(std::make_unique<boost::asio::cancellation_signal>());
        }
        in_operation_.assign(workers, false);
    }

    // On the awaiting coroutine's thread.
    void start(handler_type handler)
    {
        auto slot = boost::asio::get_associated_cancellation_slot(handler);
        handler_.emplace(std::move(handler));
        if (slot.is_connected()) {
            slot.assign([weak = this->weak_from_this()](boost::asio::cancellation_type) {
                if (auto self = weak.lock()) {
                    boost::asio::post(self->strand_, [self] {
                        self->stop(error{errc::cancelled, "gather: cancelled"});
                    });
                }
            });
        }
        boost::asio::post(strand_, [self = this->shared_from_this()] { self->launch(); });
    }

private:
    void launch()
    {
        running_ = signals_.size();
        for (std::size_t k = 0; k < signals_.size(); ++k) {
            boost::asio::co_spawn(
                strand_, worker(this->shared_from_this(), k),
                boost::asio::bind_cancellation_slot(
                    signals_[k]->slot(), [self = this->shared_from_this()](std::exception_ptr e) {
                        self->worker_done(e);
                    }));
        }
    }

    // Static and capture-free: GCC 12 mishandles some coroutine lambdas and member frames.
    static boost::asio::awaitable<void> worker(std::shared_ptr<gather_run> self, std::size_t k)
    {
        // Operations see cancellation through their results; nothing should throw it.
        co_await boost::asio::this_coro::throw_if_cancelled(false);
        while (!self->stopping_ && self->next_ < self->count_) {
            const std::size_t index = self->next_;
            const std::size_t weight = std::invoke(self->weight_, index);
            if (!self->fits(weight)) {
                co_await self->budget_freed_.async_wait(
                    boost::asio::as_tuple(boost::asio::use_awaitable));
                continue;
            }
            ++self->next_;
            ++self->ops_in_flight_;
            self->weight_in_flight_ += weight;
            std::optional<result<T>> outcome;
            self->in_operation_[k] = true;
            try {
                outcome.emplace(co_await std::invoke(self->factory_, index));
            } catch (...) {
                outcome.emplace(error_from_exception(std::current_exception(),
                                                     "gather: operation " + std::to_string(index)));
            }
            self->in_operation_[k] = false;
            --self->ops_in_flight_;
            self->weight_in_flight_ -= weight;
            self->budget_freed_.cancel(); // wakes the parked workers to try again
            if (!*outcome) {
                self->stop(std::move(*outcome).error());
                co_return;
            }
            self->values_[index].emplace(std::move(*outcome).value());
        }
    }

    // Nothing in flight: anything may start, so an over-budget operation runs alone.
    [[nodiscard]] bool fits(std::size_t weight) const
    {
        return ops_in_flight_ == 0 || (weight <= max_weight_ &&
                                       weight_in_flight_ <= max_weight_ - weight);
    }

    // The first failure wins; operations in flight are cancelled and no more start.
    void stop(error failure)
    {
        if (!failure_) {
            failure_ = std::move(failure);
        }
        if (stopping_) {
            return;
        }
        stopping_ = true;
        budget_freed_.cancel();
        for (std::size_t k = 0; k < signals_.size(); ++k) {
            if (in_operation_[k]) {
                signals_[k]->emit(boost::asio::cancellation_type::terminal);
            }
        }
    }

    void worker_done(std::exception_ptr failure)
    {
        if (failure && !unexpected_) {
            unexpected_ = failure;
        }
        if (--running_ == 0) {
            post_completion(std::move(work_), std::move(*handler_), outcome());
        }
    }

    result<std::vector<T>> outcome()
    {
        if (failure_) {
            return std::move(*failure_);
        }
        if (unexpected_) {
            return error_from_exception(unexpected_, "gather");
        }
        std::vector<T> values;
        values.reserve(count_);
        for (auto& value : values_) {
            values.push_back(std::move(*value));
        }
        return values;
    }

    std::size_t count_;
    std::size_t max_weight_;
    Weight weight_;
    Factory factory_;
    boost::asio::strand<boost::asio::any_io_executor> strand_;
    boost::asio::steady_timer budget_freed_;
    boost::asio::any_io_executor work_;
    // Emplaced, never assigned: Asio 1.81's any_completion_handler move-assignment recurses.
    std::optional<handler_type> handler_;
    std::vector<std::optional<T>> values_;
    std::vector<std::unique_ptr<boost::asio::cancellation_signal>> signals_;
    std::vector<bool> in_operation_;
    std::size_t next_ = 0;
    std::size_t running_ = 0;
    std::size_t ops_in_flight_ = 0;
    std::size_t weight_in_flight_ = 0;
    bool stopping_ = false;
    std::optional<error> failure_;
    std::exception_ptr unexpected_;
};

template <class T, class Factory, class Weight>
struct start_gather {
    template <class Handler>
    void operator()(Handler&& handler, std::size_t count, std::size_t max_in_flight,
                    std::size_t max_weight, Weight weight, Factory factory) const
    {
        using run_type = gather_run<T, Factory, Weight>;
        boost::asio::any_io_executor executor = boost::asio::get_associated_executor(handler);
        auto run = std::make_shared<run_type>(count, max_in_flight, max_weight, std::move(weight),
                                              std::move(factory), std::move(executor));
        run->start(typename run_type::handler_type{std::forward<Handler>(handler)});
    }
};

template <class Factory>
using gather_value = typename std::invoke_result_t<Factory&, std::size_t>::value_type::value_type;

struct no_weight {
    std::size_t operator()(std::size_t) const noexcept { return 0; }
};

} // namespace ruda::detail
