// The save plan: consistency of every rank's declarations, then who writes which elements.
#include <ruda/dist/save_plan.hpp>

#include "element_bytes.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <utility>

namespace ruda {

std::string to_string(placement_kind kind)
{
    switch (kind) {
    case placement_kind::replicated: return "replicated";
    case placement_kind::rank_local: return "rank_local";
    case placement_kind::sharded: return "sharded";
    }
    return "placement " + std::to_string(static_cast<int>(kind));
}

element_range even_shard(std::uint64_t elements, int rank, int ranks) noexcept
{
    const auto n = static_cast<std::uint64_t>(std::max(ranks, 1));
    const auto r = static_cast<std::uint64_t>(std::clamp(rank, 0, std::max(ranks, 1) - 1));
    const std::uint64_t base = elements / n;
    const std::uint64_t extra = elements % n;
    return {r * base + std::min(r, extra), base + (r < extra ? 1 : 0)};
}

std::vector<std::uint64_t> save_plan::bytes_per_rank() const
{
    std::vector<std::uint64_t> bytes(world_size, 0);
    for (const tensor_layout& t : tensors) {
        for (const tensor_piece& p : t.pieces) {
            bytes.at(p.rank) += p.bytes;
        }
    }
    return bytes;
}

double save_plan::imbalance() const
{
    const auto bytes = bytes_per_rank();
    const auto total = std::accumulate(bytes.begin(), bytes.end(), std::uint64_t{0});
    if (total == 0 || bytes.empty()) {
        return 1.0;
    }
    const double mean = static_cast<double>(total) / static_cast<double>(bytes.size());
    return static_cast<double>(*std::max_element(bytes.begin(), bytes.end())) / mean;
}

namespace {

std::string describe(const declared_tensor& d)
{
    std::string text =
        to_string(d.where.kind) + " " + to_string(d.stored) + " " + to_string(d.shape);
    if (d.where.kind == placement_kind::sharded) {
        text += " of " + to_string(d.where.global_shape);
    }
    return text;
}

using rank_declaration = std::pair<std::uint32_t, const declared_tensor*>;

result<void> same_everywhere(const std::vector<rank_declaration>& decls)
{
    const auto& [first_rank, first] = decls.front();
    for (const auto& [rank, d] : decls) {
        const bool same = d->original == first->original && d->stored == first->stored &&
                          d->where.kind == first->where.kind &&
                          (d->where.kind == placement_kind::sharded
                               ? d->where.global_shape == first->where.global_shape
                               : d->shape == first->shape);
        if (!same) {
            return error{errc::plan_mismatch,
                         "Parameter " + to_string(d->id) + " is " + describe(*first) + " on rank " +
                             std::to_string(first_rank) + " but " + describe(*d) + " on rank " +
                             std::to_string(rank)};
        }
    }
    return success();
}

result<tensor_layout> sharded_layout(tensor_layout layout,
                                     const std::vector<rank_declaration>& decls)
{
    BOOST_OUTCOME_TRY(const std::uint64_t total, checked_num_elements(layout.shape));
    for (const auto& [rank, d] : decls) {
        BOOST_OUTCOME_TRY(const std::uint64_t local, checked_num_elements(d->shape));
        const auto size = detail::element_bytes(d->stored, local, d->bytes);
        if (local != d->where.slice.length || (local != 0 && !size)) {
            return error{errc::plan_mismatch,
                         "Parameter " + to_string(d->id) + " on rank " + std::to_string(rank) +
                             ": a slice of " + std::to_string(d->where.slice.length) +
                             " elements holds " + std::to_string(local) + " elements of " +
                             to_string(d->stored) + " in " + std::to_string(d->bytes) +
                             " bytes (a sharded gradient is a dense, unquantized slice)"};
        }
        layout.pieces.push_back({rank, d->where.slice, d->bytes, 0});
    }
    std::sort(layout.pieces.begin(), layout.pieces.end(),
              [](const tensor_piece& a, const tensor_piece& b) {
                  return a.range.offset < b.range.offset;
              });
    std::uint64_t covered = 0;
    for (const tensor_piece& p : layout.pieces) {
        if (p.range.offset != covered || p.range.length > total - covered) {
            return error{errc::plan_mismatch,
                         "Parameter " + to_string(layout.id) + ": the slice of rank " +
                             std::to_string(p.rank) + " starts at element " +
                             std::to_string(p.range.offset) + " with " +
                             std::to_string(p.range.length) + " elements where " +
                             std::to_string(covered) + " of " + std::to_string(total) +
                             " are covered: the slices must tile the tensor exactly once"};
        }
        covered += p.range.length;
    }
    if (covered != total) {
        return error{errc::plan_mismatch, "Parameter " + to_string(layout.id) +
                                              ": the slices cover " + std::to_string(covered) +
                                              " of " + std::to_string(total) + " elements"};
    }
    return layout;
}

// Spreads the replicated tensors over the ranks on top of `load`, each rank's bytes so far.
void spread_replicated(std::vector<tensor_layout*>& replicated, std::vector<std::uint64_t>& load,
                       const std::map<param_id, std::uint64_t>& bytes_of)
{
    const auto ranks = static_cast<std::uint32_t>(load.size());
    const auto least_loaded = [&load] {
        return static_cast<std::uint32_t>(std::min_element(load.begin(), load.end()) -
                                          load.begin());
    };
    std::vector<tensor_layout*> whole;
    std::vector<tensor_layout*> cuttable;
    for (tensor_layout* t : replicated) {
        const std::uint64_t bytes = bytes_of.at(t->id);
        const auto elements = checked_num_elements(t->shape).value();
        (detail::element_bytes(t->stored, elements, bytes) ? cuttable : whole).push_back(t);
    }
    // Tensors that cannot be cut: largest first, each to the least loaded rank.
    std::stable_sort(whole.begin(), whole.end(), [&bytes_of](auto* a, auto* b) {
        return bytes_of.at(a->id) > bytes_of.at(b->id);
    });
    for (tensor_layout* t : whole) {
        const std::uint32_t rank = least_loaded();
        const std::uint64_t bytes = bytes_of.at(t->id);
        const auto elements = checked_num_elements(t->shape).value();
        t->pieces.push_back({rank, {0, elements}, bytes, 0});
        load[rank] += bytes;
    }
    // The rest fill every rank up to the common level they reach together (water filling),
    // in id order, cut at element boundaries where a rank is full.
    std::uint64_t to_spread = 0;
    for (const tensor_layout* t : cuttable) {
        to_spread += bytes_of.at(t->id);
    }
    std::vector<std::uint64_t> sorted = load;
    std::sort(sorted.begin(), sorted.end());
    long double level = 0;
    long double below = 0;
    for (std::uint32_t k = 1; k <= ranks; ++k) {
        below += static_cast<long double>(sorted[k - 1]);
        const long double candidate = (below + static_cast<long double>(to_spread)) / k;
        if (k == ranks || candidate <= static_cast<long double>(sorted[k])) {
            level = candidate;
            break;
        }
    }
    std::vector<long double> room(ranks);
    for (std::uint32_t r = 0; r < ranks; ++r) {
        room[r] = std::max<long double>(0, level - static_cast<long double>(load[r]));
    }
    std::uint32_t rank = 0;
    for (tensor_layout* t : cuttable) {
        const std::uint64_t elements = checked_num_elements(t->shape).value();
        const std::uint64_t size = bytes_of.at(t->id) / elements;
        std::uint64_t next = 0;
        while (next < elements) {
            const std::uint64_t left = elements - next;
            std::uint64_t take = left;
            if (rank + 1 < ranks) {
                const long double fits = room[rank] / static_cast<long double>(size) + 0.5L;
                take = std::min<std::uint64_t>(left, static_cast<std::uint64_t>(fits));
                if (take == 0) {
                    ++rank;
                    continue;
                }
            }
            t->pieces.push_back({rank, {next, take}, take * size, 0});
            room[rank] -= static_cast<long double>(take * size);
            load[rank] += take * size;
            next += take;
        }
    }
}

} // namespace

result<save_plan> make_save_plan(const std::vector<std::vector<declared_tensor>>& declared)
{
    const auto ranks = static_cast<std::uint32_t>(declared.size());
    std::map<param_id, std::vector<rank_declaration>> by_id;
    for (std::uint32_t rank = 0; rank < ranks; ++rank) {
        for (const declared_tensor& d : declared[rank]) {
            auto& decls = by_id[d.id];
            if (!decls.empty() && decls.back().first == rank) {
                return error{errc::duplicate_param_id, "Parameter " + to_string(d.id) +
                                                           " is declared twice on rank " +
                                                           std::to_string(rank)};
            }
            decls.emplace_back(rank, &d);
        }
    }
    save_plan plan{ranks, {}};
    plan.tensors.reserve(by_id.size());
    std::vector<std::uint64_t> load(ranks, 0);
    std::map<param_id, std::uint64_t> replicated_bytes;
    for (const auto& [id, decls] : by_id) {
        BOOST_OUTCOME_TRY(same_everywhere(decls));
        const declared_tensor& first = *decls.front().second;
        tensor_layout layout{id, first.where.kind, first.original, first.stored, first.shape, {}};
        switch (first.where.kind) {
        case placement_kind::replicated: {
            if (decls.size() != ranks) {
                std::uint32_t missing = 0;
                while (missing < decls.size() && decls[missing].first == missing) {
                    ++missing;
                }
                return error{errc::plan_mismatch,
                             "Parameter " + to_string(id) + " is replicated but rank " +
                                 std::to_string(missing) + " does not have it"};
            }
            for (const auto& [rank, d] : decls) {
                if (d->bytes != first.bytes) {
                    return error{errc::plan_mismatch,
                                 "Parameter " + to_string(id) + " is replicated but holds " +
                                     std::to_string(first.bytes) + " bytes on rank 0 and " +
                                     std::to_string(d->bytes) + " on rank " + std::to_string(rank)};
                }
            }
            BOOST_OUTCOME_TRY(checked_num_elements(first.shape));
            replicated_bytes[id] = first.bytes;
            break;
        }
        case placement_kind::rank_local: {
            BOOST_OUTCOME_TRY(const std::uint64_t elements, checked_num_elements(first.shape));
            for (const auto& [rank, d] : decls) {
                layout.pieces.push_back({rank, {0, elements}, d->bytes, 0});
                load[rank] += d->bytes;
            }
            break;
        }
        case placement_kind::sharded: {
            layout.shape = first.where.global_shape;
            BOOST_OUTCOME_TRY(layout, sharded_layout(std::move(layout), decls));
            for (const tensor_piece& p : layout.pieces) {
                load[p.rank] += p.bytes;
            }
            break;
        }
        }
        plan.tensors.push_back(std::move(layout));
    }
    std::vector<tensor_layout*> replicated;
    for (tensor_layout& t : plan.tensors) {
        if (t.kind == placement_kind::replicated) {
            replicated.push_back(&t);
        }
    }
    if (ranks != 0) {
        spread_replicated(replicated, load, replicated_bytes);
    }
    return plan;
}

result<void> validate_layout(const tensor_layout& layout, std::uint32_t world_size)
{
    const auto refuse = [&layout](const std::string& why) {
        return error{errc::malformed_record, "Parameter " + to_string(layout.id) + " (" +
                                                 to_string(layout.kind) + "): " + why};
    };
    auto counted = checked_num_elements(layout.shape);
    if (!counted) {
        return refuse(counted.error().message());
    }
    const std::uint64_t elements = counted.value();
    if (layout.pieces.empty()) {
        return refuse("no piece");
    }
    std::uint64_t covered = 0;
    std::uint32_t previous_rank = 0;
    for (std::size_t i = 0; i < layout.pieces.size(); ++i) {
        const tensor_piece& p = layout.pieces[i];
        if (p.rank >= world_size) {
            return refuse("a piece in rank " + std::to_string(p.rank) + "'s file, in a world of " +
                          std::to_string(world_size));
        }
        const auto size = detail::element_bytes(layout.stored, p.range.length, p.bytes);
        if (layout.kind == placement_kind::rank_local) {
            if (p.range.offset != 0 || p.range.length != elements ||
                (i != 0 && p.rank <= previous_rank)) {
                return refuse("a rank-local piece is one whole tensor per rank, by rank");
            }
            previous_rank = p.rank;
            continue;
        }
        if (p.range.offset != covered || p.range.length > elements - covered) {
            return refuse("a piece at element " + std::to_string(p.range.offset) + " with " +
                          std::to_string(p.range.length) + " elements where " +
                          std::to_string(covered) + " of " + std::to_string(elements) +
                          " are covered: the pieces must tile it exactly once");
        }
        if (!size && p.range.length != elements) {
            return refuse("a piece of a tensor that cannot be cut (" + to_string(layout.stored) +
                          ", " + std::to_string(p.bytes) + " bytes)");
        }
        covered += p.range.length;
    }
    if (layout.kind != placement_kind::rank_local && covered != elements) {
        return refuse("the pieces cover " + std::to_string(covered) + " of " +
                      std::to_string(elements) + " elements");
    }
    return success();
}

} // namespace ruda
