// Who writes which bytes of a distributed checkpoint: every rank's declarations in, one plan out,
// the same on every rank because every rank computes it from the same gathered declarations.
#pragma once

#include <ruda/dist/placement.hpp>
#include <ruda/error.hpp>
#include <ruda/optim/param_id.hpp>
#include <ruda/tensor/dtype.hpp>
#include <ruda/tensor/tensor_data.hpp>

#include <cstdint>
#include <vector>

namespace ruda {

/// What one rank holds of one gradient, as it declares it before a save.
struct declared_tensor {
    param_id id{0};
    dtype original = dtype::f32(); ///< the dtype on the device
    dtype stored = dtype::f32();   ///< the dtype of the bytes saved
    ruda::shape shape;             ///< the local tensor's shape
    std::uint64_t bytes = 0;       ///< the local tensor's bytes
    placement where;
    friend bool operator==(const declared_tensor&, const declared_tensor&) = default;
};

/// Elements `range` of a tensor, in the file of `rank`.
struct tensor_piece {
    std::uint32_t rank = 0;
    element_range range;
    std::uint64_t bytes = 0;
    std::uint64_t checksum = 0; ///< the payload's checksum in that file; 0 until written
    friend bool operator==(const tensor_piece&, const tensor_piece&) = default;
};

/// One gradient of a distributed checkpoint and where its pieces are.
struct tensor_layout {
    param_id id{0};
    placement_kind kind = placement_kind::replicated;
    dtype original = dtype::f32();
    dtype stored = dtype::f32();
    /// The global shape (replicated, sharded) or each rank's shape (rank_local).
    ruda::shape shape;
    /// By offset, tiling the tensor exactly once (replicated, sharded); one whole tensor per
    /// rank that has one, by rank (rank_local).
    std::vector<tensor_piece> pieces;
    friend bool operator==(const tensor_layout&, const tensor_layout&) = default;
};

struct save_plan {
    std::uint32_t world_size = 0;
    std::vector<tensor_layout> tensors; ///< by id

    /// The bytes each rank writes.
    [[nodiscard]] std::vector<std::uint64_t> bytes_per_rank() const;
    /// The busiest rank's bytes over the mean (1 when nothing is written).
    [[nodiscard]] double imbalance() const;
};

/// The plan of `declared[r]`, rank r's declarations. Every rank declares a replicated gradient,
/// with the same dtypes and shape; a rank-local one has the same dtypes and shape wherever it
/// is declared; the slices of a sharded one have the same global shape and dtypes and tile it
/// exactly once. Anything else is `errc::plan_mismatch` naming the parameter and the ranks.
/// Replicated bytes are spread so that each rank's total (its own rank-local and sharded bytes
/// included) comes as close to the mean as element boundaries allow: a tensor is cut into
/// element ranges across ranks where that balances better, except a quantized one (cut never).
[[nodiscard]] result<save_plan>
make_save_plan(const std::vector<std::vector<declared_tensor>>& declared);

/// Checks one layout read from an untrusted manifest: pieces inside the tensor, in ranks below
/// `world_size`, with byte counts that match, tiling it exactly once (or one whole tensor per
/// rank for rank_local). `errc::malformed_record` naming the parameter otherwise.
[[nodiscard]] result<void> validate_layout(const tensor_layout& layout, std::uint32_t world_size);

} // namespace ruda
