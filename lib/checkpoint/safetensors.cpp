// safetensors export (through the durable writer) and import (header checked in full before
// any tensor is allocated).
#include <ruda/checkpoint/safetensors.hpp>

#include <ruda/checkpoint/checkpoint.hpp>
#include <ruda/checkpoint/detail/byte_source.hpp>
#include <ruda/checkpoint/detail/durable_writer.hpp>
#include <ruda/checkpoint/detail/json_quote.hpp>
#include <ruda/checkpoint/detail/little_endian.hpp>
#include <ruda/checkpoint/detail/safetensors_header.hpp>
#include <ruda/optim/param_id.hpp>
#include <ruda/optim/validate_record.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ruda {
namespace {

using detail::decimal_id;
using detail::safetensors_dtype_name;
constexpr std::string_view original_dtype_key = detail::safetensors_original_dtype_key;
constexpr std::string_view id_key = detail::safetensors_id_key;

// The tensor's name in the file: the parameter's name if it has one, else its id in decimal.
std::string tensor_name(const gradient_entry& entry)
{
    return entry.name.empty() ? to_string(entry.id) : entry.name;
}

// Whether an import would not find the entry's id from its tensor name alone: a name whose
// `param_id::from_name` is another id, or a name that reads as a decimal id.
bool needs_id_key(const gradient_entry& entry)
{
    return !entry.name.empty() &&
           (param_id::from_name(entry.name) != entry.id || decimal_id(entry.name));
}

// The JSON header, padded with spaces so that the data starts 8-byte aligned.
result<std::string> header_for(const std::vector<gradient_entry>& entries)
{
    std::string metadata = R"("__metadata__":{"producer":"ruda")";
    std::string tensors;
    std::uint64_t offset = 0;
    for (const gradient_entry& entry : entries) {
        const std::string tensor = tensor_name(entry);
        const auto name = safetensors_dtype_name(entry.data.dtype());
        if (!name) {
            return error{errc::invalid_dtype,
                         "Exporting tensor of parameter " + to_string(entry.id) +
                             ": safetensors export takes float (f64, f32, flex32, f16, bf16), "
                             "integer and bool tensors, not " + to_string(entry.data.dtype())};
        }
        if (!(detail::safetensors_dtype_from_name(*name) == entry.dtype)) {
            metadata += ',' + detail::json_quote(std::string{original_dtype_key} + tensor) + ":\"" +
                        to_string(entry.dtype) + '"';
        }
        if (needs_id_key(entry)) {
            metadata += ',' + detail::json_quote(std::string{id_key} + tensor) + ":\"" +
                        to_string(entry.id) + '"';
        }
        tensors += ',' + detail::json_quote(tensor) + ":{\"dtype\":\"" + std::string{*name} +
                   "\",\"shape\":[";
        for (std::size_t i = 0; i < entry.data.shape().size(); ++i) {
            if (i != 0) {
                tensors += ',';
            }
            tensors += std::to_string(entry.data.shape()[i]);
        }
        tensors += "],\"data_offsets\":[";
        tensors += std::to_string(offset) + ',';
        offset += entry.data.bytes().size();
        tensors += std::to_string(offset) + "]}";
    }
    std::string header = "{" + metadata + "}" + tensors + "}";
    header.resize((header.size() + 8 + 7) / 8 * 8 - 8, ' ');
    return header;
}

result<gradients_params_record> import_from(const detail::byte_source& from,
                                            const safetensors_limits& limits)
{
    const std::string source = from.name().string();
    const std::uint64_t size = from.size();
    const auto malformed = [&](const std::string& what) {
        return error{errc::malformed_record, "safetensors " + source + ": " + what};
    };
    if (size < 8) {
        return malformed("shorter than the 8-byte header length");
    }
    std::array<std::uint8_t, 8> prefix{};
    BOOST_OUTCOME_TRY(from.read_at(prefix.data(), prefix.size(), 0));
    const std::uint64_t header_size = detail::load_le(prefix);
    if (header_size > limits.max_header_bytes) {
        return error{errc::allocation_too_large,
                     "safetensors " + source + ": the header claims " +
                         std::to_string(header_size) + " bytes, over the limit of " +
                         std::to_string(limits.max_header_bytes)};
    }
    if (header_size > size - 8) {
        return malformed("the header claims " + std::to_string(header_size) +
                         " bytes, the file has " + std::to_string(size - 8) + " after its length");
    }
    std::string json(header_size, '\0');
    BOOST_OUTCOME_TRY(from.read_at(reinterpret_cast<std::uint8_t*>(json.data()), json.size(), 8));
    const std::uint64_t data_start = 8 + header_size;
    BOOST_OUTCOME_TRY(auto plans,
                      detail::parse_safetensors_header(json, source, size - data_start));

    // The tensors tile the data exactly (the parser checked): one read into one buffer, which
    // every tensor shares as its slice.
    BOOST_OUTCOME_TRY(auto data,
                      storage::try_allocate(static_cast<std::size_t>(size - data_start)));
    if (!data.empty()) {
        BOOST_OUTCOME_TRY(from.read_at(data.writable_data(), data.size(), data_start));
    }
    std::vector<gradient_entry> entries;
    entries.reserve(plans.size());
    for (detail::safetensors_tensor_plan& plan : plans) {
        entries.push_back({param_id{plan.id}, plan.original,
                           tensor_data{data.slice(plan.begin, plan.end - plan.begin),
                                       std::move(plan.dims), plan.stored},
                           std::move(plan.parameter_name)});
    }
    gradients_params_record record{std::move(entries)};
    BOOST_OUTCOME_TRY(validate_tensor_group(record));
    return record;
}

} // namespace

result<std::uint64_t> export_safetensors(const gradients_params_record& record,
                                         const std::filesystem::path& path, file_ops& ops)
{
    return export_safetensors(record, path, safetensors_limits{}, ops);
}

result<std::uint64_t> export_safetensors(const gradients_params_record& record,
                                         const std::filesystem::path& path,
                                         const safetensors_limits& limits, file_ops& ops)
{
    std::vector<gradient_entry> entries = record.entries();
    std::sort(entries.begin(), entries.end(),
              [](const gradient_entry& a, const gradient_entry& b) { return a.id < b.id; });
    BOOST_OUTCOME_TRY(const auto header, header_for(entries)); // only dtypes safetensors has
    // Nothing is written that an import refuses.
    BOOST_OUTCOME_TRY(validate_for_saving(record, /*gradients=*/false));
    if (header.size() > limits.max_header_bytes) {
        return error{errc::allocation_too_large,
                     "Exporting " + path.string() + ": the header would be " +
                         std::to_string(header.size()) + " bytes, over the limit of " +
                         std::to_string(limits.max_header_bytes) + " an import accepts"};
    }
    BOOST_OUTCOME_TRY(auto writer, detail::durable_writer::create(path, ops));
    std::array<std::uint8_t, 8> header_length{};
    detail::store_le(header_length, header.size());
    BOOST_OUTCOME_TRY(writer->write(header_length));
    BOOST_OUTCOME_TRY(writer->write(
        {reinterpret_cast<const std::uint8_t*>(header.data()), header.size()}));
    for (const gradient_entry& entry : entries) {
        BOOST_OUTCOME_TRY(writer->write(entry.data.bytes()));
    }
    const std::uint64_t size = writer->size();
    BOOST_OUTCOME_TRY(writer->commit());
    return size;
}

result<gradients_params_record> import_safetensors(const std::filesystem::path& path,
                                                   const safetensors_limits& limits)
{
    BOOST_OUTCOME_TRY(const auto file, detail::byte_source::open_file(path));
    return import_from(file, limits);
}

result<gradients_params_record> import_safetensors_bytes(std::span<const std::uint8_t> bytes,
                                                         const safetensors_limits& limits)
{
    return import_from(detail::byte_source::of_memory(bytes, "<memory>"), limits);
}

} // namespace ruda
