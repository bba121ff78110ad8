// Where a gradient lives across data-parallel ranks, and so who writes it and who gets it back.
#pragma once

#include <ruda/optim/param_id.hpp>
#include <ruda/tensor/tensor_data.hpp>

#include <cstdint>
#include <map>
#include <string>

namespace ruda {

enum class placement_kind : std::uint8_t {
    /// Identical on every rank (gradients after the all-reduce): written once, its bytes
    /// spread over the ranks by the save plan; every rank gets the whole tensor back.
    replicated,
    /// Each rank's own (a local sum in the middle of an accumulation window): every rank's is
    /// written, and restored to the same rank when the number of ranks is the same.
    rank_local,
    /// This rank's elements `[offset, offset + length)` of a row-major global tensor of known
    /// shape (ZeRO, FSDP): each rank writes its slice; a restore re-slices.
    sharded,
};

/// Elements `[offset, offset + length)` of a tensor flattened in row-major order.
struct element_range {
    std::uint64_t offset = 0;
    std::uint64_t length = 0;
    [[nodiscard]] std::uint64_t end() const noexcept { return offset + length; }
    friend bool operator==(const element_range&, const element_range&) = default;
};

struct placement {
    placement_kind kind = placement_kind::replicated;
    /// Sharded only: the global tensor's shape and this rank's slice of it.
    ruda::shape global_shape{};
    element_range slice{};

    [[nodiscard]] static placement replicated() { return {}; }
    [[nodiscard]] static placement rank_local() { return {placement_kind::rank_local, {}, {}}; }
    [[nodiscard]] static placement sharded(ruda::shape global, element_range slice)
    {
        return {placement_kind::sharded, std::move(global), slice};
    }
    friend bool operator==(const placement&, const placement&) = default;
};

/// The placement of each gradient a rank saves; ids not listed take the manager's default.
using placement_map = std::map<param_id, placement>;

/// "replicated", "rank_local" or "sharded".
[[nodiscard]] std::string to_string(placement_kind kind);

/// Rank `rank`'s part of `elements` split evenly over `ranks` (the first `elements % ranks`
/// ranks get one more): the slice a restore gives a sharded tensor unless told otherwise.
[[nodiscard]] element_range even_shard(std::uint64_t elements, int rank, int ranks) noexcept;

} // namespace ruda
