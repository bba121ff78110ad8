#include "borrowed_tensors.hpp"

#include "cuda_devices.hpp"
#include "records.hpp"

#include <ruda/backend/cuda_backend.hpp>
#include <ruda/optim/async_snapshot.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include <pybind11/pybind11.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <optional>
#include <utility>

namespace py = pybind11;

namespace ruda::python {

// The CUDA reads of one snapshot: queued on an io_context of their own, which the thread that
// reads them runs, so that a cancel can be raised between its handlers.
struct borrowed_tensors::cuda_reads {
    boost::asio::io_context io{1};
    boost::asio::cancellation_signal cancel;
    std::optional<result<gradients_params_record>> outcome;
};

borrowed_tensors::borrowed_tensors() = default;
borrowed_tensors::borrowed_tensors(borrowed_tensors&&) noexcept = default;
borrowed_tensors& borrowed_tensors::operator=(borrowed_tensors&&) noexcept = default;

borrowed_tensors::~borrowed_tensors()
{
    reads_.reset(); // reads never run issue no copy: nothing of the tensors is in flight
    release_all(host_);
    release_all(cuda_);
}

result<borrowed_tensors> borrowed_tensors::take(std::vector<tensor_view> views)
{
    borrowed_tensors out;
    const auto on_gpu = [](const tensor_view& view) { return view.cuda_ordinal.has_value(); };
    if (std::none_of(views.begin(), views.end(), on_gpu)) {
        out.host_ = std::move(views); // the common case, and no view moved one by one
        return out;
    }
    for (tensor_view& view : views) {
        (view.cuda_ordinal ? out.cuda_ : out.host_).push_back(std::move(view));
    }
    if (out.cuda_.empty()) {
        return out;
    }
    // Opening a device and staging on it call the driver: not under the GIL.
    const py::gil_scoped_release release;
    gradients_params grads;
    for (const tensor_view& view : out.cuda_) {
        const auto about = [&view](const error& why) {
            return error{why.code(), "Tensor " + view.name + ": " + why.message()};
        };
        auto device = cuda_device_for(*view.cuda_ordinal);
        if (!device) {
            return about(device.error());
        }
        // Made ready on the legacy default stream by the producer (`__dlpack__(stream=1)`); the
        // producers' tensors are kept by `cuda_`, not by the backend, to be released under the
        // GIL.
        auto tensor =
            cuda_backend::borrow(device.value(), reinterpret_cast<cuda_device_ptr>(view.data),
                                 view.shape(), view.type, cuda_stream{nullptr}, nullptr);
        if (!tensor) {
            return about(tensor.error());
        }
        grads.insert<cuda_backend>(view.id, std::move(tensor).value(), view.name);
    }
    out.reads_ = std::make_unique<cuda_reads>();
    cuda_reads& reads = *out.reads_;
    async_snapshot<cuda_backend>(
        reads.io.get_executor(), grads,
        boost::asio::bind_cancellation_slot(reads.cancel.slot(),
                                            [&reads](result<gradients_params_record> record) {
                                                reads.outcome = std::move(record);
                                            }));
    return out;
}

result<gradients_params_record> borrowed_tensors::read(const std::function<bool()>& stop)
{
    std::vector<gradient_entry> from_gpu;
    if (reads_) {
        cuda_reads& reads = *reads_;
        auto busy = boost::asio::make_work_guard(reads.io);
        bool cancelling = false;
        while (!reads.outcome) {
            reads.io.run_one_for(std::chrono::milliseconds{20});
            if (!reads.outcome && !cancelling && stop()) {
                cancelling = true;
                reads.cancel.emit(boost::asio::cancellation_type::all);
            }
        }
        busy.reset();
        reads.io.run(); // what the reads left, until no copy of theirs is out
        auto record = std::move(*reads.outcome);
        reads_.reset();
        release_all(cuda_);
        if (!record) {
            return std::move(record).error();
        }
        from_gpu = std::move(record).value().into_entries();
    }
    BOOST_OUTCOME_TRY(auto copied, copy_views(std::move(host_), stop));
    if (from_gpu.empty()) {
        return copied;
    }
    auto from_host = std::move(copied).into_entries();
    std::vector<gradient_entry> all;
    all.reserve(from_gpu.size() + from_host.size());
    std::merge(std::make_move_iterator(from_gpu.begin()), std::make_move_iterator(from_gpu.end()),
               std::make_move_iterator(from_host.begin()), std::make_move_iterator(from_host.end()),
               std::back_inserter(all),
               [](const gradient_entry& a, const gradient_entry& b) { return a.id < b.id; });
    return gradients_params_record{std::move(all)};
}

} // namespace ruda::python
