// Saving and reading checkpoint files. The writer streams payloads from the checkpoint in
// memory; the reader checks the whole frame before it reads or allocates for any payload.
#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/checkpoint/detail/durable_writer.hpp>
#include <ruda/checkpoint/detail/frame.hpp>
#include <ruda/optim/validate_record.hpp>
#include <ruda/version.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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

// Reads exactly `size` bytes at `offset`.
result<void> read_at(int fd, const std::filesystem::path& path, std::uint8_t* data,
                     std::size_t size, std::uint64_t offset)
{
    while (size > 0) {
        const ssize_t n = ::pread(fd, data, size, static_cast<off_t>(offset));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return io_error_from_errno("read", path);
        }
        if (n == 0) {
            return error{errc::malformed_record, "Checkpoint " + path.string() +
                                                     ": the file ended early (changed while read?)"};
        }
        data += n;
        size -= static_cast<std::size_t>(n);
        offset += static_cast<std::uint64_t>(n);
    }
    return success();
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

checkpoint_reader::checkpoint_reader(std::filesystem::path path, int fd, checkpoint_index index)
    : path_(std::move(path)), fd_(fd), index_(std::move(index))
{
}

checkpoint_reader::checkpoint_reader(checkpoint_reader&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)),
      index_(std::move(other.index_))
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

result<checkpoint_reader> checkpoint_reader::open(const std::filesystem::path& path,
                                                  std::uint64_t max_header_bytes)
{
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return io_error_from_errno("open", path);
    }
    checkpoint_reader reader{path, fd, {}}; // closes the file on every return below
    struct stat info {};
    if (::fstat(fd, &info) != 0) {
        return io_error_from_errno("stat", path);
    }
    if (!S_ISREG(info.st_mode)) {
        return error{errc::malformed_record, "Checkpoint " + path.string() + ": not a regular file"};
    }
    const auto file_length = static_cast<std::uint64_t>(info.st_size);
    if (file_length < detail::preamble_size + detail::trailer_size) {
        return error{errc::malformed_record,
                     "Checkpoint " + path.string() + ": " + std::to_string(file_length) +
                         " bytes is too short for a ruda checkpoint"};
    }
    std::array<std::uint8_t, detail::preamble_size> preamble{};
    BOOST_OUTCOME_TRY(read_at(fd, path, preamble.data(), preamble.size(), 0));
    auto frame = detail::decode_preamble(preamble, file_length, max_header_bytes);
    if (!frame) {
        return in_file(path, frame.error());
    }
    std::array<std::uint8_t, detail::trailer_size> trailer{};
    BOOST_OUTCOME_TRY(read_at(fd, path, trailer.data(), trailer.size(),
                              file_length - detail::trailer_size));
    if (auto intact = detail::check_trailer(trailer, frame.value()); !intact) {
        return in_file(path, intact.error());
    }
    // Capped by max_header_bytes and by the file's own length (decode_preamble checked both).
    std::vector<std::uint8_t> header(frame.value().header_length);
    BOOST_OUTCOME_TRY(read_at(fd, path, header.data(), header.size(), frame.value().header_offset));
    auto index = detail::decode_header(header, frame.value());
    if (!index) {
        return in_file(path, index.error());
    }
    reader.index_ = std::move(index).value();
    return reader;
}

result<std::vector<std::uint8_t>>
checkpoint_reader::read_payload(const payload_location& payload, bool verify,
                                const std::string& what) const
{
    // The frame check put the payload inside the file: this allocation is bounded by it.
    std::vector<std::uint8_t> bytes(payload.length);
    BOOST_OUTCOME_TRY(read_at(fd_, path_, bytes.data(), bytes.size(), payload.offset));
    if (verify && detail::checksum(bytes) != payload.checksum) {
        return error{errc::checksum_mismatch,
                     "Checkpoint " + path_.string() + ": checksum mismatch in " + what};
    }
    return bytes;
}

result<tensor_data> checkpoint_reader::read_entry(const checkpoint_entry_info& entry,
                                                  bool verify) const
{
    BOOST_OUTCOME_TRY(auto bytes,
                      read_payload(entry.payload, verify,
                                   "the gradient of parameter " + std::to_string(entry.id)));
    return tensor_data{std::move(bytes), entry.shape, entry.stored};
}

result<std::vector<std::uint8_t>> checkpoint_reader::read_section(
    const checkpoint_section_info& section, bool verify) const
{
    return read_payload(section.payload, verify, "section " + section.name);
}

result<bool> checkpoint_reader::payload_intact(const payload_location& payload) const
{
    BOOST_OUTCOME_TRY(auto bytes, read_payload(payload, false, {}));
    return detail::checksum(bytes) == payload.checksum;
}

result<checkpoint> checkpoint_reader::load(const checkpoint_load_options& options) const
{
    std::vector<const checkpoint_entry_info*> selected;
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
                selected.push_back(found->second);
            }
        }
    } else {
        for (const auto& entry : index_.entries) {
            selected.push_back(&entry);
        }
    }

    std::vector<gradient_entry> entries;
    entries.reserve(selected.size());
    for (const checkpoint_entry_info* info : selected) {
        BOOST_OUTCOME_TRY(auto data, read_entry(*info, options.verify_checksums));
        entries.push_back({info->id, info->original, std::move(data)});
    }
    gradients_params_record record{std::move(entries)};
    if (auto valid = validate_gradients_record(record); !valid) {
        return in_file(path_, valid.error());
    }
    checkpoint contents{std::move(record)};
    for (const auto& section : index_.sections) {
        BOOST_OUTCOME_TRY(auto bytes, read_section(section, options.verify_checksums));
        BOOST_OUTCOME_TRY(contents.put_bytes(section.name, std::move(bytes)));
    }
    return contents;
}

result<checkpoint> load_checkpoint_file(const std::filesystem::path& path,
                                        const checkpoint_load_options& options)
{
    BOOST_OUTCOME_TRY(auto reader, checkpoint_reader::open(path, options.max_header_bytes));
    return reader.load(options);
}

} // namespace ruda
