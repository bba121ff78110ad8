// Saving and reading checkpoint files. The writer streams payloads from the checkpoint in
// memory; the reader checks the whole frame before it reads or allocates for any payload.
#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/checkpoint/detail/durable_writer.hpp>
#include <ruda/checkpoint/detail/frame.hpp>
#include <ruda/optim/validate_record.hpp>
#include <ruda/tensor/detail/host_buffer.hpp>
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

    checkpoint_index index;
    for (const gradient_entry& entry : contents.gradients().entries()) {
        BOOST_OUTCOME_TRY(auto payload, append_payload(*writer, entry.data.bytes()));
        index.entries.push_back(
            {entry.id, entry.dtype, entry.data.dtype(), entry.data.shape(), payload});
    }
    for (const checkpoint_section& section : contents.sections()) {
        BOOST_OUTCOME_TRY(auto payload, append_payload(*writer, section.bytes));
        index.sections.push_back({section.name, payload});
    }

    const auto header = detail::encode_header(index);
    detail::frame frame;
    frame.producer = {RUDA_VERSION_MAJOR, RUDA_VERSION_MINOR, RUDA_VERSION_PATCH};
    frame.header_offset = writer->size();
    frame.header_length = header.size();
    frame.header_checksum = detail::checksum(header);
    frame.file_length = frame.header_offset + header.size() + detail::trailer_size;
    BOOST_OUTCOME_TRY(writer->write(header));
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
    std::vector<std::uint8_t> header(frame.value().header_length);
    BOOST_OUTCOME_TRY(reader.read_at(header.data(), header.size(), frame.value().header_offset));
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

result<std::vector<std::uint8_t>>
checkpoint_reader::read_payload(const payload_location& payload, bool verify,
                                const std::string& what) const
{
    // The frame check put the payload inside the file: this allocation is bounded by it.
    std::vector<std::uint8_t> bytes(payload.length);
    BOOST_OUTCOME_TRY(read_at(bytes.data(), bytes.size(), payload.offset));
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
    return read_payload(section.payload, verify, payload_name(section));
}

result<bool> checkpoint_reader::payload_intact(const payload_location& payload) const
{
    BOOST_OUTCOME_TRY(auto bytes, read_payload(payload, false, {}));
    return detail::checksum(bytes) == payload.checksum;
}

result<checkpoint> checkpoint_reader::load(const checkpoint_load_options& options) const
{
    // What to read: the selected entries and every section, each into its own buffer.
    struct request {
        const payload_location* payload;
        std::vector<std::uint8_t> bytes;
        const checkpoint_entry_info* entry; // null for a section
        const checkpoint_section_info* section;
    };
    std::vector<request> requests;
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
                requests.push_back({&found->second->payload, {}, found->second, nullptr});
            }
        }
    } else {
        for (const auto& entry : index_.entries) {
            requests.push_back({&entry.payload, {}, &entry, nullptr});
        }
    }
    const std::size_t entry_count = requests.size();
    for (const auto& section : index_.sections) {
        requests.push_back({&section.payload, {}, nullptr, &section});
    }

    // Read in file order. Small payloads (and padding) come through a staging buffer that
    // holds up to 1 MiB of consecutive file bytes; large ones go straight to their buffer.
    std::vector<request*> in_order;
    for (request& r : requests) {
        in_order.push_back(&r);
    }
    std::sort(in_order.begin(), in_order.end(), [](const request* a, const request* b) {
        return std::pair{a->payload->offset, a->payload->length} <
               std::pair{b->payload->offset, b->payload->length};
    });
    constexpr std::size_t staging_size = std::size_t{1} << 20U;
    constexpr std::size_t direct_size = std::size_t{256} << 10U;
    std::vector<std::uint8_t> staging;
    std::uint64_t staged_from = 0;
    const auto read = [&](std::uint8_t* data, std::size_t size, std::uint64_t offset) -> result<void> {
        if (size >= direct_size || fd_ < 0) {
            return read_at(data, size, offset);
        }
        if (staging.empty() || offset < staged_from || offset + size > staged_from + staging.size()) {
            staged_from = offset;
            staging.resize(static_cast<std::size_t>(
                std::min<std::uint64_t>(staging_size, header_offset_ - offset)));
            BOOST_OUTCOME_TRY(read_at(staging.data(), staging.size(), offset));
        }
        if (size != 0) {
            std::memcpy(data, staging.data() + (offset - staged_from), size);
        }
        return success();
    };
    const bool full = !options.only_ids;
    const auto check_padding = [&](std::uint64_t from, std::uint64_t to) -> result<void> {
        std::array<std::uint8_t, 4096> chunk{};
        while (from < to) {
            const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(to - from, chunk.size()));
            BOOST_OUTCOME_TRY(read(chunk.data(), n, from));
            if (std::any_of(chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(n),
                            [](std::uint8_t b) { return b != 0; })) {
                return error{errc::malformed_record, "Checkpoint " + path_.string() +
                                                         ": nonzero padding between offsets " +
                                                         std::to_string(from) + " and " +
                                                         std::to_string(from + n)};
            }
            from += n;
        }
        return success();
    };
    std::uint64_t cursor = detail::preamble_size;
    for (request* r : in_order) {
        if (full) {
            BOOST_OUTCOME_TRY(check_padding(cursor, r->payload->offset));
        }
        r->bytes = detail::host_buffer(static_cast<std::size_t>(r->payload->length));
        // In pieces, each hashed right after it arrives, while it is still in the CPU's cache.
        detail::running_checksum sum;
        for (std::size_t done = 0; done < r->bytes.size();) {
            const std::size_t n = std::min(r->bytes.size() - done, direct_size);
            BOOST_OUTCOME_TRY(read(r->bytes.data() + done, n, r->payload->offset + done));
            if (options.verify_checksums) {
                sum.update({r->bytes.data() + done, n});
            }
            done += n;
        }
        if (options.verify_checksums && sum.digest() != r->payload->checksum) {
            return mismatch(r->entry != nullptr ? payload_name(*r->entry)
                                                : payload_name(*r->section));
        }
        cursor = std::max(cursor, r->payload->offset + r->payload->length);
    }
    if (full) {
        BOOST_OUTCOME_TRY(check_padding(cursor, header_offset_));
    }

    std::vector<gradient_entry> entries;
    entries.reserve(entry_count);
    for (std::size_t k = 0; k < entry_count; ++k) {
        const checkpoint_entry_info& info = *requests[k].entry;
        entries.push_back({info.id, info.original,
                           tensor_data{std::move(requests[k].bytes), info.shape, info.stored}});
    }
    gradients_params_record record{std::move(entries)};
    if (auto valid = validate_gradients_record(record); !valid) {
        return in_file(path_, valid.error());
    }
    checkpoint contents{std::move(record)};
    for (std::size_t k = entry_count; k < requests.size(); ++k) {
        BOOST_OUTCOME_TRY(contents.put_bytes(requests[k].section->name, std::move(requests[k].bytes)));
    }
    return contents;
}

result<checkpoint> load_checkpoint_file(const std::filesystem::path& path,
                                        const checkpoint_load_options& options)
{
    BOOST_OUTCOME_TRY(auto reader, checkpoint_reader::open(path, options.max_header_bytes));
    return reader.load(options);
}

result<checkpoint> load_checkpoint_bytes(std::span<const std::uint8_t> bytes,
                                         const checkpoint_load_options& options)
{
    BOOST_OUTCOME_TRY(auto reader,
                      checkpoint_reader::open_bytes(bytes, "<memory>", options.max_header_bytes));
    return reader.load(options);
}

} // namespace ruda
