// The MPI communicator: every MPI call of a collective is made on the progress thread, which
// starts it non-blocking and tests it on a timer until it completes, the deadline passes or the
// caller cancels; the outcome is posted to the caller's executor.
#include <ruda/dist/mpi.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <atomic>
#include <climits>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

namespace ruda {

namespace {

using clock = std::chrono::steady_clock;
using done_handler = boost::asio::any_completion_handler<void(result<void>)>;

std::string mpi_error_text(int code)
{
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) {
        return "MPI error " + std::to_string(code);
    }
    return std::string(text, static_cast<std::size_t>(length));
}

// One non-blocking MPI call: how to start it, the buffers it reads and writes, and its waiter.
struct mpi_operation {
    mpi_operation(boost::asio::io_context& progress, std::function<int(MPI_Request*)> begin,
                  std::shared_ptr<void> keep, clock::time_point until)
        : start(std::move(begin)), buffers(std::move(keep)), deadline(until), timer(progress)
    {
    }
    std::function<int(MPI_Request*)> start;
    std::shared_ptr<void> buffers;
    clock::time_point deadline;
    boost::asio::steady_timer timer;
    std::chrono::microseconds wait{0};
    MPI_Request request = MPI_REQUEST_NULL;
    std::atomic<bool> cancel_requested{false};
    std::optional<done_handler> handler;
    boost::asio::any_io_executor handler_executor;
};

} // namespace

struct mpi_communicator::impl {
    impl(MPI_Comm dup, int r, int n, mpi_options o)
        : comm(dup), rank(r), size(n), options(o), thread([this] { progress.run(); })
    {
    }

    ~impl()
    {
        work.reset();
        progress.stop();
        thread.join();
        // A collective left unfinished still owns its buffers and the duplicate: free them only
        // if it has finished since.
        bool all_done = true;
        for (const auto& op : abandoned) {
            int flag = 0;
            if (MPI_Test(&op->request, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || flag == 0) {
                all_done = false;
            }
        }
        if (!all_done) {
            static std::mutex leaked_mutex;
            static std::vector<std::shared_ptr<mpi_operation>> leaked;
            const std::lock_guard lock{leaked_mutex};
            leaked.insert(leaked.end(), abandoned.begin(), abandoned.end());
            return;
        }
        MPI_Comm_free(&comm);
    }

    template <class CompletionToken>
    auto async_run(std::function<int(MPI_Request*)> start, std::shared_ptr<void> buffers,
                   clock::time_point deadline, CompletionToken&& token)
    {
        return boost::asio::async_initiate<CompletionToken, void(result<void>)>(
            [this](auto handler, std::function<int(MPI_Request*)> begin, std::shared_ptr<void> keep,
                   clock::time_point until) {
                auto op = std::make_shared<mpi_operation>(progress, std::move(begin),
                                                          std::move(keep), until);
                op->handler_executor = boost::asio::prefer(
                    boost::asio::get_associated_executor(handler, progress.get_executor()),
                    boost::asio::execution::outstanding_work.tracked);
                op->handler.emplace(std::move(handler));
                // The slot of the stored handler: an awaitable's own handler, once moved from,
                // no longer names its coroutine's slot.
                auto slot = boost::asio::get_associated_cancellation_slot(*op->handler);
                if (slot.is_connected()) {
                    slot.assign(
                        [op](boost::asio::cancellation_type) { op->cancel_requested = true; });
                }
                boost::asio::post(progress, [this, op] { begin_operation(op); });
            },
            token, std::move(start), std::move(buffers), deadline);
    }

    // On the progress thread from here on.
    void begin_operation(const std::shared_ptr<mpi_operation>& op)
    {
        if (broken) {
            finish(op, *broken);
            return;
        }
        const int rc = op->start(&op->request);
        if (rc != MPI_SUCCESS) {
            broken = error{errc::io_error,
                           "MPI on rank " + std::to_string(rank) + ": " + mpi_error_text(rc)};
            finish(op, *broken);
            return;
        }
        op->wait = std::max<std::chrono::microseconds>(options.poll_interval / 10,
                                                       std::chrono::microseconds{1});
        test(op);
    }

    void test(const std::shared_ptr<mpi_operation>& op)
    {
        int flag = 0;
        const int rc = MPI_Test(&op->request, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            broken = error{errc::io_error,
                           "MPI on rank " + std::to_string(rank) + ": " + mpi_error_text(rc)};
            finish(op, *broken);
            return;
        }
        if (flag != 0) {
            finish(op, success());
            return;
        }
        if (op->cancel_requested) {
            abandon(op, error{errc::cancelled,
                              "A collective on rank " + std::to_string(rank) +
                                  " was cancelled; the communicator cannot be used again"});
            return;
        }
        if (clock::now() >= op->deadline) {
            abandon(op,
                    error{errc::timed_out, "A collective on rank " + std::to_string(rank) + " of " +
                                               std::to_string(size) + " did not complete within " +
                                               std::to_string(options.timeout.count()) +
                                               " ms (a peer that hangs or never joins it); the "
                                               "communicator cannot be used again"});
            return;
        }
        op->timer.expires_after(op->wait);
        op->wait = std::min(op->wait * 2, options.poll_interval);
        op->timer.async_wait([this, op](boost::system::error_code) { test(op); });
    }

    void abandon(const std::shared_ptr<mpi_operation>& op, error why)
    {
        broken = why;
        abandoned.push_back(op);
        finish(op, std::move(why));
    }

    // The work the waiter's executor tracks travels with the completion, so it ends on that
    // executor's own thread: never here, after the waiter's context may be gone.
    static void finish(const std::shared_ptr<mpi_operation>& op, result<void> outcome)
    {
        auto target = boost::asio::prefer(op->handler_executor,
                                          boost::asio::execution::outstanding_work.untracked);
        boost::asio::post(target, [handler = std::move(*op->handler), outcome = std::move(outcome),
                                   work = std::move(op->handler_executor)]() mutable {
            std::move(handler)(std::move(outcome));
        });
        op->handler.reset();
    }

    // Runs `start` to completion as one step of a collective.
    boost::asio::awaitable<result<void>> step(std::function<int(MPI_Request*)> start,
                                              std::shared_ptr<void> buffers,
                                              clock::time_point deadline)
    {
        co_return co_await async_run(std::move(start), std::move(buffers), deadline,
                                     boost::asio::use_awaitable);
    }

    [[nodiscard]] clock::time_point deadline() const { return clock::now() + options.timeout; }

    MPI_Comm comm;
    int rank;
    int size;
    mpi_options options;
    // Touched on the progress thread only.
    std::optional<error> broken;
    std::vector<std::shared_ptr<mpi_operation>> abandoned;
    boost::asio::io_context progress{1};
    boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work{
        progress.get_executor()};
    std::thread thread;
};

result<std::unique_ptr<mpi_communicator>> mpi_communicator::create(MPI_Comm comm,
                                                                   mpi_options options)
{
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized == 0) {
        return error{errc::device_unavailable, "MPI is not initialised (MPI_Init_thread first)"};
    }
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE) {
        return error{errc::device_unavailable,
                     "ruda's MPI communicator needs MPI_THREAD_MULTIPLE (MPI_Init_thread "
                     "provided level " +
                         std::to_string(provided) + ")"};
    }
    MPI_Comm dup = MPI_COMM_NULL;
    if (const int rc = MPI_Comm_dup(comm, &dup); rc != MPI_SUCCESS) {
        return error{errc::io_error, "MPI_Comm_dup: " + mpi_error_text(rc)};
    }
    // An MPI error on the duplicate comes back as a code (and fails that collective), instead
    // of aborting the job as MPI's default handler does.
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    int rank = 0;
    int size = 0;
    MPI_Comm_rank(dup, &rank);
    MPI_Comm_size(dup, &size);
    return std::unique_ptr<mpi_communicator>(
        new mpi_communicator(std::make_unique<impl>(dup, rank, size, options)));
}

mpi_communicator::mpi_communicator(std::unique_ptr<impl> state) : impl_(std::move(state)) {}

mpi_communicator::~mpi_communicator() = default;

int mpi_communicator::rank() const noexcept { return impl_->rank; }

int mpi_communicator::size() const noexcept { return impl_->size; }

MPI_Comm mpi_communicator::native() const noexcept { return impl_->comm; }

boost::asio::awaitable<result<void>> mpi_communicator::barrier()
{
    MPI_Comm comm = impl_->comm;
    co_return co_await impl_->step([comm](MPI_Request* r) { return MPI_Ibarrier(comm, r); },
                                   nullptr, impl_->deadline());
}

boost::asio::awaitable<result<bool>> mpi_communicator::agree(bool ok)
{
    MPI_Comm comm = impl_->comm;
    auto votes = std::make_shared<std::array<int, 2>>(std::array<int, 2>{ok ? 1 : 0, 0});
    BOOST_OUTCOME_CO_TRY(co_await impl_->step(
        [comm, v = votes.get()](MPI_Request* r) {
            return MPI_Iallreduce(&(*v)[0], &(*v)[1], 1, MPI_INT, MPI_LAND, comm, r);
        },
        votes, impl_->deadline()));
    co_return (*votes)[1] != 0;
}

boost::asio::awaitable<result<byte_buffer>> mpi_communicator::broadcast(byte_buffer bytes, int root)
{
    if (root < 0 || root >= impl_->size) {
        co_return error{std::make_error_code(std::errc::invalid_argument),
                        "Broadcast from rank " + std::to_string(root) + " in a world of " +
                            std::to_string(impl_->size)};
    }
    const auto until = impl_->deadline();
    MPI_Comm comm = impl_->comm;
    struct buffers {
        std::uint64_t length = 0;
        byte_buffer data;
    };
    auto b = std::make_shared<buffers>(buffers{bytes.size(), std::move(bytes)});
    BOOST_OUTCOME_CO_TRY(co_await impl_->step(
        [comm, root, p = b.get()](MPI_Request* r) {
            return MPI_Ibcast(&p->length, 1, MPI_UINT64_T, root, comm, r);
        },
        b, until));
    if (b->length > static_cast<std::uint64_t>(INT_MAX)) {
        co_return error{errc::allocation_too_large,
                        "A broadcast of " + std::to_string(b->length) + " bytes"};
    }
    b->data.resize(b->length);
    BOOST_OUTCOME_CO_TRY(co_await impl_->step(
        [comm, root, p = b.get()](MPI_Request* r) {
            return MPI_Ibcast(p->data.data(), static_cast<int>(p->length), MPI_BYTE, root, comm, r);
        },
        b, until));
    co_return std::move(b->data);
}

boost::asio::awaitable<result<std::vector<byte_buffer>>>
mpi_communicator::all_gather(byte_buffer bytes)
{
    const auto until = impl_->deadline();
    const auto n = static_cast<std::size_t>(impl_->size);
    MPI_Comm comm = impl_->comm;
    struct buffers {
        std::uint64_t length = 0;
        byte_buffer data;
        std::vector<std::uint64_t> lengths;
        std::vector<int> counts;
        std::vector<int> offsets;
        byte_buffer all;
    };
    auto b = std::make_shared<buffers>();
    b->length = bytes.size();
    b->data = std::move(bytes);
    b->lengths.resize(n);
    BOOST_OUTCOME_CO_TRY(co_await impl_->step(
        [comm, p = b.get()](MPI_Request* r) {
            return MPI_Iallgather(&p->length, 1, MPI_UINT64_T, p->lengths.data(), 1, MPI_UINT64_T,
                                  comm, r);
        },
        b, until));
    std::uint64_t total = 0;
    for (const std::uint64_t length : b->lengths) {
        b->counts.push_back(static_cast<int>(std::min<std::uint64_t>(length, INT_MAX)));
        b->offsets.push_back(static_cast<int>(std::min<std::uint64_t>(total, INT_MAX)));
        total += length;
    }
    if (total > static_cast<std::uint64_t>(INT_MAX)) {
        co_return error{errc::allocation_too_large,
                        "An all-gather of " + std::to_string(total) + " bytes"};
    }
    b->all.resize(total);
    BOOST_OUTCOME_CO_TRY(co_await impl_->step(
        [comm, p = b.get()](MPI_Request* r) {
            return MPI_Iallgatherv(p->data.data(), static_cast<int>(p->length), MPI_BYTE,
                                   p->all.data(), p->counts.data(), p->offsets.data(), MPI_BYTE,
                                   comm, r);
        },
        b, until));
    std::vector<byte_buffer> each(n);
    for (std::size_t i = 0; i < n; ++i) {
        const auto first = b->all.begin() + b->offsets[i];
        each[i].assign(first, first + b->counts[i]);
    }
    co_return each;
}

} // namespace ruda
