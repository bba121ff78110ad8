// Which training run wrote a checkpoint, and at which step: what lets a manager tell a resumed
// run's checkpoints from those of another run that used the same directory.
#pragma once

#include <ruda/error.hpp>

#include <cstddef>
#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <string_view>

namespace ruda {

/// The run that wrote a checkpoint, the step it was taken at, and the run it resumed, if any.
/// A `checkpoint_manager` gives every checkpoint it saves its own run id (random, or the one
/// its options name), and as the parent the run of the checkpoint it loaded to resume.
struct run_identity {
    std::string run_id;
    std::uint64_t step = 0;
    /// The run this one resumed from (empty: a run that started afresh).
    std::string parent_run_id{};

    /// Longest run id, in bytes.
    static constexpr std::size_t max_run_id_length = 128;

    friend bool operator==(const run_identity&, const run_identity&) = default;
};

/// `errc::malformed_record` unless `run_id` is 1 to `max_run_id_length` bytes of UTF-8 text
/// without control characters (it is written on a line of its own in a manager's `latest`).
[[nodiscard]] result<void> check_run_id(std::string_view run_id);

/// `check_run_id` of the run id, and of the parent's when there is one.
[[nodiscard]] result<void> check_identity(const run_identity& identity);

/// A fresh run id: 32 hexadecimal digits from 16 random bytes (std::random_device).
[[nodiscard]] std::string generate_run_id();

/// The runs that make one line of training with `run`, by the parents `identities` record:
/// `run`, the runs it resumed from (its parent, that run's parent...) and the runs resumed
/// from it, directly or not. Another run started afresh, or from a run before `run`'s own
/// start (a sibling), is not in it.
[[nodiscard]] std::set<std::string, std::less<>>
lineage_of(std::string_view run, std::span<const run_identity> identities);

} // namespace ruda
