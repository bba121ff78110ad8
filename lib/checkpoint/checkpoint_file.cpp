// Saving and reading checkpoint files. The writer streams payloads from the checkpoint in
// memory; the reader checks the whole frame before it reads or allocates for any payload.
#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/checkpoint/detail/durable_writer.hpp>
#include <ruda/checkpoint/detail/frame.hpp>
#include <ruda/optim/validate_record.hpp>
#include <ruda/tensor/detail/mapped_file.hpp>
#include <ruda/version.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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
std::string payload_name(const checkpoint_entry_info& entry)
{
    return "the gradient of parameter " + std::to_string(entry.id);
}

std::string payload_name(const checkpoint_section_info& section)
{
    return "section " + section.name;
}

// Appends a payload at the next aligned offset; where it went and its checksum. Each piece is
// hashed right before it is written, while it is still in the CPU's cache.
result<payload_location> append_payload(detail::durable_writer& writer,
                                        std::span<const std::uint8_t> bytes)
{
    const std::uint64_t offset = detail::align_up(writer.size());
    BOOST_OUTCOME_TRY(writer.pad_to(offset));
    detail::running_checksum sum;
    for (std::size_t done = 0; done < bytes.size();) {
        const auto piece = bytes.subspan(done, std::min(bytes.size() - done,
                                                        detail::durable_writer::buffer_size));
        sum.update(piece);
        BOOST_OUTCOME_TRY(writer.write(piece));
        done += piece.size();
    }
    return payload_location{offset, bytes.size(), sum.digest()};
}

} // namespace

result<std::uint64_t> save_checkpoint_file(const std::filesystem::path& path,
                                           const checkpoint& contents, file_ops& ops)
{
    BOOST_OUTCOME_TRY(auto writer, detail::durable_writer::create(path, ops));
    BOOST_OUTCOME_TRY(writer->write(std::array<std::uint8_t, detail::preamble_size>{}));

    // The payloads, then the header streamed from the record and their locations: no copy of
    // the entry table is built, whatever the number of tensors.
    const auto& entries = contents.gradients().entries();
    std::vector<payload_location> locations;
    locations.reserve(entries.size() + contents.sections().size());
    for (const gradient_entry& entry : entries) {
        BOOST_OUTCOME_TRY(auto payload, append_payload(*writer, entry.data.bytes()));
        locations.push_back(payload);
    }
    for (const checkpoint_section& section : contents.sections()) {
        BOOST_OUTCOME_TRY(auto payload, append_payload(*writer, section.bytes));
        locations.push_back(payload);
    }

    detail::frame frame;
    frame.producer = {RUDA_VERSION_MAJOR, RUDA_VERSION_MINOR, RUDA_VERSION_PATCH};
    frame.header_offset = writer->size();
    detail::running_checksum header_sum;
    detail::header_encoder header{entries.size(), contents.sections().size(),
                                  [&](std::span<const std::uint8_t> piece) -> result<void> {
                                      header_sum.update(piece);
                                      return writer->write(piece);
                                  }};
    std::size_t k = 0;
    for (const gradient_entry& entry : entries) {
        BOOST_OUTCOME_TRY(header.entry(entry.id, entry.dtype, entry.data.dtype(),
                                       entry.data.shape(), locations[k++]));
    }
    for (const checkpoint_section& section : contents.sections()) {
        BOOST_OUTCOME_TRY(header.section(section.name, locations[k++]));
    }
    BOOST_OUTCOME_TRY(header.finish());
    frame.header_length = header.size();
    frame.header_checksum = header_sum.digest();
    frame.file_length = frame.header_offset + frame.header_length + detail::trailer_size;
    BOOST_OUTCOME_TRY(writer->write(detail::encode_trailer(frame)));
    BOOST_OUTCOME_TRY(writer->overwrite(detail::encode_preamble(frame), 0));
    BOOST_OUTCOME_TRY(writer->commit());
    return frame.file_length;
}

checkpoint_reader::checkpoint_reader(std::filesystem::path path, int fd,
                                     std::span<const std::uint8_t> memory, std::uint64_t length)
    : path_(std::move(path)), fd_(fd), memory_(memory), length_(length)
{
}

checkpoint_reader::checkpoint_reader(checkpoint_reader&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)), memory_(other.memory_),
      length_(other.length_), header_offset_(other.header_offset_), index_(std::move(other.index_))
{
}

checkpoint_reader& checkpoint_reader::operator=(checkpoint_reader&& other) noexcept
{
    if (this != &other) {
        if (fd_ >= 0) {
            ::close(fd_);
        }
        path_ = std::move(other.path_);
        fd_ = std::exchange(other.fd_, -1);
        memory_ = other.memory_;
        length_ = other.length_;
        header_offset_ = other.header_offset_;
        index_ = std::move(other.index_);
    }
    return *this;
}

checkpoint_reader::~checkpoint_reader()
{
    if (fd_ >= 0) {
        ::close(fd_);
    }
}

result<void> checkpoint_reader::read_at(std::uint8_t* data, std::size_t size,
                                        std::uint64_t offset) const
{
    if (fd_ < 0) {
        if (offset > memory_.size() || size > memory_.size() - offset) {
            return error{errc::malformed_record, "Checkpoint " + path_.string() + ": read past the end"};
        }
        if (size != 0) {
            std::memcpy(data, memory_.data() + offset, size);
        }
        return success();
    }
    return read_exact_at(fd_, path_, data, size, offset);
}

result<checkpoint_reader> checkpoint_reader::open(const std::filesystem::path& path,
                                                  std::uint64_t max_header_bytes)
{
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return io_error_from_errno("open", path);
    }
    checkpoint_reader reader{path, fd, {}, 0}; // closes the file on every return below
    struct stat info {};
    if (::fstat(fd, &info) != 0) {
        return io_error_from_errno("stat", path);
    }
    if (!S_ISREG(info.st_mode)) {
        return error{errc::malformed_record, "Checkpoint " + path.string() + ": not a regular file"};
    }
    reader.length_ = static_cast<std::uint64_t>(info.st_size);
    return verify_frame(std::move(reader), max_header_bytes);
}

result<checkpoint_reader> checkpoint_reader::open_bytes(std::span<const std::uint8_t> bytes,
                                                        std::string name,
                                                        std::uint64_t max_header_bytes)
{
    return verify_frame(checkpoint_reader{std::move(name), -1, bytes, bytes.size()},
                        max_header_bytes);
}

result<checkpoint_reader> checkpoint_reader::verify_frame(checkpoint_reader reader,
                                                          std::uint64_t max_header_bytes)
{
    const auto& path = reader.path_;
    const std::uint64_t file_length = reader.length_;
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
    BOOST_OUTCOME_TRY(reader.read_at(header.writable_data(), header.size(), frame.value().header_offset));
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
    return error{errc::checksum_mismatch, "Checkpoint " + path_.string() + ": checksum mismatch in " + what};
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
    BOOST_OUTCOME_TRY(auto bytes, read_payload(entry.payload, verify, payload_name(entry)));
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
    if (fd_ < 0 || options.mapping == load_mapping::never) {
        return {};
    }
    return detail::unchangeable_because(fd_);
}

// One payload to load, and where its bytes end up.
struct checkpoint_reader::payload_request {
    const payload_location* payload;
    const checkpoint_entry_info* entry;     // null for a section
    const checkpoint_section_info* section; // null for an entry
    storage bytes;

    [[nodiscard]] std::string name() const
    {
        return entry != nullptr ? payload_name(*entry) : payload_name(*section);
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
    return error{errc::malformed_record, "Checkpoint " + path_.string() +
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
    // What to read: the selected entries, then every section.
    std::vector<payload_request> requests;
    if (options.only_ids) {
        std::unordered_map<std::uint64_t, const checkpoint_entry_info*> by_id;
        for (const auto& entry : index_.entries) {
            by_id.emplace(entry.id, &entry);
        }
        std::unordered_set<std::uint64_t> wanted;
        for (const std::uint64_t id : *options.only_ids) {
            const auto found = by_id.find(id);
            if (found == by_id.end()) {
                return error{errc::missing_gradient, "Checkpoint " + path_.string() +
                                                         " has no gradient for parameter " +
                                                         std::to_string(id)};
            }
            if (wanted.insert(id).second) {
                requests.push_back({&found->second->payload, found->second, nullptr, {}});
            }
        }
    } else {
        requests.reserve(index_.entries.size() + index_.sections.size());
        for (const auto& entry : index_.entries) {
            requests.push_back({&entry.payload, &entry, nullptr, {}});
        }
    }
    const std::size_t entry_count = requests.size();
    for (const auto& section : index_.sections) {
        requests.push_back({&section.payload, nullptr, &section, {}});
    }
    std::vector<std::uint32_t> in_order(requests.size());
    for (std::uint32_t k = 0; k < in_order.size(); ++k) {
        in_order[k] = k;
    }
    const auto before = [&](std::uint32_t a, std::uint32_t b) {
        const auto& pa = *requests[a].payload;
        const auto& pb = *requests[b].payload;
        return std::pair{pa.offset, pa.length} < std::pair{pb.offset, pb.length};
    };
    if (!std::is_sorted(in_order.begin(), in_order.end(), before)) { // ruda writes in order
        std::sort(in_order.begin(), in_order.end(), before);
    }

    const bool full = !options.only_ids;
    if (const auto reason = mapping_reason(options); !reason.empty()) {
        BOOST_OUTCOME_TRY(map_payloads(requests, in_order, full, options.verify_checksums));
    } else {
        BOOST_OUTCOME_TRY(read_payloads(requests, in_order, full, options.verify_checksums));
    }

    std::vector<gradient_entry> entries;
    entries.reserve(entry_count);
    for (std::size_t k = 0; k < entry_count; ++k) {
        const checkpoint_entry_info& info = *requests[k].entry;
        // A reader being consumed gives its shapes away rather than copying them.
        auto dims = spent != nullptr ? std::move((*spent)[static_cast<std::size_t>(&info - spent->data())].shape)
                                     : info.shape;
        entries.push_back({info.id, info.original,
                           tensor_data{std::move(requests[k].bytes), std::move(dims), info.stored}});
    }
    gradients_params_record record{std::move(entries)};
    if (auto valid = validate_gradients_record(record); !valid) {
        return in_file(path_, valid.error());
    }
    checkpoint contents{std::move(record)};
    for (std::size_t k = entry_count; k < requests.size(); ++k) {
        const checkpoint_section_info& info = *requests[k].section;
        BOOST_OUTCOME_TRY(contents.put_bytes(info.name, requests[k].bytes.to_vector()));
    }
    return contents;
}

// The whole file mapped once; every payload a slice of the mapping, hashed in place.
result<void> checkpoint_reader::map_payloads(std::vector<payload_request>& requests,
                                             const std::vector<std::uint32_t>& in_order,
                                             bool full, bool verify) const
{
    BOOST_OUTCOME_TRY(auto file, detail::map_unchangeable_file(
                                     fd_, static_cast<std::size_t>(length_), path_.string()));
    std::uint64_t cursor = detail::preamble_size;
    const auto padding = [&](std::uint64_t from, std::uint64_t to) -> result<void> {
        if (full && from < to && !all_zero(file.span().subspan(from, to - from))) {
            return nonzero_padding(from, to);
        }
        return success();
    };
    for (const std::uint32_t k : in_order) {
        payload_request& r = requests[k];
        BOOST_OUTCOME_TRY(padding(cursor, r.payload->offset));
        r.bytes = file.slice(r.payload->offset, r.payload->length);
        if (verify && detail::checksum(r.bytes) != r.payload->checksum) {
            return mismatch(r.name());
        }
        cursor = std::max(cursor, r.payload->offset + r.payload->length);
    }
    return padding(cursor, header_offset_);
}

// Read in file order. Runs of small payloads come in with one read into one buffer that they
// share as slices (padding between them checked in place); a large payload gets a buffer of
// its own, read in pieces. Each piece is hashed right after it arrives, while still in cache.
result<void> checkpoint_reader::read_payloads(std::vector<payload_request>& requests,
                                              const std::vector<std::uint32_t>& in_order,
                                              bool full, bool verify) const
{
    std::uint64_t cursor = detail::preamble_size;
    for (std::size_t i = 0; i < in_order.size();) {
        const payload_location& first = *requests[in_order[i]].payload;
        if (full) {
            BOOST_OUTCOME_TRY(check_padding(cursor, first.offset));
        }
        cursor = std::max(cursor, first.offset);
        if (first.length >= small_payload) {
            payload_request& r = requests[in_order[i]];
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
            }
            if (verify && sum.digest() != first.checksum) {
                return mismatch(r.name());
            }
            cursor = std::max(cursor, first.offset + first.length);
            ++i;
            continue;
        }
        // The run: following small payloads close enough to share the buffer.
        std::size_t end = i + 1;
        std::uint64_t run_end = first.offset + first.length;
        while (end < in_order.size()) {
            const payload_location& next = *requests[in_order[end]].payload;
            const std::uint64_t next_end = std::max(run_end, next.offset + next.length);
            if (next.length >= small_payload || next.offset > run_end + run_gap ||
                next_end - first.offset > run_limit) {
                break;
            }
            run_end = next_end;
            ++end;
        }
        BOOST_OUTCOME_TRY(auto run, storage::try_allocate(static_cast<std::size_t>(run_end - first.offset)));
        BOOST_OUTCOME_TRY(read_at(run.writable_data(), run.size(), first.offset));
        for (; i < end; ++i) {
            payload_request& r = requests[in_order[i]];
            const std::uint64_t at = r.payload->offset;
            if (full && cursor < at && !all_zero(run.span().subspan(cursor - first.offset, at - cursor))) {
                return nonzero_padding(cursor, at);
            }
            r.bytes = run.slice(at - first.offset, r.payload->length);
            if (verify && detail::checksum(r.bytes) != r.payload->checksum) {
                return mismatch(r.name());
            }
            cursor = std::max(cursor, at + r.payload->length);
        }
    }
    if (full) {
        BOOST_OUTCOME_TRY(check_padding(cursor, header_offset_));
    }
    return success();
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
