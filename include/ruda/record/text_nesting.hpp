// cereal's JSON and XML archives parse their whole input when constructed, recursively: text
// nested a million levels deep overflows the stack before any of ruda's checks can run. These
// scans bound the nesting first, without recursion, for text from anywhere untrusted.
//
//     std::string text = read_all(file);
//     ruda::check_json_nesting(text).value();       // before cereal sees it
//     std::istringstream in{text};
//     cereal::JSONInputArchive archive{in};
#pragma once

#include <ruda/error.hpp>

#include <cstddef>
#include <string_view>

namespace ruda {

/// Deeper than any record needs (a gradient record nests 6 levels in its own JSON archive, 7
/// in XML) and far shallower than a parser's stack allows.
inline constexpr std::size_t max_text_nesting = 256;

/// `errc::malformed_record` naming the byte where JSON `text` opens its `max_depth + 1`-th
/// nested object or array (brackets inside strings do not count).
[[nodiscard]] result<void> check_json_nesting(std::string_view text,
                                              std::size_t max_depth = max_text_nesting);

/// The same for XML: elements opened and not yet closed (comments, CDATA, processing
/// instructions, declarations and quoted attribute values skipped; `<a/>` opens nothing).
[[nodiscard]] result<void> check_xml_nesting(std::string_view text,
                                             std::size_t max_depth = max_text_nesting);

} // namespace ruda
