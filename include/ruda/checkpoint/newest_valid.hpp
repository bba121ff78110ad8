// What `checkpoint_manager::load_newest_valid` finds: the newest checkpoint of a directory
// that loads, on the line of the run "latest" names, and the ones it passed over.
#pragma once

#include <ruda/checkpoint/checkpoint.hpp>
#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/error.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ruda {

/// A checkpoint `load_newest_valid` passed over: it does not load, or another run wrote it.
struct skipped_checkpoint {
    std::uint64_t step;
    error why;
    /// The run that wrote it, when its file says (and can be read that far).
    std::optional<std::string> run_id{};
};

/// What `load_newest_valid` found: the newest checkpoint that loads, of the run "latest" names
/// where one of that run loads, and the ones passed over, in the order they were tried.
struct newest_valid_checkpoint {
    std::uint64_t step;
    checkpoint contents;
    std::vector<skipped_checkpoint> skipped;
    /// The run that wrote it (empty for a file that records none).
    std::string run_id{};
    /// The run "latest" names, when it names one.
    std::optional<std::string> latest_run_id{};
    /// Whether it is of another run than the one "latest" names: none of that run loads.
    bool other_run = false;
};

namespace detail {

/// The search itself, over the checkpoints of `steps` (ascending), `path_of` each one's file,
/// `latest_run` the run "latest" names (if it names one). `errc::not_found` for no steps,
/// `errc::io_error` naming each failure when none loads.
[[nodiscard]] result<newest_valid_checkpoint>
find_newest_valid(const std::filesystem::path& directory, const std::vector<std::uint64_t>& steps,
                  const std::function<std::filesystem::path(std::uint64_t)>& path_of,
                  const std::optional<std::string>& latest_run,
                  const checkpoint_load_options& options);

} // namespace detail

} // namespace ruda
