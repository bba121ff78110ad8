// What the single-process and the distributed checkpoint managers share about a directory of
// steps: "step-<20 digits><suffix>" names, the "latest" pointer file and listing entries.
#pragma once

#include <ruda/checkpoint/file_ops.hpp>
#include <ruda/error.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ruda::detail {

/// "step-<20 digits><suffix>".
[[nodiscard]] std::string step_name(std::uint64_t step, std::string_view suffix);
/// The step of a `step_name(…, suffix)`, or nothing for any other name.
[[nodiscard]] std::optional<std::uint64_t> step_of(std::string_view name, std::string_view suffix);

/// Of `others` (ascending steps, the latest not among them), the ones retention removes: all
/// but the newest `keep_last - 1`, the latest being the one more kept (at least 1 in all).
[[nodiscard]] std::vector<std::uint64_t> past_retention(std::vector<std::uint64_t> others,
                                                        std::size_t keep_last);

/// Calls `each` with the path of every entry of `dir`: none when `dir` does not exist yet.
/// `errc::io_error` naming `dir` when it cannot be listed, also part way.
[[nodiscard]] result<void>
for_each_entry(const std::filesystem::path& dir,
               const std::function<void(const std::filesystem::path&)>& each);

/// What a pointer file says: the step it names, and the run that saved it when a second line
/// says ("run <id>"; empty when it does not).
struct step_pointer {
    std::uint64_t step = 0;
    std::string run_id;
};

/// The step the pointer file `path` names (one short line, a `step_name(…, suffix)`, then
/// perhaps the run's line), or nothing when there is no such file yet.
/// `errc::malformed_record` when it names no step.
[[nodiscard]] result<std::optional<step_pointer>>
read_pointer(const std::filesystem::path& path, std::string_view suffix);
/// Only the step of `read_pointer`.
[[nodiscard]] result<std::optional<std::uint64_t>>
read_step_pointer(const std::filesystem::path& path, std::string_view suffix);
/// Points `path` at `step` of run `run_id` (no run line when empty), durably and atomically.
/// Readers that predate the run line read the first line only.
[[nodiscard]] result<void> write_step_pointer(const std::filesystem::path& path, std::uint64_t step,
                                              std::string_view suffix, file_ops& ops,
                                              std::string_view run_id = {});

} // namespace ruda::detail
