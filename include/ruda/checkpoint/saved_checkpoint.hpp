// What a checkpoint manager reports for a checkpoint it saved.
#pragma once

#include <ruda/error.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>

namespace ruda {

/// A checkpoint that is on disk.
struct saved_checkpoint {
    std::uint64_t step = 0;
    std::filesystem::path path;
    std::uint64_t bytes = 0;
    /// Old checkpoints or stale temporary files that could not be removed; the save itself
    /// succeeded and "latest" points to it.
    std::optional<error> cleanup_failure;
};

} // namespace ruda
