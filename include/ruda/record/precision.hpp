// Precision settings: the float dtype a record stores non-quantized gradients in. The
// original dtype travels beside the data, so a restore converts back.
#pragma once

#include <ruda/tensor/dtype.hpp>

namespace ruda {

/// Stores floats as f32: lossless for f32, flex32, f16 and bf16; narrows f64.
struct full_precision {
    static dtype float_dtype() { return dtype::f32(); }
};

/// Stores floats as f16: lossless only for f16 (bf16's large values overflow to inf).
struct half_precision {
    static dtype float_dtype() { return dtype::f16(); }
};

/// Stores floats as f64: lossless for every float dtype.
struct double_precision {
    static dtype float_dtype() { return dtype::f64(); }
};

template <class S>
concept precision_settings = requires {
    { S::float_dtype() } -> std::same_as<dtype>;
};

} // namespace ruda
