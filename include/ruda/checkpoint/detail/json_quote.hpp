// A string as a JSON string literal, for the JSON ruda writes by hand (safetensors headers,
// ruda-inspect --json).
#pragma once

#include <string>
#include <string_view>

namespace ruda::detail {

/// `text` in double quotes, with '"', '\' and control characters escaped. UTF-8 passes as is.
[[nodiscard]] std::string json_quote(std::string_view text);

} // namespace ruda::detail
