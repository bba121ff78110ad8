// Saving and reading checkpoint files. The writer streams payloads from the checkpoint in
// memory; the reader checks the whole frame before it reads or allocates for any payload.
#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/checkpoint/detail/durable_writer.hpp>
#include <ruda/checkpoint/detail/frame.hpp>
#include <ruda/checkpoint/detail/io_jobs.hpp>
#include <ruda/checkpoint/detail/progress_meter.hpp>
#include <ruda/checkpoint/detail/posix_io.hpp>
#include <ruda/checkpoint/detail/regular_file.hpp>
#include <ruda/optim/validate_record.hpp>
#include <ruda/tensor/detail/fresh_pages.hpp>
#include <ruda/tensor/detail/mapped_file.hpp>
#include <ruda/version.hpp>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <cstring>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace ruda {
namespace {

error in_file(const std::filesystem::path& path, const error& cause)
{
    return error{cause.code(), "Checkpoint " + path.string() + ": " + cause.message()};
}

// How messages name a payload.
std::string payload_name(param_id entry)
{
    return "the gradient of parameter " + to_string(entry);
}

std::string payload_name(const checkpoint_section_info& section)
{
    return "section " + section.name;
}

// The bytes of every payload in file order: the entries', group by group, then the sections'.
// Looked up rather than listed, since every allocation of a save costs page faults.
class payload_bytes {
public:
    explicit payload_bytes(const checkpoint& contents)
        : groups_(contents.groups()), sections_(contents.sections())
    {
        for (const tensor_group& g : groups_) {
            entries_ += g.tensors.entries().size();
        }
    }
    [[nodiscard]] std::size_t size() const noexcept { return entries_ + sections_.size(); }
    [[nodiscard]] std::span<const std::uint8_t> operator[](std::size_t k) const noexcept
    {
        if (k >= entries_) {
            return sections_[k - entries_].bytes;
        }
        for (const tensor_group& g : groups_) {
            const auto& entries = g.tensors.entries();
            if (k < entries.size()) {
                return entries[k].data.bytes();
            }
            k -= entries.size();
        }
        return {};
    }

private:
    const std::vector<tensor_group>& groups_;
    const std::vector<checkpoint_section>& sections_;
    std::size_t entries_ = 0;
};

// Payloads under this size are copied into a writer's buffer with their neighbours and written
// with them; larger ones are written from the record's memory in pieces of `write_piece`.
constexpr std::size_t gather_size = detail::durable_writer::buffer_size;
constexpr std::size_t write_piece = detail::durable_writer::writeback_step;

// One write of a save: payloads [first, last) gathered into a buffer, or bytes
// [from, from + length) of the large payload `first`.
struct write_job {
    static constexpr std::size_t no_split = static_cast<std::size_t>(-1);
    bool gathered = true;
    std::size_t first = 0;
    std::size_t last = 0;
    std::uint64_t from = 0;
    std::uint64_t length = 0;
    std::uint32_t piece = 0;       // its number among the payload's pieces
    std::size_t split = no_split;  // which payload written in several pieces, if it is one
};

// A payload written in several pieces by several threads is hashed piece by piece in order:
// each piece waits for the one before. The pieces are handed out in order and each is hashed
// as soon as its thread takes it, so a wait is short and always ends.
class hash_in_order {
public:
    explicit hash_in_order(std::size_t payloads) : next_(payloads), sums_(payloads) {}

    void update(std::size_t split, std::uint32_t piece, std::span<const std::uint8_t> bytes)
    {
        std::unique_lock lock{mutex_};
        turn_.wait(lock, [&] { return next_[split] == piece; });
        lock.unlock();
        sums_[split].update(bytes); // alone: every other piece of this payload waits
        lock.lock();
        ++next_[split];
        lock.unlock();
        turn_.notify_all();
    }
    [[nodiscard]] std::uint64_t digest(std::size_t split) const { return sums_[split].digest(); }

private:
    std::mutex mutex_;
    std::condition_variable turn_;
    std::vector<std::uint32_t> next_;
    std::vector<detail::running_checksum> sums_;
};

// Where each payload goes (aligned, in order, after the preamble; the checksums are filled in
// as the payloads are written) and the jobs that write them; the header starts right after
// the last payload.
struct save_plan {
    std::vector<payload_location> locations;
    std::uint64_t header_offset = detail::preamble_size;
    std::vector<write_job> jobs;
    std::size_t splits = 0;
};

save_plan plan_save(const payload_bytes& payloads)
{
    save_plan plan;
    detail::reserve_prepared(plan.locations, payloads.size()); // 24 bytes a tensor
    std::uint64_t cursor = detail::preamble_size;
    bool gathering = false; // whether the last job may take the next small payload
    std::uint64_t gather_start = 0; // where that job starts
    for (std::size_t k = 0; k < payloads.size(); ++k) {
        const std::uint64_t offset = detail::align_up(cursor);
        const std::uint64_t length = payloads[k].size();
        plan.locations.push_back({offset, length, 0});
        cursor = offset + length;
        if (length < gather_size) {
            if (gathering && cursor - gather_start <= gather_size) {
                plan.jobs.back().last = k + 1;
            } else {
                plan.jobs.push_back({.gathered = true, .first = k, .last = k + 1});
                gathering = true;
                gather_start = offset;
            }
            continue;
        }
        gathering = false;
        const std::uint64_t pieces = (length + write_piece - 1) / write_piece;
        const std::size_t split = pieces > 1 ? plan.splits++ : write_job::no_split;
        for (std::uint64_t p = 0; p < pieces; ++p) {
            const std::uint64_t from = p * write_piece;
            plan.jobs.push_back({.gathered = false,
                                 .first = k,
                                 .last = k + 1,
                                 .from = from,
                                 .length = std::min<std::uint64_t>(write_piece, length - from),
                                 .piece = static_cast<std::uint32_t>(p),
                                 .split = split});
        }
    }
    plan.header_offset = cursor;
    return plan;
}

// A writer's buffer of `gather_size` bytes, allocated when first needed.
using gather_buffer = std::unique_ptr<std::uint8_t[]>;

std::uint8_t* allocated(gather_buffer& buffer)
{
    if (!buffer) {
        buffer = std::make_unique_for_overwrite<std::uint8_t[]>(gather_size);
    }
    return buffer.get();
}

// Writes the payloads with one thread per buffer, each job hashing what it writes into the
// plan's locations: small payloads copied into the thread's buffer with the zero padding
// between them, large ones written from the record in pieces (hashed in order). The padding
// between jobs is never written: a new file reads as zeros there.
result<void> write_payloads(save_plan& plan, const payload_bytes& payloads,
                            const detail::durable_writer& writer,
                            std::vector<gather_buffer>& buffers, detail::progress_meter& progress)
{
    auto& locations = plan.locations;
    hash_in_order split_sums{plan.splits};
    const auto write = [&](std::size_t j, unsigned worker) -> result<void> {
        const write_job& job = plan.jobs[j];
        const std::uint64_t start = locations[job.first].offset + job.from;
        std::span<const std::uint8_t> bytes;
        std::uint64_t payload_bytes = job.length; // what the job writes, padding left out
        if (!job.gathered) {
            bytes = payloads[job.first].subspan(job.from, job.length);
            if (job.split == write_job::no_split) {
                locations[job.first].checksum = detail::checksum(bytes);
            } else {
                split_sums.update(job.split, job.piece, bytes);
            }
        } else {
            std::uint8_t* const buffer = allocated(buffers[worker]);
            std::uint64_t end = start;
            payload_bytes = 0;
            for (std::size_t k = job.first; k < job.last; ++k) {
                const auto payload = payloads[k];
                payload_bytes += payload.size();
                std::memset(buffer + (end - start), 0, locations[k].offset - end);
                if (!payload.empty()) {
                    std::memcpy(buffer + (locations[k].offset - start), payload.data(),
                                payload.size());
                }
                locations[k].checksum = detail::checksum(payload);
                end = locations[k].offset + payload.size();
            }
            bytes = {buffer, end - start};
        }
        BOOST_OUTCOME_TRY(writer.write_at(bytes, start));
        writer.start_writeback(start, bytes.size());
        return progress.add(payload_bytes);
    };
    const auto threads = static_cast<unsigned>(buffers.size());
    BOOST_OUTCOME_TRY(detail::run_jobs(plan.jobs.size(), threads, write));
    for (const write_job& job : plan.jobs) {
        if (job.split != write_job::no_split) {
            locations[job.first].checksum = split_sums.digest(job.split);
        }
    }
    return success();
}

// The header encoder's pieces, hashed and gathered in a buffer of `gather_size` into writes
// at the header's offset.
class header_sink {
public:
    header_sink(const detail::durable_writer& writer, std::uint8_t* buffer, std::uint64_t offset)
        : writer_(writer), buffer_(buffer), offset_(offset)
    {
    }
    result<void> put(std::span<const std::uint8_t> piece)
    {
        sum_.update(piece);
        if (buffered_ + piece.size() > gather_size) {
            BOOST_OUTCOME_TRY(flush());
        }
        if (piece.size() > gather_size) {
            BOOST_OUTCOME_TRY(writer_.write_at(piece, offset_));
            offset_ += piece.size();
            return success();
        }
        std::memcpy(buffer_ + buffered_, piece.data(), piece.size());
        buffered_ += piece.size();
        return success();
    }
    result<void> flush()
    {
        BOOST_OUTCOME_TRY(writer_.write_at({buffer_, buffered_}, offset_));
        offset_ += std::exchange(buffered_, 0);
        return success();
    }
    [[nodiscard]] std::uint64_t digest() const noexcept { return sum_.digest(); }

private:
    const detail::durable_writer& writer_;
    std::uint8_t* buffer_;
    std::uint64_t offset_;
    std::size_t buffered_ = 0;
    detail::running_checksum sum_;
};

} // namespace

result<std::uint64_t> save_checkpoint_file(const std::filesystem::path& path,
                                           const checkpoint& contents, file_ops& ops)
{
    return save_checkpoint_file(path, contents, checkpoint_save_options{}, ops);
}

result<std::uint64_t> save_checkpoint_file(const std::filesystem::path& path,
                                           const checkpoint& contents,
                                           const checkpoint_save_options& options, file_ops& ops)
{
    // Nothing is written that a load would refuse.
    if (auto savable = validate_for_saving(contents); !savable) {
        return in_file(path, savable.error());
    }
    const std::optional<run_identity>& identity =
        options.identity ? options.identity : contents.identity();
    if (options.identity) {
        if (auto valid = check_identity(*options.identity); !valid) {
            return in_file(path, valid.error());
        }
    }
    // A checkpoint of gradients alone is written as before groups existed.
    const bool grouped = contents.groups().size() > 1;
    std::uint64_t header_bytes = detail::header_counts_size;
    std::uint64_t entry_count = 0;
    for (const tensor_group& g : contents.groups()) {
        if (grouped) {
            header_bytes += detail::header_group_size(g.name.size());
        }
        for (const gradient_entry& entry : g.tensors.entries()) {
            header_bytes +=
                detail::header_entry_size(entry.data.shape().size(), entry.name.size());
        }
        entry_count += g.tensors.entries().size();
    }
    if (grouped) {
        header_bytes += detail::header_group_count_size;
    }
    if (identity) {
        header_bytes += detail::header_identity_size(identity->run_id.size(),
                                                     identity->parent_run_id.size());
    }
    for (const checkpoint_section& section : contents.sections()) {
        header_bytes += detail::header_section_size(section.name.size());
    }
    if (header_bytes > options.max_header_bytes) {
        return error{errc::malformed_record,
                     "Checkpoint " + path.string() + ": its header would be " +
                         std::to_string(header_bytes) + " bytes, over the limit of " +
                         std::to_string(options.max_header_bytes) +
                         " a load accepts (max_header_bytes, in the save and the load options)"};
    }
    const payload_bytes payloads{contents};
    save_plan plan = plan_save(payloads);
    BOOST_OUTCOME_TRY(auto writer, detail::durable_writer::create(path, ops));

    std::vector<gather_buffer> buffers(
        detail::io_threads(options.writers, plan.header_offset - detail::preamble_size));
    std::uint64_t payload_total = 0;
    for (std::size_t k = 0; k < payloads.size(); ++k) {
        payload_total += payloads[k].size();
    }
    detail::progress_meter progress{options.on_progress, payload_total};
    BOOST_OUTCOME_TRY(write_payloads(plan, payloads, *writer, buffers, progress));
    auto& locations = plan.locations;

    // The header, streamed from the record and the payloads' locations: no copy of the entry
    // table is built, whatever the number of tensors. Then the trailer and the preamble.
    detail::frame frame;
    frame.producer = {RUDA_VERSION_MAJOR, RUDA_VERSION_MINOR, RUDA_VERSION_PATCH};
    frame.header_offset = plan.header_offset;
    header_sink sink{*writer, allocated(buffers[0]), plan.header_offset};
    detail::header_encoder header{
        entry_count, contents.sections().size(),
        [&sink](std::span<const std::uint8_t> piece) { return sink.put(piece); }};
    if (identity) {
        frame.flags |= detail::flag_run_identity;
        BOOST_OUTCOME_TRY(header.identity(*identity));
    }
    if (grouped) {
        frame.flags |= detail::flag_tensor_groups;
        BOOST_OUTCOME_TRY(header.groups(contents.groups().size()));
        for (const tensor_group& g : contents.groups()) {
            BOOST_OUTCOME_TRY(header.group(g.name, g.tensors.entries().size()));
        }
    }
    std::size_t k = 0;
    for (const tensor_group& g : contents.groups()) {
        for (const gradient_entry& entry : g.tensors.entries()) {
            if (!entry.name.empty()) {
                frame.flags |= detail::flag_entry_names;
            }
            BOOST_OUTCOME_TRY(header.entry(entry.id, entry.dtype, entry.data.dtype(),
                                           entry.data.shape(), locations[k++], entry.name));
        }
    }
    for (const checkpoint_section& section : contents.sections()) {
        BOOST_OUTCOME_TRY(header.section(section.name, locations[k++]));
    }
    BOOST_OUTCOME_TRY(header.finish());
    BOOST_OUTCOME_TRY(sink.flush());
    frame.header_length = header.size();
    frame.header_checksum = sink.digest();
    frame.file_length = frame.header_offset + frame.header_length + detail::trailer_size;
    BOOST_OUTCOME_TRY(writer->write_at(detail::encode_trailer(frame),
                                       frame.header_offset + frame.header_length));
    BOOST_OUTCOME_TRY(writer->write_at(detail::encode_preamble(frame), 0));
    BOOST_OUTCOME_TRY(writer->commit());
    return frame.file_length;
}

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
    BOOST_OUTCOME_TRY(auto bytes, read_payload(entry.payload, verify, payload_name(entry.id)));
    return tensor_data{std::move(bytes), entry.shape, entry.stored};
}

result<std::vector<std::uint8_t>> checkpoint_reader::read_section(
    const checkpoint_section_info& section, bool verify) const
{
    BOOST_OUTCOME_TRY(auto bytes, read_payload(section.payload, verify, payload_name(section)));
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

// One payload to load, and where its bytes end up. It holds a copy of where the payload lies,
// so that a reader being consumed can free its index before the payloads arrive.
struct checkpoint_reader::payload_request {
    payload_location payload;
    param_id entry{0};                      // the entry's id, when `section` is null
    const checkpoint_section_info* section; // null for an entry
    storage bytes;

    [[nodiscard]] std::string name() const
    {
        return section == nullptr ? payload_name(entry) : payload_name(*section);
    }
};

namespace {

bool all_zero(std::span<const std::uint8_t> bytes)
{
    return std::all_of(bytes.begin(), bytes.end(), [](std::uint8_t b) { return b == 0; });
}

// Payloads under this size share one buffer with their neighbours in the file (one read, one
// allocation, no bookkeeping of their own); larger ones get a buffer each.
constexpr std::size_t small_payload = std::size_t{256} << 10U;
// The most bytes one shared buffer spans, and the widest gap it bridges between payloads.
constexpr std::size_t run_limit = std::size_t{1} << 20U;
constexpr std::size_t run_gap = 4096;

} // namespace

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
        if (!all_zero({chunk.data(), n})) {
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

// One job of a load: payloads in_order[first, last), and where the zero padding before them
// starts. A run of small payloads shares one buffer; a large payload is read alone.
struct checkpoint_reader::read_job {
    std::size_t first;
    std::size_t last;
    std::uint64_t padding_from;
};

// The jobs, where the last payload ends and the payload bytes in all.
struct checkpoint_reader::read_plan {
    std::vector<read_job> jobs;
    std::uint64_t end = detail::preamble_size;
    std::uint64_t bytes = 0;
};

// The whole file mapped once; every payload a slice of the mapping, hashed in place by the
// readers, each job checking the padding before its payloads and between them.
result<void> checkpoint_reader::map_payloads(std::vector<payload_request>& requests,
                                             const std::vector<std::uint32_t>& in_order,
                                             bool full, bool verify, unsigned readers,
                                             detail::progress_meter& progress) const
{
    BOOST_OUTCOME_TRY(auto file,
                      detail::map_unchangeable_file(
                          source_.fd(), static_cast<std::size_t>(source_.size()), path().string()));
    const auto padding = [&](std::uint64_t from, std::uint64_t to) -> result<void> {
        if (full && from < to && !all_zero(file.span().subspan(from, to - from))) {
            return nonzero_padding(from, to);
        }
        return success();
    };
    const read_plan plan = plan_reads(requests, in_order);
    const auto map_job = [&](std::size_t j, unsigned) -> result<void> {
        const read_job& job = plan.jobs[j];
        std::uint64_t cursor = job.padding_from;
        for (std::size_t i = job.first; i < job.last; ++i) {
            payload_request& r = requests[in_order[i]];
            BOOST_OUTCOME_TRY(padding(cursor, r.payload.offset));
            r.bytes = file.slice(r.payload.offset, r.payload.length);
            if (verify && detail::checksum(r.bytes) != r.payload.checksum) {
                return mismatch(r.name());
            }
            cursor = std::max(cursor, r.payload.offset + r.payload.length);
            BOOST_OUTCOME_TRY(progress.add(r.payload.length));
        }
        return success();
    };
    BOOST_OUTCOME_TRY(
        detail::run_jobs(plan.jobs.size(), detail::io_threads(readers, plan.bytes), map_job));
    return padding(plan.end, header_offset_);
}

// The file in order, cut into jobs: runs of small payloads close enough to come in with one
// read into one buffer, each large payload on its own.
checkpoint_reader::read_plan checkpoint_reader::plan_reads(
    const std::vector<payload_request>& requests, const std::vector<std::uint32_t>& in_order)
{
    read_plan plan;
    for (std::size_t i = 0; i < in_order.size();) {
        const payload_location& first = requests[in_order[i]].payload;
        std::size_t end = i + 1;
        std::uint64_t run_end = first.offset + first.length;
        while (first.length < small_payload && end < in_order.size()) {
            const payload_location& next = requests[in_order[end]].payload;
            const std::uint64_t next_end = std::max(run_end, next.offset + next.length);
            if (next.length >= small_payload || next.offset > run_end + run_gap ||
                next_end - first.offset > run_limit) {
                break;
            }
            run_end = next_end;
            ++end;
        }
        plan.jobs.push_back({i, end, plan.end});
        plan.bytes += run_end - first.offset;
        plan.end = std::max(plan.end, run_end);
        i = end;
    }
    return plan;
}

// The jobs run on `readers` threads; each hashes what it read right after it arrived, while it
// is still in cache.
result<void> checkpoint_reader::read_payloads(std::vector<payload_request>& requests,
                                              const std::vector<std::uint32_t>& in_order,
                                              bool full, bool verify, unsigned readers,
                                              detail::progress_meter& progress) const
{
    const read_plan plan = plan_reads(requests, in_order);
    const auto read_job = [&](std::size_t j, unsigned) {
        return read_job_payloads(requests, in_order, plan.jobs[j], full, verify, progress);
    };
    BOOST_OUTCOME_TRY(
        detail::run_jobs(plan.jobs.size(), detail::io_threads(readers, plan.bytes), read_job));
    if (full) {
        BOOST_OUTCOME_TRY(check_padding(plan.end, header_offset_));
    }
    return success();
}

result<void> checkpoint_reader::read_job_payloads(std::vector<payload_request>& requests,
                                                  const std::vector<std::uint32_t>& in_order,
                                                  const read_job& job, bool full, bool verify,
                                                  detail::progress_meter& progress) const
{
    const payload_location& first = requests[in_order[job.first]].payload;
    if (full) {
        BOOST_OUTCOME_TRY(check_padding(job.padding_from, first.offset));
    }
    if (first.length >= small_payload) { // alone, read in pieces
        payload_request& r = requests[in_order[job.first]];
        BOOST_OUTCOME_TRY(r.bytes, storage::try_allocate(static_cast<std::size_t>(first.length)));
        std::uint8_t* data = r.bytes.writable_data();
        detail::running_checksum sum;
        for (std::size_t done = 0; done < r.bytes.size();) {
            const std::size_t n = std::min(r.bytes.size() - done, small_payload);
            BOOST_OUTCOME_TRY(read_at(data + done, n, first.offset + done));
            if (verify) {
                sum.update({data + done, n});
            }
            done += n;
            // Told before the whole payload is verified: its last piece is checked just below.
            BOOST_OUTCOME_TRY(progress.add(n));
        }
        if (verify && sum.digest() != first.checksum) {
            return mismatch(r.name());
        }
        return success();
    }
    // A run: one read, the payloads slices of it, the padding between them checked in place.
    std::uint64_t run_end = first.offset;
    for (std::size_t i = job.first; i < job.last; ++i) {
        const payload_location& p = requests[in_order[i]].payload;
        run_end = std::max(run_end, p.offset + p.length);
    }
    BOOST_OUTCOME_TRY(auto run,
                      storage::try_allocate(static_cast<std::size_t>(run_end - first.offset)));
    BOOST_OUTCOME_TRY(read_at(run.writable_data(), run.size(), first.offset));
    std::uint64_t cursor = first.offset;
    std::uint64_t run_bytes = 0; // the payloads' own bytes, for the progress report
    for (std::size_t i = job.first; i < job.last; ++i) {
        payload_request& r = requests[in_order[i]];
        run_bytes += r.payload.length;
        const std::uint64_t at = r.payload.offset;
        if (full && cursor < at &&
            !all_zero(run.span().subspan(cursor - first.offset, at - cursor))) {
            return nonzero_padding(cursor, at);
        }
        r.bytes = run.slice(at - first.offset, r.payload.length);
        if (verify && detail::checksum(r.bytes) != r.payload.checksum) {
            return mismatch(r.name());
        }
        cursor = std::max(cursor, at + r.payload.length);
    }
    return progress.add(run_bytes);
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
