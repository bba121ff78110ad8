// Nesting depth of JSON and XML text by one pass over its bytes, without parsing it: the scan
// only has to find where a recursive parser would go deeper than allowed.
#include <ruda/record/text_nesting.hpp>

#include <string>

namespace ruda {
namespace {

error too_deep(const char* kind, std::size_t max_depth, std::size_t at)
{
    return error{errc::malformed_record, std::string{kind} + " nests deeper than " +
                                             std::to_string(max_depth) + " levels at byte " +
                                             std::to_string(at)};
}

// Where `end` next occurs at or after `from` (past its end), or the text's size.
std::size_t past(std::string_view text, std::size_t from, std::string_view end)
{
    const std::size_t at = text.find(end, from);
    return at == std::string_view::npos ? text.size() : at + end.size();
}

} // namespace

result<void> check_json_nesting(std::string_view text, std::size_t max_depth)
{
    std::size_t depth = 0;
    bool in_string = false;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (in_string) {
            if (c == '\\') {
                ++i; // the escaped character, a quote say, ends nothing
            } else if (c == '"') {
                in_string = false;
            }
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{' || c == '[') {
            if (++depth > max_depth) {
                return too_deep("JSON", max_depth, i);
            }
        } else if ((c == '}' || c == ']') && depth > 0) {
            --depth;
        }
    }
    return success();
}

result<void> check_xml_nesting(std::string_view text, std::size_t max_depth)
{
    std::size_t depth = 0;
    std::size_t i = text.find('<');
    while (i != std::string_view::npos && i < text.size()) {
        const std::string_view rest = text.substr(i);
        if (rest.starts_with("<!--")) {
            i = past(text, i, "-->");
        } else if (rest.starts_with("<![CDATA[")) {
            i = past(text, i, "]]>");
        } else if (rest.starts_with("<?")) {
            i = past(text, i, "?>");
        } else if (rest.starts_with("<!")) {
            i = past(text, i, ">");
        } else if (rest.starts_with("</")) {
            depth -= depth > 0 ? 1 : 0;
            i = past(text, i, ">");
        } else {
            // A start tag: to its '>', past quoted attribute values, which may hold one.
            const std::size_t start = i;
            char quote = 0;
            ++i;
            while (i < text.size() && (quote != 0 || text[i] != '>')) {
                if (quote != 0 && text[i] == quote) {
                    quote = 0;
                } else if (quote == 0 && (text[i] == '"' || text[i] == '\'')) {
                    quote = text[i];
                }
                ++i;
            }
            const bool empty_element = i < text.size() && text[i - 1] == '/';
            if (!empty_element && ++depth > max_depth) {
                return too_deep("XML", max_depth, start);
            }
            ++i;
        }
        i = text.find('<', i);
    }
    return success();
}

} // namespace ruda
