// Reading a checkpoint file: the whole frame checked (preamble, trailer, header) before any
// payload is read or allocated for, then a load of the entries and sections the options choose.
#include "payload_request.hpp"

#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/checkpoint/detail/frame.hpp>
#include <ruda/checkpoint/detail/progress_meter.hpp>
#include <ruda/optim/validate_record.hpp>
#include <ruda/tensor/detail/fresh_pages.hpp>
#include <ruda/tensor/detail/mapped_file.hpp>

#include <algorithm>
#include <string>
#include <unordered_set>
#include <utility>

namespace ruda {
namespace {

error in_file(const std::filesystem::path& path, const error& cause)
{
    return error{cause.code(), "Checkpoint " + path.string() + ": " + cause.message()};
}

} // namespace

checkpoint_reader::checkpoint_reader(detail::byte_source source) : source_(std::move(source)) {}

result<void> checkpoint_reader::read_at(std::uint8_t* data, std::size_t size,
                                        std::uint64_t offset) const
{
    auto read = source_.read_at(data, size, offset);
    if (!read && read.error() == errc::malformed_record) {
        return error{errc::malformed_record, "Checkpoint " + read.error().message()};
    }
    return read;
}

result<checkpoint_reader> checkpoint_reader::open(const std::filesystem::path& path,
                                                  std::uint64_t max_header_bytes)
{
    auto file = detail::byte_source::open_file(path);
    if (!file) {
        return error{file.error().code(), "Checkpoint " + file.error().message()};
    }
    return verify_frame(checkpoint_reader{std::move(file).value()}, max_header_bytes);
}

result<checkpoint_reader> checkpoint_reader::open_bytes(std::span<const std::uint8_t> bytes,
                                                        std::string name,
                                                        std::uint64_t max_header_bytes)
{
    return verify_frame(checkpoint_reader{detail::byte_source::of_memory(bytes, std::move(name))},
                        max_header_bytes);
}

result<checkpoint_reader> checkpoint_reader::verify_frame(checkpoint_reader reader,
                                                          std::uint64_t max_header_bytes)
{
    const auto& path = reader.path();
    const std::uint64_t file_length = reader.source_.size();
    if (file_length < detail::preamble_size + detail::trailer_size) {
        return error{errc::malformed_record,
                     "Checkpoint " + path.string() + ": " + std::to_string(file_length) +
                         " bytes is too short for a ruda checkpoint"};
    }
    std::array<std::uint8_t, detail::preamble_size> preamble{};
    BOOST_OUTCOME_TRY(reader.read_at(preamble.data(), preamble.size(), 0));
    auto frame = detail::decode_preamble(preamble, file_length, max_header_bytes);
    if (!frame) {
        return in_file(path, frame.error());
    }
    std::array<std::uint8_t, detail::trailer_size> trailer{};
    BOOST_OUTCOME_TRY(reader.read_at(trailer.data(), trailer.size(),
                                     file_length - detail::trailer_size));
    if (auto intact = detail::check_trailer(trailer, frame.value()); !intact) {
        return in_file(path, intact.error());
    }
    // Capped by max_header_bytes and by the file's own length (decode_preamble checked both).
    BOOST_OUTCOME_TRY(auto header, storage::try_allocate(frame.value().header_length));
    BOOST_OUTCOME_TRY(
        reader.read_at(header.writable_data(), header.size(), frame.value().header_offset));
    auto index = detail::decode_header(header, frame.value());
    if (!index) {
        return in_file(path, index.error());
    }
    reader.header_offset_ = frame.value().header_offset;
    reader.index_ = std::move(index).value();
    return reader;
}

error checkpoint_reader::mismatch(const std::string& what) const
{
    return error{errc::checksum_mismatch,
                 "Checkpoint " + path().string() + ": checksum mismatch in " + what};
}

result<storage> checkpoint_reader::read_payload(const payload_location& payload, bool verify,
                                                const std::string& what) const
{
    // The frame check put the payload inside the file: this allocation is bounded by it.
    BOOST_OUTCOME_TRY(auto bytes, storage::try_allocate(static_cast<std::size_t>(payload.length)));
    BOOST_OUTCOME_TRY(read_at(bytes.writable_data(), bytes.size(), payload.offset));
    if (verify && detail::checksum(bytes) != payload.checksum) {
        return mismatch(what);
    }
    return bytes;
}

result<tensor_data> checkpoint_reader::read_entry(const checkpoint_entry_info& entry,
                                                  bool verify) const
{
    BOOST_OUTCOME_TRY(auto bytes,
                      read_payload(entry.payload, verify, detail::payload_name(entry.id)));
    return tensor_data{std::move(bytes), entry.shape, entry.stored};
}

result<std::vector<std::uint8_t>> checkpoint_reader::read_section(
    const checkpoint_section_info& section, bool verify) const
{
    BOOST_OUTCOME_TRY(auto bytes,
                      read_payload(section.payload, verify, detail::payload_name(section)));
    return bytes.to_vector();
}

result<bool> checkpoint_reader::payload_intact(const payload_location& payload) const
{
    BOOST_OUTCOME_TRY(auto bytes, read_payload(payload, false, {}));
    return detail::checksum(bytes) == payload.checksum;
}

std::string checkpoint_reader::mapping_reason(const checkpoint_load_options& options) const
{
    if (source_.fd() < 0 || options.mapping == load_mapping::never) {
        return {};
    }
    return detail::unchangeable_because(source_.fd());
}

namespace {

// What a load reads: the entries chosen (indices into the index, in file order), and the
// groups they fall in, each with how many it has of them.
struct selection {
    struct group {
        std::string name;
        std::size_t count = 0;
    };
    bool full = true; // every entry: the padding is checked too
    std::vector<group> groups;
    std::vector<std::uint32_t> entries;
};

// Whether `name` is `prefix` or lies under it: "fc1" covers "fc1.weight" and, in an
// optimizer's group, "fc1.weight.exp_avg".
bool covered_by(std::string_view name, std::string_view prefix)
{
    return name.starts_with(prefix) &&
           (name.size() == prefix.size() || name[prefix.size()] == '.');
}

// The groups, ids and names `options` ask for, each of which must be there.
result<selection> select_entries(const checkpoint_index& index,
                                 const checkpoint_load_options& options,
                                 const std::filesystem::path& path)
{
    selection chosen;
    chosen.full = !options.only_ids && !options.only_names && !options.only_groups;
    const auto missing = [&](errc code, const std::string& what) {
        return error{code, "Checkpoint " + path.string() + " has no " + what};
    };
    std::vector<const checkpoint_group_info*> groups;
    if (options.only_groups) {
        for (const std::string& name : *options.only_groups) {
            const auto found = std::find_if(index.groups.begin(), index.groups.end(),
                                            [&](const auto& g) { return g.name == name; });
            if (found == index.groups.end()) {
                return missing(errc::not_found, "group " + name);
            }
            if (std::find(groups.begin(), groups.end(), &*found) == groups.end()) {
                groups.push_back(&*found);
            }
        }
        std::sort(groups.begin(), groups.end(), [](const auto* a, const auto* b) {
            return a->first < b->first || (a->first == b->first && a->count < b->count);
        }); // file order
    } else {
        for (const checkpoint_group_info& g : index.groups) {
            groups.push_back(&g);
        }
    }
    std::size_t candidates = 0;
    for (const checkpoint_group_info* g : groups) {
        candidates += g->count;
    }
    const bool by_id = options.only_ids.has_value();
    const bool by_name = options.only_names.has_value();
    std::unordered_set<param_id> ids;
    if (by_id) {
        ids.insert(options.only_ids->begin(), options.only_ids->end());
    }
    std::unordered_set<param_id> ids_found;
    std::vector<bool> names_found(by_name ? options.only_names->size() : 0, false);
    const auto wanted = [&](const checkpoint_entry_info& e) {
        if (!by_id && !by_name) {
            return true;
        }
        bool take = false;
        if (by_id && ids.contains(e.id)) {
            ids_found.insert(e.id);
            take = true;
        }
        for (std::size_t n = 0; by_name && n < names_found.size(); ++n) {
            if (covered_by(e.name, (*options.only_names)[n])) {
                names_found[n] = true;
                take = true;
            }
        }
        return take;
    };
    detail::reserve_prepared(chosen.entries, by_id || by_name ? 0 : candidates);
    for (const checkpoint_group_info* g : groups) {
        selection::group taken{g->name, 0};
        for (std::size_t k = g->first; k < g->first + g->count; ++k) {
            if (wanted(index.entries[k])) {
                chosen.entries.push_back(static_cast<std::uint32_t>(k));
                ++taken.count;
            }
        }
        chosen.groups.push_back(std::move(taken));
    }
    if (by_id) {
        for (const param_id id : *options.only_ids) {
            if (!ids_found.contains(id)) {
                return missing(errc::missing_gradient, "gradient for parameter " + to_string(id));
            }
        }
    }
    for (std::size_t n = 0; n < names_found.size(); ++n) {
        if (!names_found[n]) {
            return missing(errc::missing_gradient,
                           "tensor named " + (*options.only_names)[n] + " (or under it)");
        }
    }
    return chosen;
}

// A group as loaded, checked as a restore would check it: the gradients like `from_record`,
// the other groups like `validate_tensor_group`.
result<void> put_loaded_group(checkpoint& contents, const std::string& name,
                              gradients_params_record tensors, const std::filesystem::path& path)
{
    const bool gradients = name == checkpoint::gradients_group;
    auto valid = gradients ? validate_gradients_record(tensors) : validate_tensor_group(tensors);
    if (!valid) {
        return error{valid.error().code(),
                     "Checkpoint " + path.string() + ": " +
                         (gradients ? "" : "group " + name + ": ") + valid.error().message()};
    }
    return contents.put_group(name, std::move(tensors));
}

} // namespace

result<void> checkpoint_reader::check_padding(std::uint64_t from, std::uint64_t to) const
{
    std::array<std::uint8_t, 4096> chunk{};
    while (from < to) {
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(to - from, chunk.size()));
        BOOST_OUTCOME_TRY(read_at(chunk.data(), n, from));
        if (!detail::all_zero({chunk.data(), n})) {
            return nonzero_padding(from, from + n);
        }
        from += n;
    }
    return success();
}

error checkpoint_reader::nonzero_padding(std::uint64_t from, std::uint64_t to) const
{
    return error{errc::malformed_record, "Checkpoint " + path().string() +
                                             ": nonzero padding between offsets " +
                                             std::to_string(from) + " and " + std::to_string(to)};
}

result<checkpoint> checkpoint_reader::load(const checkpoint_load_options& options) const&
{
    return load_entries(options, nullptr);
}

result<checkpoint> checkpoint_reader::load(const checkpoint_load_options& options) &&
{
    return load_entries(options, &index_.entries);
}

result<checkpoint> checkpoint_reader::load_entries(const checkpoint_load_options& options,
                                                   std::vector<checkpoint_entry_info>* spent) const
{
    // What to read: the selected entries, then every section. The entries are made first, their
    // bytes filled in once read. A reader being consumed gives its shapes and names away rather
    // than copying them, then frees its index before the requests are made: at most the index
    // and the entries are in memory together.
    if (!options.run_id.empty() &&
        (!index_.identity || index_.identity->run_id != options.run_id)) {
        return error{errc::other_run,
                     "Checkpoint " + path().string() + " was written by " +
                         (index_.identity ? "run " + index_.identity->run_id
                                          : std::string{"no recorded run"}) +
                         ", not run " + options.run_id};
    }
    BOOST_OUTCOME_TRY(const selection chosen, select_entries(index_, options, path()));
    std::vector<gradient_entry> entries;
    std::vector<payload_location> where; // each entry's payload
    detail::reserve_prepared(entries, chosen.entries.size());
    detail::reserve_prepared(where, chosen.entries.size());
    for (const std::uint32_t k : chosen.entries) {
        const checkpoint_entry_info& info = index_.entries[k];
        where.push_back(info.payload);
        if (spent != nullptr) {
            auto& given = (*spent)[k];
            entries.push_back({info.id, info.original,
                               tensor_data{storage{}, std::move(given.shape), info.stored},
                               std::move(given.name)});
        } else {
            entries.push_back({info.id, info.original,
                               tensor_data{storage{}, info.shape, info.stored}, info.name});
        }
    }
    if (spent != nullptr) {
        std::vector<checkpoint_entry_info>{}.swap(*spent);
    }
    std::vector<payload_request> requests;
    detail::reserve_prepared(requests, entries.size() + index_.sections.size());
    for (std::size_t k = 0; k < entries.size(); ++k) {
        requests.push_back({where[k], entries[k].id, nullptr, {}});
    }
    std::vector<payload_location>{}.swap(where);
    const std::size_t entry_count = requests.size();
    for (const auto& section : index_.sections) {
        requests.push_back({section.payload, param_id{0}, &section, {}});
    }
    std::vector<std::uint32_t> in_order(requests.size());
    for (std::uint32_t k = 0; k < in_order.size(); ++k) {
        in_order[k] = k;
    }
    const auto before = [&](std::uint32_t a, std::uint32_t b) {
        const auto& pa = requests[a].payload;
        const auto& pb = requests[b].payload;
        return std::pair{pa.offset, pa.length} < std::pair{pb.offset, pb.length};
    };
    if (!std::is_sorted(in_order.begin(), in_order.end(), before)) { // ruda writes in order
        std::sort(in_order.begin(), in_order.end(), before);
    }

    const bool full = chosen.full;
    std::uint64_t payload_total = 0;
    for (const payload_request& r : requests) {
        payload_total += r.payload.length;
    }
    detail::progress_meter progress{options.on_progress, payload_total};
    if (const auto reason = mapping_reason(options); !reason.empty()) {
        BOOST_OUTCOME_TRY(map_payloads(requests, in_order, full, options.verify_checksums,
                                       options.readers, progress));
    } else {
        BOOST_OUTCOME_TRY(read_payloads(requests, in_order, full, options.verify_checksums,
                                        options.readers, progress));
    }

    for (std::size_t k = 0; k < entry_count; ++k) {
        entries[k].data = std::move(entries[k].data).with_bytes(std::move(requests[k].bytes));
    }
    checkpoint contents;
    if (chosen.groups.size() == 1 && chosen.groups.front().count == entries.size()) {
        // One group, the usual case: its record is the entries themselves, no copy.
        BOOST_OUTCOME_TRY(put_loaded_group(contents, chosen.groups.front().name,
                                           gradients_params_record{std::move(entries)}, path()));
    } else {
        auto next = entries.begin();
        for (const selection::group& g : chosen.groups) {
            std::vector<gradient_entry> members(std::make_move_iterator(next),
                                                std::make_move_iterator(next + g.count));
            next += static_cast<std::ptrdiff_t>(g.count);
            BOOST_OUTCOME_TRY(put_loaded_group(
                contents, g.name, gradients_params_record{std::move(members)}, path()));
        }
    }
    if (index_.identity) {
        BOOST_OUTCOME_TRY(contents.set_identity(*index_.identity));
    }
    for (std::size_t k = entry_count; k < requests.size(); ++k) {
        const checkpoint_section_info& info = *requests[k].section;
        BOOST_OUTCOME_TRY(contents.put_bytes(info.name, requests[k].bytes.to_vector()));
    }
    return contents;
}

result<checkpoint> load_checkpoint_file(const std::filesystem::path& path,
                                        const checkpoint_load_options& options)
{
    BOOST_OUTCOME_TRY(auto reader, checkpoint_reader::open(path, options.max_header_bytes));
    return std::move(reader).load(options);
}

result<checkpoint> load_checkpoint_bytes(std::span<const std::uint8_t> bytes,
                                         const checkpoint_load_options& options)
{
    BOOST_OUTCOME_TRY(auto reader,
                      checkpoint_reader::open_bytes(bytes, "<memory>", options.max_header_bytes));
    return std::move(reader).load(options);
}

} // namespace ruda
