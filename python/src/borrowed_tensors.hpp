// One snapshot's borrowed tensors: the CUDA ones handed to ruda's CUDA backend when the
// snapshot is taken (device staging done then) and read on their devices' workers, the host
// ones copied on ruda's threads; together one record.
#pragma once

#include "dlpack_import.hpp"

#include <ruda/optim/gradients_params_record.hpp>

#include <functional>
#include <memory>
#include <vector>

namespace ruda::python {

class borrowed_tensors {
public:
    /// GIL held: `views` in id order, as `borrow_all` gives them. The CUDA ones are borrowed
    /// by `cuda_backend` on their devices (opened now if need be) and their snapshot is begun,
    /// so a device with device staging has copied them when this returns. Failures name the
    /// tensor.
    [[nodiscard]] static result<borrowed_tensors> take(std::vector<tensor_view> views);

    borrowed_tensors(borrowed_tensors&&) noexcept;
    borrowed_tensors& operator=(borrowed_tensors&&) noexcept;
    ~borrowed_tensors(); // releases the producers' tensors not yet released (`release_all`)

    /// No GIL needed, once: the CUDA reads run to their end on this thread, then the host
    /// tensors are copied (`copy_views`); one record in id order. `stop()`, asked as it goes,
    /// cancels them when true (`errc::cancelled`). The CUDA tensors are released only once no
    /// copy of theirs is left in flight.
    [[nodiscard]] result<gradients_params_record> read(const std::function<bool()>& stop);

private:
    struct cuda_reads;
    borrowed_tensors();

    std::vector<tensor_view> host_;
    std::vector<tensor_view> cuda_;
    std::unique_ptr<cuda_reads> reads_; // null without CUDA tensors
};

} // namespace ruda::python
