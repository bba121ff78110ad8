// Names in checkpoints and safetensors files are UTF-8 text: checked where they are made and
// where they are read, so that every name a tool prints (as JSON, say) is text.
#pragma once

#include <string_view>

namespace ruda::detail {

/// Whether `text` is well-formed UTF-8 (RFC 3629: no overlong form, no surrogate, nothing
/// past U+10FFFF).
[[nodiscard]] bool valid_utf8(std::string_view text) noexcept;

} // namespace ruda::detail
