// The re-slicing restore of a distributed checkpoint: each rank reads only the pieces of the
// rank files it needs, every file verified as any checkpoint file is, and assembles its tensors
// for the world size it runs on (rank-local tensors given back or summed).
#include <ruda/dist/dist_checkpoint_manager.hpp>

#include "element_bytes.hpp"
#include "wire.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <utility>

namespace ruda {

namespace {

// Reads the pieces of a step's rank files, each file opened once and verified as any
// checkpoint file is; a piece is read whole, and only the pieces a rank needs are read.
class piece_reader {
public:
    piece_reader(std::filesystem::path dir, bool verify) : dir_(std::move(dir)), verify_(verify) {}

    result<const checkpoint_reader*> file(std::uint32_t rank)
    {
        auto found = readers_.find(rank);
        if (found == readers_.end()) {
            BOOST_OUTCOME_TRY(auto reader, checkpoint_reader::open(dir_ / rank_file_name(rank)));
            found = readers_.emplace(rank, std::move(reader)).first;
        }
        return &found->second;
    }

    // The piece's data and the parameter's name.
    result<std::pair<tensor_data, std::string>> read(const tensor_layout& t, const tensor_piece& p)
    {
        BOOST_OUTCOME_TRY(const checkpoint_reader* reader, file(p.rank));
        const auto& entries = reader->index().entries;
        const auto entry = std::find_if(entries.begin(), entries.end(),
                                        [&t](const auto& e) { return e.id == t.id; });
        const std::string where = "Parameter " + to_string(t.id) + " in " + reader->path().string();
        if (entry == entries.end()) {
            return error{errc::malformed_record,
                         where + ": not there, though the manifest says so"};
        }
        if (entry->payload.checksum != p.checksum) {
            return error{errc::checksum_mismatch,
                         where + ": the payload is not the one the manifest names (another "
                                 "save's file?)"};
        }
        BOOST_OUTCOME_TRY(auto data, reader->read_entry(*entry, verify_));
        if (data.dtype() != t.stored || data.bytes().size() != p.bytes) {
            return error{errc::byte_count_mismatch,
                         where + ": " + std::to_string(data.bytes().size()) + " bytes of " +
                             to_string(data.dtype()) + " where the manifest says " +
                             std::to_string(p.bytes) + " of " + to_string(t.stored)};
        }
        return std::pair{std::move(data), entry->name};
    }

private:
    std::filesystem::path dir_;
    bool verify_;
    std::map<std::uint32_t, checkpoint_reader> readers_;
};

// Elements `want` of a replicated or sharded tensor, from the pieces that overlap them.
result<gradient_entry> assemble(piece_reader& pieces, const tensor_layout& t, element_range want,
                                ruda::shape dims)
{
    const auto size = detail::cut_element_size(t);
    if (!size) { // one whole piece
        BOOST_OUTCOME_TRY(const std::uint64_t elements, checked_num_elements(t.shape));
        if (want != element_range{0, elements}) {
            return error{errc::shape_mismatch, "Parameter " + to_string(t.id) + " (" +
                                                   to_string(t.stored) +
                                                   ") cannot be cut into slices"};
        }
        BOOST_OUTCOME_TRY(auto piece, pieces.read(t, t.pieces.front()));
        return gradient_entry{t.id, t.original, std::move(piece.first), std::move(piece.second)};
    }
    BOOST_OUTCOME_TRY(auto out, storage::try_allocate(want.length * *size));
    std::string name;
    for (const tensor_piece& p : t.pieces) {
        const std::uint64_t from = std::max(want.offset, p.range.offset);
        const std::uint64_t to = std::min(want.end(), p.range.end());
        if (from >= to) {
            continue;
        }
        BOOST_OUTCOME_TRY(auto piece, pieces.read(t, p));
        std::memcpy(out.writable_data() + (from - want.offset) * *size,
                    piece.first.bytes().data() + (from - p.range.offset) * *size,
                    (to - from) * *size);
        name = std::move(piece.second);
    }
    return gradient_entry{t.id, t.original, tensor_data{std::move(out), std::move(dims), t.stored},
                          std::move(name)};
}

// The element-wise sum of every rank's rank-local tensor, in the stored dtype.
result<gradient_entry> sum_pieces(piece_reader& pieces, const tensor_layout& t)
{
    std::vector<double> sum;
    std::string name;
    for (const tensor_piece& p : t.pieces) {
        BOOST_OUTCOME_TRY(auto piece, pieces.read(t, p));
        if (!t.stored.is_float()) {
            return error{errc::invalid_dtype, "Parameter " + to_string(t.id) +
                                                  ": a sum of rank-local " + to_string(t.stored) +
                                                  " gradients (float dtypes only)"};
        }
        BOOST_OUTCOME_TRY(auto wide, piece.first.convert(dtype::f64()));
        BOOST_OUTCOME_TRY(const auto values, wide.values<double>());
        sum.resize(values.size(), 0.0);
        for (std::size_t i = 0; i < values.size(); ++i) {
            sum[i] += values[i];
        }
        name = std::move(piece.second);
    }
    BOOST_OUTCOME_TRY(auto total, tensor_data::from_values(sum, t.shape));
    BOOST_OUTCOME_TRY(auto stored, std::move(total).convert(t.stored));
    return gradient_entry{t.id, t.original, std::move(stored), std::move(name)};
}

} // namespace

result<dist_restored> dist_checkpoint_manager::read_step(std::uint64_t step,
                                                         const dist_restore_options& options) const
{
    const auto dir = path_of(step);
    BOOST_OUTCOME_TRY(auto manifest, read_manifest(dir / manifest_file_name()));
    if (manifest.step != step) {
        return error{errc::malformed_record,
                     dir.string() + " holds the manifest of step " + std::to_string(manifest.step)};
    }
    const auto me = static_cast<std::uint32_t>(comm_.rank());
    const auto ranks = static_cast<std::uint32_t>(comm_.size());
    const bool same_world = ranks == manifest.world_size;
    piece_reader pieces{dir, options.verify_checksums};
    dist_restored restored{step, manifest.world_size, {}, {}};
    std::vector<gradient_entry> entries;
    for (const tensor_layout& t : manifest.tensors) {
        if (t.kind == placement_kind::rank_local) {
            if (same_world) {
                const auto own = std::find_if(t.pieces.begin(), t.pieces.end(),
                                              [me](const auto& p) { return p.rank == me; });
                if (own != t.pieces.end()) {
                    BOOST_OUTCOME_TRY(auto piece, pieces.read(t, *own));
                    entries.push_back(
                        {t.id, t.original, std::move(piece.first), std::move(piece.second)});
                }
            } else if (options.sum_rank_local) {
                BOOST_OUTCOME_TRY(auto summed, sum_pieces(pieces, t));
                entries.push_back(std::move(summed));
            } else {
                return error{errc::world_size_mismatch,
                             "Parameter " + to_string(t.id) + " is rank-local, saved by " +
                                 std::to_string(manifest.world_size) + " ranks; restoring it on " +
                                 std::to_string(ranks) +
                                 " needs dist_restore_options::sum_rank_local"};
            }
            continue;
        }
        BOOST_OUTCOME_TRY(const std::uint64_t elements, checked_num_elements(t.shape));
        element_range want{0, elements};
        ruda::shape dims = t.shape;
        if (t.kind == placement_kind::sharded) {
            const auto asked = options.slices.find(t.id);
            want = asked != options.slices.end()
                       ? asked->second
                       : even_shard(elements, static_cast<int>(me), static_cast<int>(ranks));
            if (want.offset > elements || want.length > elements - want.offset) {
                return error{errc::shape_mismatch, "Parameter " + to_string(t.id) + ": elements [" +
                                                       std::to_string(want.offset) + ", " +
                                                       std::to_string(want.offset + want.length) +
                                                       ") of " + std::to_string(elements)};
            }
            dims = {static_cast<std::size_t>(want.length)};
            restored.slices[t.id] = want;
        }
        BOOST_OUTCOME_TRY(auto entry, assemble(pieces, t, want, std::move(dims)));
        entries.push_back(std::move(entry));
    }
    restored.contents.set_gradients(gradients_params_record{std::move(entries)});
    BOOST_OUTCOME_TRY(const checkpoint_reader* sections, pieces.file(same_world ? me : 0));
    for (const checkpoint_section_info& s : sections->index().sections) {
        BOOST_OUTCOME_TRY(auto bytes, sections->read_section(s, options.verify_checksums));
        BOOST_OUTCOME_TRY(restored.contents.put_bytes(s.name, std::move(bytes)));
    }
    return restored;
}

} // namespace ruda
