// Checkpoint files (docs/FORMAT.md): saving a checkpoint atomically and durably, with every
// payload streamed from memory and checksummed; reading one with the whole frame verified
// before anything is deserialized, payload checksums verified, and partial loads.
#pragma once

#include <ruda/checkpoint/checkpoint.hpp>
#include <ruda/checkpoint/checkpoint_index.hpp>
#include <ruda/checkpoint/detail/byte_source.hpp>
#include <ruda/checkpoint/file_ops.hpp>
#include <ruda/error.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace ruda {

/// Whether a load may map the file instead of reading it.
enum class load_mapping : std::uint8_t {
    /// Always read into memory of the record's own.
    never,
    /// Map the file, and let the record's tensors share the mapping's pages, when the kernel
    /// keeps the file from changing while mapped: a memfd sealed against shrinking and writing,
    /// a file with the immutable flag, or an fs-verity file. Any other file could be truncated
    /// under the mapping (SIGBUS on the next touch) or rewritten under the record, so it is
    /// read.
    when_unchangeable,
};

/// Where a save or a load of a checkpoint file stands: payload bytes written, or read and
/// verified, so far, of how many. The header and the frame are not counted.
struct checkpoint_progress {
    std::uint64_t bytes_done = 0;
    std::uint64_t bytes_total = 0;
};

struct checkpoint_load_options {
    /// Verify each payload's checksum (the frame's checksums are always verified).
    bool verify_checksums = true;
    /// Whether the file may be mapped rather than read (see `load_mapping`).
    load_mapping mapping = load_mapping::when_unchangeable;
    /// Load only these groups ("weights", "optimizer"; each must be present, else
    /// `errc::not_found`); all when empty. A file without groups has one, "gradients".
    std::optional<std::vector<std::string>> only_groups{};
    /// In the groups loaded, only the tensors of these ids (each must be in one of them, else
    /// `errc::missing_gradient`); all when empty.
    std::optional<std::vector<param_id>> only_ids{};
    /// In the groups loaded, only the tensors of these names, or whose names continue one of
    /// them after a "." ("fc1" loads "fc1.weight" and "fc1.bias", and in the optimizer group
    /// "fc1.weight.exp_avg"); each must select some tensor, else `errc::missing_gradient`.
    /// With `only_ids` too, a tensor either selects is loaded.
    std::optional<std::vector<std::string>> only_names{};
    /// The largest header accepted, whatever the file claims.
    std::uint64_t max_header_bytes = std::uint64_t{64} << 20U;
    /// Load only a checkpoint that records this run id: one of another run, or of none, is
    /// `errc::other_run`, before any payload is read. Any run when empty.
    std::string run_id{};
    /// Threads reading (and verifying) payloads at once; 0 (the default): one per core, at most
    /// 4. A load of under 16 MiB of payloads uses one. docs/BENCHMARKS.md has the measurements.
    unsigned readers = 0;
    /// Called as payloads arrive and are verified (at most every 256 KiB of a large one, after
    /// each run of small ones), from the reading threads but never two calls at once, with
    /// `bytes_done` rising to `bytes_total`. Keep it short. An exception from it stops the
    /// load with `errc::cancelled`.
    std::function<void(const checkpoint_progress&)> on_progress{};
};

struct checkpoint_save_options {
    /// Threads writing (and hashing) payloads at once, each at its own offsets of the file; 0
    /// (the default): one per core, at most 4. A save of under 16 MiB of payloads uses one. The
    /// file is the same, byte for byte, whatever the number. docs/BENCHMARKS.md has the
    /// measurements.
    unsigned writers = 0;
    /// The largest header a save writes: a load refuses a larger one unless told otherwise
    /// (`checkpoint_load_options::max_header_bytes`, the same 64 MiB by default: about 700,000
    /// gradients of rank 1). Raise both together.
    std::uint64_t max_header_bytes = checkpoint_load_options{}.max_header_bytes;
    /// Called as payloads are written (after each piece of at most 8 MiB, or each run of small
    /// payloads), from the writing threads but never two calls at once, with `bytes_done`
    /// rising to `bytes_total`; the header, fsync and rename follow the last call. Keep it
    /// short. An exception from it stops the save as a failed write would (the previous file
    /// stays), with `errc::cancelled`.
    std::function<void(const checkpoint_progress&)> on_progress{};
    /// The run and step the file records instead of the checkpoint's own `identity()` (what a
    /// manager gives each save, without copying the checkpoint); nothing when empty.
    std::optional<run_identity> identity{};
};

/// Writes `contents` to `path`, once it passes every check a load would make on it
/// (`validate_for_saving`, and a header within `options.max_header_bytes`: both with the load's
/// error codes, before anything is written): to `<path>.tmp`, fsync, rename, fsync of the
/// directory, so `path` holds either its previous contents or the whole new checkpoint. The layout
/// is known before the first byte, so `options.writers` threads write payloads at their offsets at
/// once: small ones gathered through a 1 MiB buffer per writer, large ones straight from
/// `contents` in 8 MiB pieces, never a second full copy, each piece's writeback started as soon
/// as it is written. Returns the file's size. Failures are `errc::io_error` naming the
/// operation.
[[nodiscard]] result<std::uint64_t> save_checkpoint_file(const std::filesystem::path& path,
                                                         const checkpoint& contents,
                                                         const checkpoint_save_options& options,
                                                         file_ops& ops = posix_file_ops());
/// The same with the default options.
[[nodiscard]] result<std::uint64_t> save_checkpoint_file(const std::filesystem::path& path,
                                                         const checkpoint& contents,
                                                         file_ops& ops = posix_file_ops());

namespace detail {
class progress_meter;
} // namespace detail

/// An open checkpoint file whose frame (preamble, trailer, header and every payload's place)
/// has been verified; payloads are read on request. Allocates at most the header's size,
/// which the options cap, until payloads are read, and each payload lies inside the file.
class checkpoint_reader {
public:
    /// Opens and verifies `path`: `errc::malformed_record` for a foreign, truncated or
    /// inconsistent file, `errc::checksum_mismatch` for corrupt frame bytes,
    /// `errc::unsupported_version` for a newer format, `errc::io_error` if it cannot be read.
    [[nodiscard]] static result<checkpoint_reader>
    open(const std::filesystem::path& path,
         std::uint64_t max_header_bytes = checkpoint_load_options{}.max_header_bytes);
    /// The same checks on a checkpoint held in memory; `bytes` must outlive the reader, and
    /// `name` stands for the path in messages.
    [[nodiscard]] static result<checkpoint_reader>
    open_bytes(std::span<const std::uint8_t> bytes, std::string name = "<memory>",
               std::uint64_t max_header_bytes = checkpoint_load_options{}.max_header_bytes);
    checkpoint_reader(checkpoint_reader&& other) noexcept = default;
    checkpoint_reader& operator=(checkpoint_reader&& other) noexcept = default;
    checkpoint_reader(const checkpoint_reader&) = delete;
    checkpoint_reader& operator=(const checkpoint_reader&) = delete;
    ~checkpoint_reader() = default;

    [[nodiscard]] const checkpoint_index& index() const noexcept { return index_; }
    [[nodiscard]] const std::filesystem::path& path() const noexcept { return source_.name(); }
    /// Why `load(options)` would map this file ("sealed memfd", "immutable", "fs-verity"), or
    /// empty when it reads it.
    [[nodiscard]] std::string mapping_reason(const checkpoint_load_options& options = {}) const;

    /// The payload of one entry as tensor data (`errc::checksum_mismatch` if corrupt).
    [[nodiscard]] result<tensor_data> read_entry(const checkpoint_entry_info& entry,
                                                 bool verify = true) const;
    [[nodiscard]] result<std::vector<std::uint8_t>>
    read_section(const checkpoint_section_info& section, bool verify = true) const;
    /// Whether a payload's bytes match its checksum.
    [[nodiscard]] result<bool> payload_intact(const payload_location& payload) const;

    /// The checkpoint: the selected gradients (validated like `from_record` validates) and
    /// every section. A file that cannot change (`load_mapping`) is mapped, and each tensor's
    /// bytes are a slice of the mapping, hashed in place. Any other file is read by
    /// `options.readers` threads, in file order: runs of small payloads into one buffer they
    /// share, each large payload into its own, each verified by the thread that read it. A
    /// full load also checks that the padding between payloads is zero, so that no byte of the
    /// file goes unchecked.
    [[nodiscard]] result<checkpoint> load(const checkpoint_load_options& options = {}) const&;
    /// The same, giving the index's shapes and names to the checkpoint instead of copying
    /// them, and freeing the index before the payloads are read: the reader is left without
    /// entries (or with some emptied, when the selection fails), whether the load succeeds or
    /// not.
    [[nodiscard]] result<checkpoint> load(const checkpoint_load_options& options = {}) &&;

private:
    explicit checkpoint_reader(detail::byte_source source);
    static result<checkpoint_reader> verify_frame(checkpoint_reader reader,
                                                  std::uint64_t max_header_bytes);
    result<void> read_at(std::uint8_t* data, std::size_t size, std::uint64_t offset) const;
    result<storage> read_payload(const payload_location& payload, bool verify,
                                 const std::string& what) const;
    struct payload_request;
    result<checkpoint> load_entries(const checkpoint_load_options& options,
                                    std::vector<checkpoint_entry_info>* spent) const;
    struct read_job;
    struct read_plan;
    static read_plan plan_reads(const std::vector<payload_request>& requests,
                                const std::vector<std::uint32_t>& in_order);
    result<void> map_payloads(std::vector<payload_request>& requests,
                              const std::vector<std::uint32_t>& in_order, bool full, bool verify,
                              unsigned readers, detail::progress_meter& progress) const;
    result<void> read_payloads(std::vector<payload_request>& requests,
                               const std::vector<std::uint32_t>& in_order, bool full, bool verify,
                               unsigned readers, detail::progress_meter& progress) const;
    result<void> read_job_payloads(std::vector<payload_request>& requests,
                                   const std::vector<std::uint32_t>& in_order,
                                   const read_job& job, bool full, bool verify,
                                   detail::progress_meter& progress) const;
    result<void> check_padding(std::uint64_t from, std::uint64_t to) const;
    error nonzero_padding(std::uint64_t from, std::uint64_t to) const;
    error mismatch(const std::string& what) const;

    detail::byte_source source_;
    std::uint64_t header_offset_ = 0;
    checkpoint_index index_;
};

/// `checkpoint_reader::open(path)` then `load(options)`.
[[nodiscard]] result<checkpoint> load_checkpoint_file(const std::filesystem::path& path,
                                                      const checkpoint_load_options& options = {});

/// `checkpoint_reader::open_bytes(bytes)` then `load(options)`.
[[nodiscard]] result<checkpoint> load_checkpoint_bytes(std::span<const std::uint8_t> bytes,
                                                       const checkpoint_load_options& options = {});

} // namespace ruda
