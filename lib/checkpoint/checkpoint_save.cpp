// Saving a checkpoint file: the payloads streamed from the checkpoint in memory by a few
// writers, each hashing what it writes, then the header, the preamble and the commit.
#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/checkpoint/detail/durable_writer.hpp>
#include <ruda/checkpoint/detail/frame.hpp>
#include <ruda/checkpoint/detail/io_jobs.hpp>
#include <ruda/checkpoint/detail/progress_meter.hpp>
#include <ruda/optim/validate_record.hpp>
#include <ruda/tensor/detail/fresh_pages.hpp>
#include <ruda/version.hpp>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace ruda {
namespace {

error in_file(const std::filesystem::path& path, const error& cause)
{
    return error{cause.code(), "Checkpoint " + path.string() + ": " + cause.message()};
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

} // namespace ruda
