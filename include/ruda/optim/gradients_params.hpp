// The gradients of a model's parameters, keyed by `param_id`: a type-erased map whose entries
// each belong to one backend, and the snapshot of all of them into a host-owned record.
#pragma once

#include <ruda/backend/backend.hpp>
#include <ruda/backend/detail/backend_checks.hpp>
#include <ruda/error.hpp>
#include <ruda/optim/gradients_params_record.hpp>
#include <ruda/optim/param_id.hpp>
#include <ruda/optim/snapshot_options.hpp>
#include <ruda/optim/validate_record.hpp>
#include <ruda/runtime/gather.hpp>
#include <ruda/runtime/try_read_sync.hpp>
#include <ruda/tensor/detail/fresh_pages.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/this_coro.hpp>

#include <algorithm>
#include <any>
#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace ruda {

/// Safe to use from several threads at once: snapshots, `get` and `ids` share a lock that
/// `insert` and `remove` take exclusively, so a snapshot captures one consistent state.
class gradients_params {
public:
    gradients_params() = default;
    gradients_params(const gradients_params& other);
    gradients_params(gradients_params&& other) noexcept;
    gradients_params& operator=(gradients_params other) noexcept;
    ~gradients_params() = default;

    /// Registers `tensor` under `id`, replacing whatever was there (on any backend), with the
    /// parameter's name if it has one ("fc1.bias"): snapshots carry it into the record, and
    /// checkpoints, `ruda-inspect` and safetensors exports show it.
    template <backend B>
    void insert(param_id id, tensor_primitive<B> tensor, std::string name = {})
    {
        slot entry{std::move(tensor), std::move(name)};
        const std::unique_lock lock{mutex_};
        entries_.insert_or_assign(id, std::move(entry));
    }

    /// The name registered with `id`; empty when it has none or the id is absent.
    [[nodiscard]] std::string name(param_id id) const;

    /// The tensor under `id` if there is one on backend `B`; nothing when the id is absent or
    /// was registered with another backend.
    template <backend B>
    [[nodiscard]] std::optional<tensor_primitive<B>> get(param_id id) const
    {
        const std::shared_lock lock{mutex_};
        return find<B>(id);
    }

    /// Removes and returns the tensor under `id` when it is on backend `B`; an entry of
    /// another backend stays.
    template <backend B>
    std::optional<tensor_primitive<B>> remove(param_id id)
    {
        const std::unique_lock lock{mutex_};
        auto tensor = find<B>(id);
        if (tensor) {
            entries_.erase(id);
        }
        return tensor;
    }

    /// Every id, in ascending order.
    [[nodiscard]] std::vector<param_id> ids() const;
    [[nodiscard]] std::size_t size() const;
    [[nodiscard]] bool empty() const;

    /// Reads every gradient into a record, entries sorted by id, with at most
    /// `options.max_in_flight` reads and `options.max_in_flight_bytes` bytes in flight, telling
    /// `options.on_progress` after each read. The handles are captured by this call, so the
    /// container may change or be destroyed while the reads are in flight. The first failure
    /// ("Missing gradient for parameter 7", "Reading gradient for parameter 7: …") cancels
    /// the other reads; no partial record comes out. Cancelling the awaiting coroutine
    /// cancels the reads and gives `errc::cancelled`.
    ///
    /// On a backend whose reads complete at once (`immediate_reads`, such as `cpu_backend`) the
    /// reads happen in this call, in one pass under the lock, and the awaitable delivers the
    /// record (or `errc::cancelled` if the awaiting coroutine was cancelled by then). On a
    /// backend with a `snapshot_hook` (`cuda_backend`), the hook runs in this call too, so the
    /// snapshot is taken when the call returns (device staging: the trainer may go on).
    template <backend B>
    [[nodiscard]] boost::asio::awaitable<result<gradients_params_record>>
    to_record_async(snapshot_options options = {}) const
    {
        if constexpr (immediate_reads<B>) {
            return deliver(read_now_all<B>(options));
        } else {
            auto handles = capture<B>();
            if constexpr (snapshot_hook<B>) {
                if (auto begun = begin_snapshot<B>(handles); !begun) {
                    return fail(std::move(begun).error());
                }
            }
            return read_all<B>(std::move(handles), options);
        }
    }

    /// Snapshots several containers as one point in time, for a checkpoint of several tensor
    /// groups (weights, gradients, optimizer state): every handle is captured by this call, one
    /// container after the other; the reads share one bound on reads and bytes in flight; a
    /// backend's `snapshot_hook` runs once, for every tensor; the first failure cancels every
    /// read. Gives a record per container, in their order. `labels[k]` names container k's
    /// tensors in messages ("Reading weights for parameter 7: …"; "gradients", or none, reads
    /// "gradient").
    template <backend B>
    [[nodiscard]] static boost::asio::awaitable<result<std::vector<gradients_params_record>>>
    to_records_async(const std::vector<const gradients_params*>& containers,
                     const std::vector<std::string>& labels, snapshot_options options = {})
    {
        const auto label = [&labels](std::size_t k) {
            return k < labels.size() && labels[k] != "gradients" ? labels[k] : std::string{};
        };
        if constexpr (immediate_reads<B>) {
            std::vector<gradients_params_record> records;
            for (std::size_t k = 0; k < containers.size(); ++k) {
                auto record = containers[k]->read_now_all<B>(options);
                if (!record) {
                    const std::string group = label(k);
                    return fail_records(group.empty()
                                            ? std::move(record).error()
                                            : error{record.error().code(),
                                                    "Group " + group + ": " +
                                                        record.error().message()});
                }
                records.push_back(std::move(record).value());
            }
            return deliver_records(std::move(records));
        } else {
            std::vector<captured<B>> handles;
            std::vector<std::size_t> sizes;
            for (std::size_t k = 0; k < containers.size(); ++k) {
                auto taken = containers[k]->capture<B>();
                const std::string group = label(k);
                for (captured<B>& handle : taken) {
                    handle.group = group;
                    handles.push_back(std::move(handle));
                }
                sizes.push_back(taken.size());
            }
            if constexpr (snapshot_hook<B>) {
                if (auto begun = begin_snapshot<B>(handles); !begun) {
                    return fail_records(std::move(begun).error());
                }
            }
            return split_records(read_all<B>(std::move(handles), options), std::move(sizes));
        }
    }

    /// The same snapshot, blocking the calling thread, through `try_read_sync`. Refuses with
    /// `errc::sync_read_unavailable` ("Synchronous gradient read is unavailable: <why>; use
    /// to_record_async"), reading nothing, on a device without blocking reads, on a thread
    /// that must not block (a device worker, an event loop in a `no_blocking_scope`, inside
    /// another sync wait), or when `options.refuse_if` says so.
    template <backend B>
    [[nodiscard]] result<gradients_params_record>
    try_to_record(snapshot_options options = {}) const;

    /// Restores a record onto `device`: `validate_gradients_record` first, so a malformed
    /// record allocates and uploads nothing; then each entry is converted back to its original
    /// dtype and uploaded, with a `float_cast` where the backend gives another dtype. Restore
    /// the model's parameter ids from the same checkpoint first, or these gradients match no
    /// parameter.
    template <backend B>
    [[nodiscard]] static result<gradients_params> from_record(gradients_params_record record,
                                                              const typename B::device& device);

private:
    template <backend B>
    static result<tensor_primitive<B>> upload(gradient_entry entry,
                                              const typename B::device& device)
    {
        if (entry.dtype.is_quantized()) {
            BOOST_OUTCOME_TRY(auto tensor, B::q_from_data(std::move(entry.data), device));
            return tensor_primitive<B>{std::move(tensor)};
        }
        BOOST_OUTCOME_TRY(auto data, std::move(entry.data).convert(entry.dtype));
        BOOST_OUTCOME_TRY(auto tensor, B::float_from_data(std::move(data), device));
        if (!(B::dtype_of(tensor) == entry.dtype)) {
            BOOST_OUTCOME_TRY(tensor, B::float_cast(tensor, entry.dtype));
        }
        return tensor_primitive<B>{std::move(tensor)};
    }

    struct slot {
        std::any tensor; // a tensor_primitive<B> of the backend it was inserted with
        std::string name;
    };

    template <backend B>
    struct captured {
        param_id id;
        std::optional<tensor_primitive<B>> tensor; // empty: missing or another backend's
        std::size_t bytes;                         // what its read will produce
        std::string name;
        std::string group{}; // the group it is read for, in messages; empty: the gradients
    };

    // Under the caller's lock.
    template <backend B>
    [[nodiscard]] std::optional<tensor_primitive<B>> find(param_id id) const
    {
        const auto found = entries_.find(id);
        if (found == entries_.end()) {
            return std::nullopt;
        }
        if (const auto* tensor = tensor_in<B>(found->second)) {
            return *tensor;
        }
        return std::nullopt;
    }

    // The slot's tensor if it is on backend `B`.
    template <backend B>
    [[nodiscard]] static const tensor_primitive<B>* tensor_in(const slot& entry) noexcept
    {
        return std::any_cast<tensor_primitive<B>>(&entry.tensor);
    }

    [[nodiscard]] std::vector<param_id> sorted_ids() const; // under the caller's lock

    // Every handle, in id order, under one lock: the state at one instant.
    template <backend B>
    std::vector<captured<B>> capture() const
    {
        const std::shared_lock lock{mutex_};
        std::vector<captured<B>> handles;
        handles.reserve(entries_.size());
        for (const param_id id : sorted_ids()) {
            const slot& entry = entries_.find(id)->second; // one lookup for tensor and name
            const tensor_primitive<B>* tensor = tensor_in<B>(entry);
            handles.push_back({id,
                               tensor ? std::optional{*tensor} : std::nullopt,
                               tensor ? byte_size<B>(*tensor) : 0, entry.name});
        }
        return handles;
    }

    // The backend's hook, with every tensor present, under no lock (the handles are copies).
    template <snapshot_hook B>
    static result<void> begin_snapshot(std::vector<captured<B>>& handles)
    {
        std::vector<tensor_primitive<B>*> tensors;
        tensors.reserve(handles.size());
        for (captured<B>& handle : handles) {
            if (handle.tensor) {
                tensors.push_back(&*handle.tensor);
            }
        }
        return B::begin_snapshot(tensors);
    }

    static boost::asio::awaitable<result<gradients_params_record>> fail(error failure)
    {
        co_return failure;
    }

    static boost::asio::awaitable<result<std::vector<gradients_params_record>>>
    fail_records(error failure)
    {
        co_return failure;
    }

    // Delivers records taken at once, unless the awaiting coroutine is cancelled by then.
    static boost::asio::awaitable<result<std::vector<gradients_params_record>>>
    deliver_records(std::vector<gradients_params_record> records)
    {
        const bool cancelled = co_await detail::cancel_requested();
        if (cancelled) {
            co_return error{errc::cancelled, "Snapshot cancelled"};
        }
        co_return records;
    }

    // One record of every group's reads, cut back into the groups: `sizes[k]` entries each.
    static boost::asio::awaitable<result<std::vector<gradients_params_record>>>
    split_records(boost::asio::awaitable<result<gradients_params_record>> all,
                  std::vector<std::size_t> sizes)
    {
        auto record = co_await std::move(all);
        if (!record) {
            co_return std::move(record).error();
        }
        auto entries = std::move(record).value().into_entries();
        std::vector<gradients_params_record> records;
        records.reserve(sizes.size());
        auto next = entries.begin();
        for (const std::size_t size : sizes) {
            std::vector<gradient_entry> group(std::make_move_iterator(next),
                                              std::make_move_iterator(next + size));
            next += static_cast<std::ptrdiff_t>(size);
            records.emplace_back(std::move(group));
        }
        co_return records;
    }

    // Counts completed reads for `options.on_progress`; used on the gather's strand only.
    struct progress_counter {
        const std::function<void(const snapshot_progress&)>& report;
        snapshot_progress now;

        void read_done(std::size_t bytes)
        {
            ++now.tensors_done;
            now.bytes_done += bytes;
            if (report) {
                report(now);
            }
        }
    };

    template <backend B>
    static error registered_elsewhere(param_id id)
    {
        return error{errc::backend_mismatch, "Missing gradient for parameter " + to_string(id) +
                                                 ": it was registered with another backend than " +
                                                 std::string{B::name()}};
    }

    static error read_failed(param_id id, std::string_view name, const error& cause)
    {
        return parameter_error("Reading gradient", id, name, cause);
    }

    template <backend B>
    static boost::asio::awaitable<result<gradient_entry>> read_one(const captured<B>& handle,
                                                                   progress_counter& progress)
    {
        if (!handle.tensor) {
            co_return registered_elsewhere<B>(handle.id);
        }
        const dtype original = dtype_of<B>(*handle.tensor);
        auto data = co_await into_data<B>(*handle.tensor);
        if (!data) {
            co_return handle.group.empty()
                ? read_failed(handle.id, handle.name, data.error())
                : parameter_error("Reading " + handle.group, handle.id, handle.name, data.error());
        }
        progress.read_done(data.value().bytes().size());
        co_return gradient_entry{handle.id, original, std::move(data).value(), handle.name};
    }

    // Every read of an immediate_reads backend, in one pass under one lock.
    template <immediate_reads B>
    [[nodiscard]] result<gradients_params_record>
    read_now_all(const snapshot_options& options) const
    {
        const std::shared_lock lock{mutex_};
        struct found {
            param_id id;
            const tensor_primitive<B>* tensor;
            const std::string* name;
        };
        std::vector<found> tensors;
        detail::reserve_prepared(tensors, entries_.size());
        for (const param_id id : sorted_ids()) {
            const slot& entry = entries_.find(id)->second;
            const auto* tensor = tensor_in<B>(entry);
            if (tensor == nullptr) {
                return registered_elsewhere<B>(id);
            }
            tensors.push_back({id, tensor, &entry.name});
        }
        progress_counter progress{options.on_progress, {.tensors_total = tensors.size()}};
        for (const found& f : tensors) {
            progress.now.bytes_total += byte_size<B>(*f.tensor);
        }
        std::vector<gradient_entry> entries;
        detail::reserve_prepared(entries, tensors.size());
        for (const found& f : tensors) {
            auto data = std::visit([](const auto& t) { return B::read_now(t); }, *f.tensor);
            if (!data) {
                return read_failed(f.id, *f.name, data.error());
            }
            progress.read_done(data.value().bytes().size());
            entries.push_back({f.id, dtype_of<B>(*f.tensor), std::move(data).value(), *f.name});
        }
        return gradients_params_record{std::move(entries)};
    }

    // Delivers a snapshot already taken, unless the awaiting coroutine is cancelled by then.
    static boost::asio::awaitable<result<gradients_params_record>>
    deliver(result<gradients_params_record> record)
    {
        // Not inside the `if`: GCC 12 miscompiles a co_await in a condition.
        const bool cancelled = co_await detail::cancel_requested();
        if (cancelled) {
            co_return error{errc::cancelled, "Snapshot cancelled"};
        }
        co_return record;
    }

    template <backend B>
    static boost::asio::awaitable<result<gradients_params_record>>
    read_all(std::vector<captured<B>> handles, snapshot_options options)
    {
        progress_counter progress{options.on_progress, {.tensors_total = handles.size()}};
        for (const captured<B>& handle : handles) {
            progress.now.bytes_total += handle.bytes;
        }
        const auto weight = [&handles](std::size_t i) { return handles[i].bytes; };
        const auto read = [&handles, &progress](std::size_t i) {
            return read_one<B>(handles[i], progress);
        };
        const gather_limits limits{.max_in_flight = options.max_in_flight,
                                   .max_in_flight_weight = options.max_in_flight_bytes};
        auto entries = co_await gather(handles.size(), limits, weight, read);
        if (!entries) {
            // Cancelled by the caller: say so in the snapshot's terms, not the gather's.
            // (The state itself: awaiting another coroutine now would throw the cancellation.)
            const auto state = co_await boost::asio::this_coro::cancellation_state;
            if (entries.error() == errc::cancelled &&
                state.cancelled() != boost::asio::cancellation_type::none) {
                co_return error{errc::cancelled,
                                "Snapshot cancelled after " +
                                    std::to_string(progress.now.tensors_done) + " of " +
                                    std::to_string(handles.size()) + " gradients were read"};
            }
            co_return std::move(entries).error();
        }
        co_return gradients_params_record{std::move(entries).value()};
    }

    mutable std::shared_mutex mutex_;
    std::unordered_map<param_id, slot> entries_;
};

template <backend B>
result<gradients_params> gradients_params::from_record(gradients_params_record record,
                                                       const typename B::device& device)
{
    BOOST_OUTCOME_TRY(validate_gradients_record(record));
    gradients_params grads;
    auto entries = std::move(record).into_entries();
    grads.entries_.reserve(entries.size());
    for (gradient_entry& entry : entries) {
        const param_id id = entry.id;
        std::string name = std::move(entry.name);
        auto tensor = upload<B>(std::move(entry), device);
        if (!tensor) {
            return parameter_error("Restoring gradient", id, tensor.error());
        }
        grads.insert<B>(id, std::move(tensor).value(), std::move(name));
    }
    return grads;
}

template <backend B>
result<gradients_params_record> gradients_params::try_to_record(snapshot_options options) const
{
    sync_read_options sync;
    sync.refuse_if = options.refuse_if;
    sync.deadline = options.deadline;
    sync.what = "gradient read";
    sync.instead = "to_record_async";
    if constexpr (immediate_reads<B>) {
        // Reads that never wait cannot block, whatever thread this is; the sync wrapper still
        // applies `refuse_if` and the refusals of threads that must not block, as for any backend.
        return try_read_sync([&] { return deliver(read_now_all<B>(options)); }, sync);
    } else {
        auto handles = capture<B>();
        if constexpr (snapshot_hook<B>) {
            BOOST_OUTCOME_TRY(begin_snapshot<B>(handles));
        }
        sync.blocking_reads = std::all_of(handles.begin(), handles.end(), [](const captured<B>& h) {
            return !h.tensor || B::blocking_reads(device_of<B>(*h.tensor));
        });
        return try_read_sync([&] { return read_all<B>(std::move(handles), options); }, sync);
    }
}

} // namespace ruda
