// The LibTorch backend: tensor checks, reads on the read workers, uploads and casts.
#include <ruda/backend/torch_backend.hpp>

#include "torch_conversions.hpp"

#include <ruda/backend/detail/backend_checks.hpp>
#include <ruda/runtime/blocking_scope.hpp>
#include <ruda/runtime/detail/post_completion.hpp>

#include <ATen/ATen.h>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ruda {
namespace {

using detail::ruda_float_dtype;
using detail::ruda_shape;
using detail::torch_float_type;
using detail::torch_sizes;

std::string type_name(const at::Tensor& tensor)
{
    return std::string{c10::toString(tensor.scalar_type())};
}

// A tensor ruda can read lives on the CPU with the ordinary strided layout.
result<void> check_cpu_strided(const at::Tensor& tensor)
{
    if (!tensor.defined()) {
        return error{errc::invalid_tensor, "torch backend: the tensor is undefined"};
    }
    if (!tensor.device().is_cpu()) {
        // A device problem, not a dtype one: the same tensor on the CPU would be read.
        return error{errc::unsupported_device,
                     "torch backend: the tensor is on " + tensor.device().str() +
                         ", and this build of ruda::torch reads CPU tensors only (move it with "
                         ".cpu(), or use cuda_backend for GPU memory)"};
    }
    if (tensor.layout() != c10::kStrided) {
        return error{errc::invalid_tensor, "torch backend: " + type_name(tensor) +
                                               " tensor has a sparse or other non-strided layout"};
    }
    return success();
}

// Uploads go to the CPU: this build has no other torch device.
result<void> check_cpu_upload(const torch_backend::device& device)
{
    if (!device.where.is_cpu()) {
        return error{errc::unsupported_device,
                     "torch backend: cannot upload to " + device.where.str() +
                         "; this build of ruda::torch uploads to the CPU only"};
    }
    return success();
}

// A new CPU tensor of `type` and `dims`, filled with `bytes` (whose length the caller checked).
result<at::Tensor> tensor_from_bytes(std::span<const std::uint8_t> bytes, const shape& dims,
                                     c10::ScalarType type)
{
    BOOST_OUTCOME_TRY(auto sizes, torch_sizes(dims));
    try {
        at::Tensor tensor = at::empty(sizes, at::TensorOptions().dtype(type));
        if (!bytes.empty()) {
            std::memcpy(tensor.data_ptr(), bytes.data(), bytes.size());
        }
        return tensor;
    } catch (const std::exception& e) {
        return error{errc::allocation_too_large, std::string{"torch backend: "} + e.what()};
    }
}

// ruda's read workers: a few threads that copy tensor values, marked so that a sync read
// started on one of them refuses instead of waiting for itself.
class worker_pool {
public:
    static worker_pool& instance()
    {
        static worker_pool workers;
        return workers;
    }
    worker_pool(const worker_pool&) = delete;
    worker_pool& operator=(const worker_pool&) = delete;

    [[nodiscard]] boost::asio::io_context::executor_type executor() { return io_.get_executor(); }
    [[nodiscard]] std::size_t size() const noexcept { return threads_.size(); }

private:
    worker_pool() : work_(io_.get_executor())
    {
        const std::size_t count =
            std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, 4);
        for (std::size_t i = 0; i < count; ++i) {
            threads_.emplace_back([this] {
                const no_blocking_scope read_worker;
                io_.run();
            });
        }
    }
    ~worker_pool()
    {
        work_.reset(); // the queued copies finish, then the threads end
        for (std::thread& t : threads_) {
            t.join();
        }
    }

    boost::asio::io_context io_;
    boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
    std::vector<std::thread> threads_;
};

using read_handler = boost::asio::any_completion_handler<void(result<tensor_data>)>;
// Copies a tensor's values, giving up (with errc::cancelled) once the flag is set.
using copy_function = std::function<result<tensor_data>(const std::atomic<bool>& cancelled)>;

error cancelled_read() { return error{errc::cancelled, "torch backend: read cancelled"}; }

// One read: completed exactly once, by whoever claims it first: the worker when it starts the
// copy, or a cancel that arrives while the read is still queued.
struct read_job {
    read_job(boost::asio::any_io_executor w, read_handler h)
        : work(std::move(w)), handler(std::move(h))
    {
    }
    // Whether the caller is the one to complete the read.
    bool claim() { return !claimed.exchange(true); }
    void complete(result<tensor_data> outcome)
    {
        detail::post_completion(std::move(work), std::move(handler), std::move(outcome));
    }

    std::atomic<bool> claimed{false};
    std::atomic<bool> cancelled{false};
    boost::asio::any_io_executor work;
    read_handler handler;
};

void submit(copy_function copy, boost::asio::any_io_executor work, read_handler handler)
{
    auto job = std::make_shared<read_job>(std::move(work), std::move(handler));
    auto slot = boost::asio::get_associated_cancellation_slot(job->handler);
    if (slot.is_connected()) {
        // On the reader's thread. A queued read completes now; a copy stops at its next piece.
        slot.assign([weak = std::weak_ptr<read_job>(job)](boost::asio::cancellation_type) {
            if (auto target = weak.lock()) {
                target->cancelled.store(true);
                if (target->claim()) {
                    target->complete(cancelled_read());
                }
            }
        });
    }
    boost::asio::post(worker_pool::instance().executor(), [job, copy = std::move(copy)] {
        if (!job->claim()) {
            return; // cancelled while queued, and already completed
        }
        result<tensor_data> outcome = cancelled_read();
        try {
            outcome = copy(job->cancelled);
        } catch (const std::exception& e) {
            outcome = error{errc::read_failed, std::string{"torch backend: "} + e.what()};
        }
        job->complete(std::move(outcome));
    });
}

boost::asio::awaitable<result<tensor_data>> read_on_workers(copy_function copy)
{
    co_return co_await boost::asio::async_initiate<const boost::asio::use_awaitable_t<>&,
                                                   void(result<tensor_data>)>(
        [](auto handler, copy_function c) {
            boost::asio::any_io_executor ex = boost::asio::get_associated_executor(handler);
            submit(std::move(c), detail::track_work(std::move(ex)),
                   read_handler{std::move(handler)});
        },
        boost::asio::use_awaitable, std::move(copy));
}

// Pieces small enough that a cancel is honoured within a few milliseconds.
constexpr std::size_t copy_piece = std::size_t{4} << 20U;

// The tensor's values, contiguous, copied piece by piece into unfilled memory with room for
// `extra` bytes more; errc::cancelled once the flag is set.
result<storage> copy_values(const at::Tensor& tensor, std::size_t extra,
                            const std::atomic<bool>& cancelled)
{
    if (cancelled.load()) {
        return cancelled_read();
    }
    const at::Tensor source = tensor.contiguous(); // the tensor itself when it already is
    const auto size = static_cast<std::size_t>(source.numel()) * source.element_size();
    const auto* from = static_cast<const std::uint8_t*>(source.data_ptr());
    BOOST_OUTCOME_TRY(auto bytes, storage::try_allocate(size + extra));
    std::uint8_t* to = bytes.writable_data();
    for (std::size_t done = 0; done < size; done += copy_piece) {
        if (cancelled.load(std::memory_order_relaxed)) {
            return cancelled_read();
        }
        std::memcpy(to + done, from + done, std::min(copy_piece, size - done));
    }
    return bytes;
}

result<tensor_data> copy_float(const at::Tensor& tensor, dtype type,
                               const std::atomic<bool>& cancelled)
{
    BOOST_OUTCOME_TRY(auto bytes, copy_values(tensor, 0, cancelled));
    return tensor_data{std::move(bytes), ruda_shape(tensor), type};
}

// The int8 values, then the scale as a little-endian f32: ruda's q8s layout.
result<tensor_data> copy_quantized(const at::Tensor& tensor, const std::atomic<bool>& cancelled)
{
    BOOST_OUTCOME_TRY(auto bytes, copy_values(tensor, sizeof(float), cancelled));
    const auto scale = static_cast<float>(tensor.q_scale());
    std::memcpy(bytes.writable_data() + bytes.size() - sizeof(float), &scale, sizeof(float));
    return tensor_data{std::move(bytes), ruda_shape(tensor), torch_backend::q8s_dtype()};
}

} // namespace

result<torch_backend::float_tensor> torch_backend::float_tensor::wrap(at::Tensor tensor)
{
    BOOST_OUTCOME_TRY(check_cpu_strided(tensor));
    if (tensor.is_quantized()) {
        return error{errc::invalid_dtype, "torch backend: " + type_name(tensor) +
                                              " tensor is quantized, not a float gradient"};
    }
    const auto type = ruda_float_dtype(tensor.scalar_type());
    if (!type) {
        return error{errc::invalid_dtype,
                     "torch backend: " + type_name(tensor) +
                         " tensors are not float gradients (Double, Float, Half, BFloat16)"};
    }
    return float_tensor{std::move(tensor), *type};
}

result<torch_backend::quantized_tensor> torch_backend::quantized_tensor::wrap(at::Tensor tensor)
{
    BOOST_OUTCOME_TRY(check_cpu_strided(tensor));
    if (!tensor.is_quantized()) {
        return error{errc::invalid_dtype,
                     "torch backend: " + type_name(tensor) + " tensor is not quantized"};
    }
    const auto scheme = tensor.qscheme();
    if (scheme != c10::kPerTensorAffine) {
        return error{errc::invalid_quantization,
                     "torch backend: " + std::string{c10::toString(scheme)} +
                         " quantization has no ruda scheme; ruda reads per-tensor symmetric "
                         "qint8 (q8s)"};
    }
    if (tensor.scalar_type() != c10::ScalarType::QInt8) {
        return error{errc::invalid_quantization,
                     "torch backend: " + type_name(tensor) +
                         " has no ruda scheme; ruda reads per-tensor symmetric qint8 (q8s)"};
    }
    if (tensor.q_zero_point() != 0) {
        return error{errc::invalid_quantization,
                     "torch backend: zero point " + std::to_string(tensor.q_zero_point()) +
                         " is not symmetric; ruda reads per-tensor symmetric qint8 (q8s)"};
    }
    return quantized_tensor{std::move(tensor)};
}

dtype torch_backend::q8s_dtype()
{
    return dtype::qfloat({.value = quant_value::q8s,
                          .param = quant_param::f32,
                          .store = quant_store::native(),
                          .level = quant_level::tensor(),
                          .mode = quant_mode::symmetric});
}

boost::asio::awaitable<result<tensor_data>> torch_backend::float_into_data(float_tensor tensor)
{
    return read_on_workers([tensor = std::move(tensor)](const std::atomic<bool>& cancelled) {
        return copy_float(tensor.get(), tensor.dtype(), cancelled);
    });
}

boost::asio::awaitable<result<tensor_data>> torch_backend::q_into_data(quantized_tensor tensor)
{
    return read_on_workers([tensor = std::move(tensor)](const std::atomic<bool>& cancelled) {
        return copy_quantized(tensor.get(), cancelled);
    });
}

result<torch_backend::float_tensor> torch_backend::float_from_data(tensor_data data,
                                                                   const device& device)
{
    BOOST_OUTCOME_TRY(detail::check_float_upload(data, name()));
    BOOST_OUTCOME_TRY(check_cpu_upload(device));
    const auto type = torch_float_type(data.dtype());
    if (!type) {
        return error{errc::invalid_dtype,
                     "torch backend: torch has no " + to_string(data.dtype()) + " tensors"};
    }
    BOOST_OUTCOME_TRY(const auto count, data.checked_num_elements());
    if (count * data.dtype().size() != data.bytes().size()) {
        return error{errc::byte_count_mismatch,
                     "torch backend: " + std::to_string(data.bytes().size()) + " bytes for " +
                         std::to_string(count) + " " + to_string(data.dtype()) + " values"};
    }
    BOOST_OUTCOME_TRY(auto tensor, tensor_from_bytes(data.bytes(), data.shape(), *type));
    return float_tensor::wrap(std::move(tensor));
}

result<torch_backend::quantized_tensor> torch_backend::q_from_data(tensor_data data,
                                                                   const device& device)
{
    BOOST_OUTCOME_TRY(detail::check_quantized_upload(data, name()));
    BOOST_OUTCOME_TRY(check_cpu_upload(device));
    if (!(data.dtype() == q8s_dtype())) {
        return error{errc::invalid_quantization,
                     "torch backend: torch has no tensor for " + to_string(data.dtype()) +
                         "; it takes per-tensor q8s with native storage and an f32 scale"};
    }
    BOOST_OUTCOME_TRY(const auto count, data.checked_num_elements());
    if (data.bytes().size() != count + sizeof(float)) {
        return error{errc::byte_count_mismatch,
                     "torch backend: " + std::to_string(data.bytes().size()) + " bytes for " +
                         std::to_string(count) + " q8s values and one f32 scale"};
    }
    const std::span<const std::uint8_t> bytes{data.bytes()};
    float scale = 0;
    std::memcpy(&scale, bytes.data() + count, sizeof(float));
    BOOST_OUTCOME_TRY(auto values, tensor_from_bytes(bytes.first(count), data.shape(),
                                                     c10::ScalarType::Char));
    try {
        return quantized_tensor::wrap(at::_make_per_tensor_quantized_tensor(values, scale, 0));
    } catch (const std::exception& e) {
        return error{errc::invalid_quantization, std::string{"torch backend: "} + e.what()};
    }
}

result<torch_backend::float_tensor> torch_backend::float_cast(const float_tensor& tensor,
                                                              dtype target)
{
    BOOST_OUTCOME_TRY(detail::check_float_cast(target, name()));
    const auto type = torch_float_type(target);
    if (!type) {
        return error{errc::invalid_dtype,
                     "torch backend: torch has no " + to_string(target) + " tensors"};
    }
    try { // the new tensor is an allocation, which torch reports by throwing
        return float_tensor::wrap(tensor.get().to(*type));
    } catch (const std::exception& e) {
        return error{errc::allocation_too_large, std::string{"torch backend: "} + e.what()};
    }
}

std::size_t torch_backend::byte_size(const float_tensor& tensor)
{
    return static_cast<std::size_t>(tensor.get().numel()) * tensor.get().element_size();
}

std::size_t torch_backend::byte_size(const quantized_tensor& tensor)
{
    return static_cast<std::size_t>(tensor.get().numel()) + sizeof(float);
}

std::size_t torch_backend::read_workers() { return worker_pool::instance().size(); }

} // namespace ruda
