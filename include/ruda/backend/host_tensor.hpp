// An immutable, shared handle to host tensor storage. Copies share the bytes; a write makes
// a new storage, so a snapshot taken earlier never sees a torn or half-written tensor.
#pragma once

#include <ruda/tensor/dtype.hpp>
#include <ruda/tensor/tensor_data.hpp>

#include <cstddef>
#include <memory>
#include <utility>

namespace ruda {

/// `Tag` keeps float and quantized handles apart as distinct types.
template <class Tag>
class host_tensor {
public:
    explicit host_tensor(tensor_data data)
        : storage_(std::make_shared<const tensor_data>(std::move(data)))
    {
    }

    [[nodiscard]] const tensor_data& data() const noexcept { return *storage_; }
    [[nodiscard]] dtype get_dtype() const { return storage_->dtype(); }
    [[nodiscard]] std::size_t byte_size() const noexcept { return storage_->bytes().size(); }
    /// The storage itself, shared with every copy of this handle.
    [[nodiscard]] const std::shared_ptr<const tensor_data>& storage() const noexcept
    {
        return storage_;
    }
    /// Whether both handles share one storage (a copy, not an equal tensor).
    [[nodiscard]] bool shares_storage_with(const host_tensor& other) const noexcept
    {
        return storage_ == other.storage_;
    }

private:
    std::shared_ptr<const tensor_data> storage_;
};

} // namespace ruda
