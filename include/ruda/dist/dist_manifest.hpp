// The manifest of a distributed checkpoint: every gradient, its placement and the pieces that
// hold it (which rank's file, which elements, the payload's checksum). Its presence is what
// commits a step directory; it is written last, atomically, by rank 0.
#pragma once

#include <ruda/checkpoint/file_ops.hpp>
#include <ruda/dist/save_plan.hpp>
#include <ruda/error.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace ruda {

struct dist_manifest {
    static constexpr std::uint32_t current_version = 1;
    std::uint32_t version = current_version;
    std::uint64_t step = 0;
    std::uint32_t world_size = 0;       ///< the ranks that saved it: one file each
    std::vector<tensor_layout> tensors; ///< by id, each id once
    friend bool operator==(const dist_manifest&, const dist_manifest&) = default;
};

/// The file name of rank `rank`'s part in a step directory: "rank-00003.ruda".
[[nodiscard]] std::string rank_file_name(std::uint32_t rank);
/// "manifest.ruda".
[[nodiscard]] std::string manifest_file_name();

/// Every check a manifest from untrusted bytes needs: a known version, a world size of at least
/// one, ids in order and once each, and each layout as `validate_layout` checks it.
/// `errc::malformed_record` (`errc::unsupported_version`) naming what is wrong.
[[nodiscard]] result<void> validate_manifest(const dist_manifest& manifest);

/// Writes `manifest` as a ruda checkpoint file (one section, checksummed), durably and
/// atomically (a temporary file, fsync, rename, fsync of the directory). Returns its bytes.
[[nodiscard]] result<std::uint64_t> write_manifest(const std::filesystem::path& path,
                                                   const dist_manifest& manifest,
                                                   file_ops& ops = posix_file_ops());
/// Reads, verifies and validates the manifest at `path`.
[[nodiscard]] result<dist_manifest> read_manifest(const std::filesystem::path& path);

} // namespace ruda
