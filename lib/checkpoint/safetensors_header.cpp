// The safetensors header reader: a JSON tokenizer for the format's grammar and the schema
// checks on what it reads.
#include <ruda/checkpoint/detail/safetensors_header.hpp>

#include <ruda/checkpoint/checkpoint.hpp>
#include <ruda/checkpoint/detail/utf8.hpp>
#include <ruda/optim/param_id.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ruda::detail {
namespace {

using tensor_plan = safetensors_tensor_plan;
constexpr std::string_view original_dtype_key = safetensors_original_dtype_key;
constexpr std::string_view id_key = safetensors_id_key;

struct dtype_name {
    std::string_view name;
    dtype::kind kind;
};

// safetensors' names of ruda's dtypes: the float types gradients have (F32 also carries
// flex32), and the integer and bool types other tensor groups may hold (a step count, a
// generator's state, an integer buffer). BOOL is one byte per value, ruda's native bool.
constexpr std::array<dtype_name, 13> dtype_names{{
    {"F64", dtype::kind::f64},
    {"F32", dtype::kind::f32},
    {"F16", dtype::kind::f16},
    {"BF16", dtype::kind::bf16},
    {"I64", dtype::kind::i64},
    {"I32", dtype::kind::i32},
    {"I16", dtype::kind::i16},
    {"I8", dtype::kind::i8},
    {"U64", dtype::kind::u64},
    {"U32", dtype::kind::u32},
    {"U16", dtype::kind::u16},
    {"U8", dtype::kind::u8},
    {"BOOL", dtype::kind::boolean},
}};

} // namespace

std::optional<std::string_view> safetensors_dtype_name(dtype type)
{
    if (type.is_bool() && type.get_bool_store() != bool_store::native) {
        return std::nullopt;
    }
    const auto kind = type.get_kind() == dtype::kind::flex32 ? dtype::kind::f32 : type.get_kind();
    for (const dtype_name& entry : dtype_names) {
        if (entry.kind == kind) {
            return entry.name;
        }
    }
    return std::nullopt;
}

std::optional<dtype> safetensors_dtype_from_name(std::string_view name)
{
    for (const dtype_name& entry : dtype_names) {
        if (entry.name == name) {
            return dtype::from_kind(entry.kind);
        }
    }
    return std::nullopt;
}

namespace {

// A float dtype by ruda's name ("flex32"), for the original dtypes kept in the metadata.
std::optional<dtype> float_dtype_from_name(std::string_view name)
{
    for (const auto kind : {dtype::kind::f64, dtype::kind::f32, dtype::kind::flex32,
                            dtype::kind::f16, dtype::kind::bf16}) {
        if (to_string(kind) == name) {
            return dtype::from_kind(kind);
        }
    }
    return std::nullopt;
}

} // namespace

std::optional<std::uint64_t> decimal_id(std::string_view name)
{
    if (name.empty() || name.size() > 20 || (name.size() > 1 && name[0] == '0')) {
        return std::nullopt;
    }
    std::uint64_t value = 0;
    const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), value);
    if (ec != std::errc{} || end != name.data() + name.size()) {
        return std::nullopt;
    }
    return value;
}

namespace {

// The header's JSON, read by the format's own grammar: an object whose members are tensors
// ({"dtype": string, "shape": [uint...], "data_offsets": [uint, uint]}) or "__metadata__"
// (an object of strings). Nothing nests deeper, so no input can exhaust the stack; strings
// take every JSON escape. Errors say what was expected where.
class json_cursor {
public:
    json_cursor(std::string_view text, const std::string& source) : text_(text), source_(source) {}

    // Skips whitespace; whether the next character is `c` (consumed if so).
    bool consume(char c)
    {
        skip_space();
        if (pos_ < text_.size() && text_[pos_] == c) {
            ++pos_;
            return true;
        }
        return false;
    }
    result<void> expect(char c)
    {
        if (!consume(c)) {
            return fail(std::string{"'"} + c + "'");
        }
        return success();
    }
    bool at_end()
    {
        skip_space();
        return pos_ == text_.size();
    }

    // '{' (string ':' member(name))* '}', members separated by ','.
    template <class Member>
    result<void> object(Member member)
    {
        BOOST_OUTCOME_TRY(expect('{'));
        if (consume('}')) {
            return success();
        }
        do {
            BOOST_OUTCOME_TRY(auto name, string());
            BOOST_OUTCOME_TRY(expect(':'));
            BOOST_OUTCOME_TRY(member(std::move(name)));
        } while (consume(','));
        return expect('}');
    }

    // At most `most` of them, so that no array costs more memory than that.
    result<std::vector<std::uint64_t>> integers(std::size_t most)
    {
        BOOST_OUTCOME_TRY(expect('['));
        std::vector<std::uint64_t> values;
        if (consume(']')) {
            return values;
        }
        do {
            if (values.size() == most) {
                return fail("at most " + std::to_string(most) + " integers");
            }
            BOOST_OUTCOME_TRY(auto value, integer());
            values.push_back(value);
        } while (consume(','));
        BOOST_OUTCOME_TRY(expect(']'));
        return values;
    }

    result<std::string> string()
    {
        BOOST_OUTCOME_TRY(expect('"'));
        std::string out;
        while (pos_ < text_.size()) {
            const char c = text_[pos_++];
            if (c == '"') {
                if (!detail::valid_utf8(out)) {
                    return fail("UTF-8 text in the string ending");
                }
                return out;
            }
            if (static_cast<unsigned char>(c) < 0x20) {
                return fail("no control character in a string");
            }
            if (c != '\\') {
                out += c;
                continue;
            }
            BOOST_OUTCOME_TRY(escape(out));
        }
        return fail("the end of a string");
    }

    error fail(const std::string& expected) const
    {
        return error{errc::malformed_record, "safetensors " + source_ +
                                                 ": the header is malformed: expected " +
                                                 expected + " at byte " + std::to_string(pos_)};
    }

private:
    void skip_space()
    {
        while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                       text_[pos_] == '\n' || text_[pos_] == '\r')) {
            ++pos_;
        }
    }

    result<std::uint64_t> integer()
    {
        skip_space();
        const std::size_t start = pos_;
        std::uint64_t value = 0;
        while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
            const auto digit = static_cast<std::uint64_t>(text_[pos_] - '0');
            if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) {
                return fail("an unsigned integer below 2^64");
            }
            value = value * 10 + digit;
            ++pos_;
        }
        const bool digits = pos_ > start;
        const bool leading_zero = pos_ - start > 1 && text_[start] == '0';
        const bool fraction = pos_ < text_.size() &&
                              (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E');
        if (!digits || leading_zero || fraction) {
            pos_ = start;
            return fail("an unsigned integer");
        }
        return value;
    }

    result<unsigned> hex4()
    {
        if (text_.size() - pos_ < 4) {
            return fail("4 hexadecimal digits");
        }
        unsigned value = 0;
        const auto [end, ec] =
            std::from_chars(text_.data() + pos_, text_.data() + pos_ + 4, value, 16);
        if (ec != std::errc{} || end != text_.data() + pos_ + 4) {
            return fail("4 hexadecimal digits");
        }
        pos_ += 4;
        return value;
    }

    // After a backslash: one escape, appended as UTF-8.
    result<void> escape(std::string& out)
    {
        if (pos_ == text_.size()) {
            return fail("an escape");
        }
        const char c = text_[pos_++];
        const std::string_view simple = "\"\\/bfnrt";
        const std::string_view meaning = "\"\\/\b\f\n\r\t";
        if (const auto at = simple.find(c); at != std::string_view::npos) {
            out += meaning[at];
            return success();
        }
        if (c != 'u') {
            --pos_;
            return fail("an escape");
        }
        BOOST_OUTCOME_TRY(unsigned code, hex4());
        if (code >= 0xDC00 && code <= 0xDFFF) {
            return fail("no lone low surrogate");
        }
        if (code >= 0xD800 && code <= 0xDBFF) {
            if (!(text_.substr(pos_, 2) == "\\u")) {
                return fail("a low surrogate");
            }
            pos_ += 2;
            BOOST_OUTCOME_TRY(const unsigned low, hex4());
            if (low < 0xDC00 || low > 0xDFFF) {
                return fail("a low surrogate");
            }
            code = 0x10000 + ((code - 0xD800) << 10U) + (low - 0xDC00);
        }
        if (code < 0x80) {
            out += static_cast<char>(code);
        } else if (code < 0x800) {
            out += static_cast<char>(0xC0 | (code >> 6U));
            out += static_cast<char>(0x80 | (code & 0x3FU));
        } else if (code < 0x10000) {
            out += static_cast<char>(0xE0 | (code >> 12U));
            out += static_cast<char>(0x80 | ((code >> 6U) & 0x3FU));
            out += static_cast<char>(0x80 | (code & 0x3FU));
        } else {
            out += static_cast<char>(0xF0 | (code >> 18U));
            out += static_cast<char>(0x80 | ((code >> 12U) & 0x3FU));
            out += static_cast<char>(0x80 | ((code >> 6U) & 0x3FU));
            out += static_cast<char>(0x80 | (code & 0x3FU));
        }
        return success();
    }

    std::string_view text_;
    const std::string& source_;
    std::size_t pos_ = 0;
};

class header_parser {
public:
    header_parser(std::string source, std::uint64_t data_size)
        : source_(std::move(source)), data_size_(data_size)
    {
    }

    result<std::vector<tensor_plan>> parse(std::string_view json)
    {
        json_cursor cursor{json, source_};
        std::vector<tensor_plan> plans;
        std::vector<std::pair<std::string, std::string>> metadata;
        std::set<std::string> names;
        BOOST_OUTCOME_TRY(cursor.object([&](std::string name) -> result<void> {
            if (!names.insert(name).second) {
                return malformed("the header names \"" + name + "\" twice");
            }
            if (name == "__metadata__") {
                return cursor.object([&](std::string key) -> result<void> {
                    BOOST_OUTCOME_TRY(auto value, cursor.string());
                    metadata.emplace_back(std::move(key), std::move(value));
                    return success();
                });
            }
            BOOST_OUTCOME_TRY(auto plan, tensor(std::move(name), cursor));
            plans.push_back(std::move(plan));
            return success();
        }));
        if (!cursor.at_end()) {
            return cursor.fail("the end of the header after its object");
        }
        BOOST_OUTCOME_TRY(apply_metadata(metadata, plans));
        BOOST_OUTCOME_TRY(check_ranges(plans));
        std::sort(plans.begin(), plans.end(),
                  [](const tensor_plan& a, const tensor_plan& b) { return a.id < b.id; });
        for (std::size_t i = 1; i < plans.size(); ++i) {
            if (plans[i].id == plans[i - 1].id) {
                return error{errc::duplicate_param_id,
                             "safetensors " + source_ + ": tensors \"" + plans[i - 1].name +
                                 "\" and \"" + plans[i].name + "\" have the same parameter id " +
                                 std::to_string(plans[i].id)};
            }
        }
        return plans;
    }

private:
    error malformed(const std::string& what) const
    {
        return error{errc::malformed_record, "safetensors " + source_ + ": " + what};
    }

    result<tensor_plan> tensor(std::string name, json_cursor& cursor) const
    {
        const std::string quoted = "tensor \"" + name + "\"";
        std::optional<std::string> type_name;
        std::optional<std::vector<std::uint64_t>> dims;
        std::optional<std::vector<std::uint64_t>> offsets;
        BOOST_OUTCOME_TRY(cursor.object([&](const std::string& key) -> result<void> {
            if (key == "dtype" && !type_name) {
                BOOST_OUTCOME_TRY(auto value, cursor.string());
                type_name = std::move(value);
            } else if (key == "shape" && !dims) {
                BOOST_OUTCOME_TRY(auto value, cursor.integers(checkpoint::max_rank));
                dims = std::move(value);
            } else if (key == "data_offsets" && !offsets) {
                BOOST_OUTCOME_TRY(auto value, cursor.integers(2));
                offsets = std::move(value);
            } else {
                return malformed(quoted + " has an unexpected or repeated member \"" + key + "\"");
            }
            return success();
        }));
        if (!type_name || !dims || !offsets || offsets->size() != 2) {
            return malformed(quoted + " is not {dtype, shape, data_offsets: [begin, end]}");
        }
        const auto stored = safetensors_dtype_from_name(*type_name);
        if (!stored) {
            return error{errc::invalid_dtype,
                         "safetensors " + source_ + ": " + quoted + " has dtype " + *type_name +
                             "; ruda reads F64, F32, F16, BF16, I64, I32, I16, I8, U64, U32, U16, "
                             "U8 and BOOL"};
        }
        tensor_plan plan{name, {}, 0, *stored, *stored, shape(dims->begin(), dims->end()),
                         (*offsets)[0], (*offsets)[1]};
        if (const auto id = decimal_id(name)) {
            plan.id = *id;
        } else {
            plan.id = param_id::from_name(name).val();
            plan.parameter_name = name;
        }
        auto count = checked_num_elements(plan.dims);
        if (!count) {
            return error{errc::shape_overflow,
                         "safetensors " + source_ + ": " + quoted + ": the shape overflows"};
        }
        if (plan.end < plan.begin) {
            return malformed(quoted + ": data_offsets end before they begin");
        }
        const std::uint64_t bytes = plan.end - plan.begin;
        const std::uint64_t element = stored->size();
        if (count.value() > std::numeric_limits<std::uint64_t>::max() / element ||
            bytes != count.value() * element) {
            return error{errc::byte_count_mismatch,
                         "safetensors " + source_ + ": " + quoted + " has " +
                             std::to_string(bytes) + " bytes for " +
                             std::to_string(count.value()) + " " + *type_name + " values"};
        }
        return plan;
    }

    // Other keys ("format", "producer") are kept by nobody; "ruda.original_dtype.<name>"
    // restores the dtype a float gradient had before it was stored, "ruda.id.<name>" the id of
    // a named tensor. Tensors are found by name through a map, so that many keys cost no more
    // than linear time.
    result<void> apply_metadata(const std::vector<std::pair<std::string, std::string>>& metadata,
                                std::vector<tensor_plan>& plans) const
    {
        std::unordered_map<std::string_view, tensor_plan*> by_name;
        by_name.reserve(plans.size());
        for (tensor_plan& plan : plans) {
            by_name.emplace(plan.name, &plan);
        }
        // The tensor a "<prefix><tensor name>" key is about; null when there is none.
        const auto named = [&by_name](std::string_view key, std::string_view prefix) {
            const auto found = by_name.find(key.substr(prefix.size()));
            return found == by_name.end() ? nullptr : found->second;
        };
        for (const auto& [key, value] : metadata) {
            if (key.starts_with(id_key)) {
                const auto id = decimal_id(value);
                tensor_plan* plan = named(key, id_key);
                if (!id || plan == nullptr) {
                    return malformed("metadata \"" + key + "\" names no tensor or no id");
                }
                plan->id = *id;
                plan->parameter_name = plan->name;
            } else if (key.starts_with(original_dtype_key)) {
                const auto original = float_dtype_from_name(value);
                tensor_plan* plan = named(key, original_dtype_key);
                if (!original || plan == nullptr) {
                    return malformed("metadata \"" + key + "\" names no tensor or no float dtype");
                }
                plan->original = *original;
            }
        }
        return success();
    }

    // The byte ranges tile the data area exactly: no gap, no overlap, nothing past its end.
    result<void> check_ranges(std::vector<tensor_plan>& plans) const
    {
        std::sort(plans.begin(), plans.end(), [](const tensor_plan& a, const tensor_plan& b) {
            return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
        });
        std::uint64_t expected = 0;
        for (const tensor_plan& plan : plans) {
            if (plan.begin != expected) {
                return malformed("tensor \"" + plan.name + "\" starts at data byte " +
                                 std::to_string(plan.begin) + ", not " + std::to_string(expected) +
                                 " (a gap or an overlap)");
            }
            expected = plan.end;
        }
        if (expected != data_size_) {
            return malformed("the tensors cover " + std::to_string(expected) +
                             " bytes of data, the file holds " + std::to_string(data_size_));
        }
        return success();
    }

    std::string source_;
    std::uint64_t data_size_;
};

} // namespace

result<std::vector<safetensors_tensor_plan>>
parse_safetensors_header(std::string_view json, const std::string& source, std::uint64_t data_size)
{
    header_parser parser{source, data_size};
    return parser.parse(json);
}

} // namespace ruda::detail
