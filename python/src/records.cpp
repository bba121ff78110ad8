#include "records.hpp"

#include "dlpack_export.hpp"
#include "errors.hpp"

#include <ruda/checkpoint/checkpoint.hpp>
#include <ruda/checkpoint/detail/io_jobs.hpp>
#include <ruda/optim/validate_record.hpp>

#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

namespace py = pybind11;

namespace ruda::python {

std::string key_of(const gradient_entry& entry)
{
    return entry.name.empty() ? to_string(entry.id) : entry.name;
}

record_handle::record_handle(std::shared_ptr<const gradients_params_record> shared)
    : record(std::move(shared))
{
}

const std::unordered_map<std::string, std::size_t>& record_handle::keys() const
{
    // Built at the first lookup by name, GIL held: a record only saved never needs it.
    if (!by_key) {
        auto keys = std::make_shared<std::unordered_map<std::string, std::size_t>>();
        const auto& entries = record->entries();
        keys->reserve(entries.size());
        for (std::size_t i = 0; i < entries.size(); ++i) {
            keys->emplace(key_of(entries[i]), i);
        }
        by_key = std::move(keys);
    }
    return *by_key;
}

result<std::vector<tensor_view>> borrow_all(py::handle names, py::handle tensors, bool grads)
{
    const auto name_list = py::reinterpret_borrow<py::list>(names);
    const auto tensor_list = py::reinterpret_borrow<py::list>(tensors);
    if (name_list.size() != tensor_list.size()) {
        throw py::value_error("as many names as tensors");
    }
    std::vector<tensor_view> views;
    views.reserve(name_list.size());
    for (std::size_t i = 0; i < name_list.size(); ++i) {
        py::handle tensor = tensor_list[i];
        py::object grad;
        if (grads) {
            // A parameter's .grad, read here: no Python list, no tuple, no garbage
            // collection pass per snapshot of a model of many tensors.
            static PyObject* const grad_name = interned("grad");
            grad = attribute(tensor, grad_name);
            if (grad.is_none()) {
                continue;
            }
            tensor = grad;
        }
        Py_ssize_t size = 0;
        const char* utf8 = PyUnicode_AsUTF8AndSize(name_list[i].ptr(), &size);
        if (utf8 == nullptr) {
            throw py::error_already_set();
        }
        if (size == 0) {
            return error{errc::malformed_record, "A tensor has an empty name"};
        }
        BOOST_OUTCOME_TRY(auto view,
                          borrow_tensor(tensor, std::string{utf8, static_cast<std::size_t>(size)}));
        views.push_back(std::move(view));
    }
    // In id order, which the record keeps; two of one id are refused before any copy. The
    // ids are sorted, not the views: a view is a hundred bytes and more to move.
    std::vector<std::pair<param_id, std::size_t>> order;
    order.reserve(views.size());
    for (std::size_t i = 0; i < views.size(); ++i) {
        order.emplace_back(views[i].id, i);
    }
    std::sort(order.begin(), order.end());
    for (std::size_t i = 1; i < order.size(); ++i) {
        if (order[i].first == order[i - 1].first) {
            const std::string& first = views[order[i - 1].second].name;
            const std::string& second = views[order[i].second].name;
            return error{errc::duplicate_param_id,
                         first == second
                             ? "Tensor " + first + " is given twice"
                             : "Tensors " + first + " and " + second + " have one id, " +
                                   to_string(order[i].first) + "; rename one"};
        }
    }
    // The views moved into that order in place, a cycle of the permutation at a time: no second
    // vector of views to allocate and fault in.
    for (std::size_t start = 0; start < order.size(); ++start) {
        if (order[start].second == start) {
            continue;
        }
        tensor_view held = std::move(views[start]);
        std::size_t to = start;
        while (order[to].second != start) {
            const std::size_t from = order[to].second;
            views[to] = std::move(views[from]);
            order[to].second = to;
            to = from;
        }
        views[to] = std::move(held);
        order[to].second = to;
    }
    return views;
}

result<borrowed_tensors> borrow_snapshot(py::handle names, py::handle tensors, bool grads)
{
    BOOST_OUTCOME_TRY(auto views, borrow_all(names, tensors, grads));
    return borrowed_tensors::take(std::move(views));
}

namespace {

// Releases the views' producer tensors however the copy ends (`release_all`, one GIL hold).
class release_when_done {
public:
    explicit release_when_done(std::vector<tensor_view>& views) : views_(views) {}
    release_when_done(const release_when_done&) = delete;
    release_when_done& operator=(const release_when_done&) = delete;
    ~release_when_done() { release_all(views_); }

private:
    std::vector<tensor_view>& views_;
};

} // namespace

result<gradients_params_record> copy_views(std::vector<tensor_view> views,
                                           const std::function<bool()>& stop)
{
    // Small tensors share one allocation (a slice each), large ones have their own: a
    // model of 100,000 small tensors costs one allocation, not 100,000.
    constexpr std::size_t piece = std::size_t{4} << 20U;
    constexpr std::size_t small = std::size_t{64} << 10U;
    constexpr auto in_slab = [](std::size_t bytes) { return (bytes + 63) / 64 * 64; };
    const release_when_done release{views};
    const error cancelled{errc::cancelled, "The snapshot was cancelled"};
    std::size_t slab_bytes = 0;
    std::vector<std::size_t> large; // the views with a storage of their own
    std::uint64_t large_bytes = 0;
    for (std::size_t i = 0; i < views.size(); ++i) {
        if (views[i].bytes < small) {
            slab_bytes += in_slab(views[i].bytes);
        } else {
            large.push_back(i);
            large_bytes += views[i].bytes;
        }
    }
    // The large ones allocated (their fresh pages mapped) and copied by up to a thread per
    // core, as the C++ backends' read workers do: one thread alone leaves the memory's
    // bandwidth and the page faults of the other cores unused.
    std::vector<storage> owned(large.size());
    BOOST_OUTCOME_TRY(detail::run_jobs(
        large.size(), detail::io_threads(0, large_bytes),
        [&](std::size_t k, unsigned) -> result<void> {
            const tensor_view& view = views[large[k]];
            BOOST_OUTCOME_TRY(auto own, storage::try_allocate(view.bytes));
            std::uint8_t* to = own.writable_data();
            for (std::size_t at = 0; at < view.bytes; at += piece) {
                if (stop()) {
                    return cancelled;
                }
                std::memcpy(to + at, view.data + at, std::min(piece, view.bytes - at));
            }
            owned[k] = std::move(own);
            return success();
        }));
    BOOST_OUTCOME_TRY(auto slab, storage::try_allocate(slab_bytes));
    std::uint8_t* slab_at = slab_bytes == 0 ? nullptr : slab.writable_data();
    std::size_t slab_used = 0;
    std::vector<gradient_entry> entries;
    entries.reserve(views.size());
    std::size_t since_asked = 0;
    std::size_t next_large = 0;
    for (tensor_view& view : views) {
        storage bytes;
        if (view.bytes < small) {
            since_asked += view.bytes;
            if (since_asked >= piece) {
                since_asked = 0;
                if (stop()) {
                    return cancelled;
                }
            }
            if (view.bytes != 0) {
                std::memcpy(slab_at + slab_used, view.data, view.bytes);
            }
            bytes = slab.slice(slab_used, view.bytes);
            slab_used += in_slab(view.bytes);
        } else {
            bytes = std::move(owned[next_large++]);
        }
        entries.push_back({view.id, view.type,
                           tensor_data{std::move(bytes), view.shape(), view.type},
                           std::move(view.name)});
    }
    if (stop()) {
        return cancelled;
    }
    return gradients_params_record{std::move(entries)};
}

namespace {

// The entry of a key (a name, or an id as an int); nothing when absent, with the key's text.
std::optional<std::size_t> index_of(const record_handle& r, py::handle key, std::string& text)
{
    if (py::isinstance<py::int_>(key) && !py::isinstance<py::bool_>(key)) {
        const auto id = key.cast<std::uint64_t>();
        const auto& entries = r.record->entries();
        const auto at = std::find_if(entries.begin(), entries.end(),
                                     [id](const gradient_entry& e) { return e.id.val() == id; });
        if (at != entries.end()) {
            return static_cast<std::size_t>(at - entries.begin());
        }
        text = std::to_string(id);
        return std::nullopt;
    }
    if (!py::isinstance<py::str>(key)) {
        throw py::type_error("A record is indexed by a tensor's name (str) or id (int)");
    }
    text = key.cast<std::string>();
    const auto& keys = r.keys();
    const auto at = keys.find(text);
    if (at == keys.end()) {
        return std::nullopt;
    }
    return at->second;
}

tensor_handle tensor_at(const record_handle& r, py::handle key)
{
    std::string text;
    const auto index = index_of(r, key, text);
    if (!index) {
        PyErr_SetObject(PyExc_KeyError, py::str(text).ptr());
        throw py::error_already_set();
    }
    return {r.record, *index};
}

py::tuple shape_tuple(const ruda::shape& dims)
{
    py::tuple out(dims.size());
    for (std::size_t d = 0; d < dims.size(); ++d) {
        out[d] = py::int_(dims[d]);
    }
    return out;
}

py::list record_keys(const record_handle& r)
{
    py::list keys;
    for (const gradient_entry& entry : r.record->entries()) {
        keys.append(key_of(entry));
    }
    return keys;
}

} // namespace

void bind_records(py::module_& m)
{
    py::class_<tensor_handle>(
        m, "Tensor",
        "One tensor of a record: its name, id, dtype and shape, and its bytes, which "
        "torch.from_dlpack and numpy.from_dlpack share without a copy (the record lives while "
        "a view does).")
        .def_property_readonly(
            "name", [](const tensor_handle& t) { return t.entry().name; },
            "The parameter's name (empty when the writer gave none).")
        .def_property_readonly(
            "id", [](const tensor_handle& t) { return t.entry().id.val(); },
            "The parameter id: XXH3-64 of the name, as ruda's C++ API derives it.")
        .def_property_readonly(
            "dtype", [](const tensor_handle& t) { return to_string(t.entry().data.dtype()); },
            "The dtype of the bytes held (\"f32\", \"bf16\", \"i64\"...).")
        .def_property_readonly(
            "original_dtype", [](const tensor_handle& t) { return to_string(t.entry().dtype); },
            "The dtype the tensor had when snapshot (a precision setting may store another).")
        .def_property_readonly(
            "shape", [](const tensor_handle& t) { return shape_tuple(t.entry().data.shape()); },
            "The dimensions, outermost first.")
        .def_property_readonly(
            "nbytes", [](const tensor_handle& t) { return t.entry().data.bytes().size(); },
            "The size of the bytes held.")
        .def(
            "tobytes",
            [](const tensor_handle& t) {
                const auto& bytes = t.entry().data.bytes();
                return py::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
            },
            "A copy of the bytes, little-endian elements in row-major order.")
        .def("__dlpack__", &export_dlpack, py::kw_only(), py::arg("stream") = py::none(),
             py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(),
             py::arg("copy") = py::none(),
             "A DLPack capsule of the tensor's bytes, shared, not copied (mapped bytes are "
             "copied once, since a consumer may write).")
        .def(
            "__dlpack_device__", [](const tensor_handle&) { return py::make_tuple(1, 0); },
            "(1, 0): the CPU.")
        .def("__repr__", [](const tensor_handle& t) {
            return "ruda.Tensor(" + key_of(t.entry()) + ", " + to_string(t.entry().data.dtype()) +
                   ", " + to_string(t.entry().data.shape()) + ")";
        });

    py::class_<record_handle>(
        m, "Record",
        "A host-owned snapshot of tensors, in id order, read by name (or id). Immutable.")
        .def("__len__", [](const record_handle& r) { return r.record->entries().size(); })
        .def("__getitem__",
             [](const record_handle& r, py::handle key) { return tensor_at(r, key); })
        .def("__contains__",
             [](const record_handle& r, py::handle key) {
                 std::string text;
                 return index_of(r, key, text).has_value();
             })
        .def("keys", &record_keys, "Each tensor's name (its decimal id when it has none).")
        .def("__iter__", [](const record_handle& r) { return py::iter(record_keys(r)); })
        .def(
            "ids",
            [](const record_handle& r) {
                py::list ids;
                for (const gradient_entry& e : r.record->entries()) {
                    ids.append(e.id.val());
                }
                return ids;
            },
            "Each tensor's id, ascending.")
        .def(
            "values",
            [](const record_handle& r) {
                py::list out;
                for (std::size_t i = 0; i < r.record->entries().size(); ++i) {
                    out.append(py::cast(tensor_handle{r.record, i}));
                }
                return out;
            },
            "Each tensor, in id order.")
        .def(
            "items",
            [](const record_handle& r) {
                py::list out;
                const auto& entries = r.record->entries();
                for (std::size_t i = 0; i < entries.size(); ++i) {
                    out.append(
                        py::make_tuple(key_of(entries[i]), py::cast(tensor_handle{r.record, i})));
                }
                return out;
            },
            "(key, tensor) pairs, in id order.")
        .def_property_readonly(
            "nbytes",
            [](const record_handle& r) {
                std::size_t total = 0;
                for (const gradient_entry& e : r.record->entries()) {
                    total += e.data.bytes().size();
                }
                return total;
            },
            "The bytes of every tensor together.")
        .def(
            "validate",
            [](const record_handle& r, bool gradients) {
                value_or_raise(gradients ? validate_gradients_record(*r.record)
                                         : validate_tensor_group(*r.record));
            },
            py::arg("gradients") = true,
            "Every check a restore makes before it allocates anything (the C++ from_record's: "
            "duplicate ids, dtypes, byte counts, overflow, quantized layouts), raising the "
            "first failure as ruda.Error; gradients=False allows the integer tensors of other "
            "groups.")
        .def("__eq__",
             [](const record_handle& a, const record_handle& b) { return *a.record == *b.record; })
        .def("__repr__", [](const record_handle& r) {
            return "ruda.Record(" + std::to_string(r.record->entries().size()) + " tensors)";
        });

    m.def(
        "param_id", [](const std::string& name) { return param_id::from_name(name).val(); },
        py::arg("name"),
        "The id of a named parameter: XXH3-64 of its UTF-8 bytes, as the C++ API derives it.");
}

} // namespace ruda::python
