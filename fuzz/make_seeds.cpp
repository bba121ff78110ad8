// Writes the seed corpora of the record, checkpoint and section fuzz targets into
// fuzz/corpus/<target>/ (run from the repository root after changing a format):
//
//   build/fuzz/fuzz/make_fuzz_seeds fuzz/corpus
#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/checkpoint/detail/frame.hpp>
#include <ruda/optim/record_serialization.hpp>

#include <cereal/types/string.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

void write(const fs::path& path, const std::vector<std::uint8_t>& bytes)
{
    fs::create_directories(path.parent_path());
    std::ofstream out{path, std::ios::binary | std::ios::trunc};
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

ruda::gradients_params_record sample()
{
    std::vector<ruda::gradient_entry> e;
    e.push_back({ruda::param_id{1}, ruda::dtype::f32(),
                 ruda::tensor_data::from_values(std::vector<float>{1, -2, 3}, {3}).value()});
    e.push_back({ruda::param_id{2}, ruda::dtype::bf16(),
                 ruda::tensor_data::from_values(std::vector<float>{0.5F, 4}, {2, 1}).value()});
    const auto q8 = ruda::dtype::qfloat({ruda::quant_value::q8s, ruda::quant_param::f32,
                                         ruda::quant_store::native(), ruda::quant_level::tensor(),
                                         ruda::quant_mode::symmetric});
    e.push_back({ruda::param_id{3}, q8, ruda::tensor_data{std::vector<std::uint8_t>(4 + 4, 7), {2, 2}, q8}});
    e.push_back({ruda::param_id{4}, ruda::dtype::f64(),
                 ruda::tensor_data::from_values(std::vector<double>{-1.0}, {}).value()});
    return ruda::gradients_params_record{std::move(e)};
}

std::vector<std::uint8_t> file_bytes(const fs::path& dir, const ruda::checkpoint& c)
{
    const auto path = dir / "seed.ruda";
    ruda::save_checkpoint_file(path, c).value();
    std::ifstream in{path, std::ios::binary};
    std::vector<std::uint8_t> bytes{std::istreambuf_iterator<char>(in), {}};
    fs::remove(path);
    return bytes;
}

std::vector<std::uint8_t> with_mode(std::uint8_t mode, std::vector<std::uint8_t> bytes)
{
    bytes.insert(bytes.begin(), mode);
    return bytes;
}

// The structured form of a file: its header's length (2 bytes), the header, the payload area.
std::vector<std::uint8_t> structured(std::uint8_t mode, const std::vector<std::uint8_t>& file)
{
    std::uint64_t header_offset = 0;
    std::uint64_t header_length = 0;
    for (int i = 0; i < 8; ++i) {
        header_offset |= static_cast<std::uint64_t>(file[24 + i]) << (8 * i);
        header_length |= static_cast<std::uint64_t>(file[32 + i]) << (8 * i);
    }
    std::vector<std::uint8_t> out{mode, static_cast<std::uint8_t>(header_length),
                                  static_cast<std::uint8_t>(header_length >> 8U)};
    const auto header = file.begin() + static_cast<std::ptrdiff_t>(header_offset);
    out.insert(out.end(), header, header + static_cast<std::ptrdiff_t>(header_length));
    out.insert(out.end(), file.begin() + ruda::detail::preamble_size, header);
    return out;
}

} // namespace

int main(int argc, char** argv)
{
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    const fs::path root = argv[1];
    const fs::path scratch = fs::temp_directory_path();

    ruda::checkpoint full{sample()};
    full.put("step", std::uint64_t{42}).value();
    full.put("name", std::string("seed")).value();
    const auto file = file_bytes(scratch, full);
    const auto empty = file_bytes(scratch, ruda::checkpoint{});
    write(root / "checkpoint" / "file", with_mode(0, file));
    write(root / "checkpoint" / "empty_file", with_mode(0, empty));
    write(root / "checkpoint" / "structured", structured(1, file));
    write(root / "checkpoint" / "structured_unverified", structured(3, file));
    write(root / "checkpoint" / "structured_partial", structured(5, file));
    // A trainer's checkpoint: named tensors in groups (integer step counts in the optimizer's),
    // and the run that wrote it; structured with its flags (names, groups, identity) in mode.
    ruda::checkpoint grouped{sample()};
    auto named = sample().into_entries();
    for (auto& entry : named) {
        entry.name = "layer" + std::to_string(entry.id.val()) + ".weight";
    }
    grouped.put_group("weights", ruda::gradients_params_record{std::move(named)}).value();
    grouped.put_group("optimizer",
                      ruda::gradients_params_record{
                          {{ruda::param_id{9}, ruda::dtype::i64(),
                            ruda::tensor_data::from_values(std::vector<std::int64_t>{12}, {})
                                .value(),
                            "layer1.weight.step"}}})
        .value();
    grouped.set_identity({"seed-run", 12, "parent-run"}).value();
    const auto grouped_file = file_bytes(scratch, grouped);
    write(root / "checkpoint" / "groups_file", with_mode(0, grouped_file));
    write(root / "checkpoint" / "groups_structured", structured(1 | (7U << 3U), grouped_file));
    write(root / "checkpoint" / "groups_structured_partial",
          structured(5 | (7U << 3U), grouped_file));

    std::vector<std::uint8_t> record_section;
    {
        ruda::section_output_archive archive{record_section};
        archive(sample());
    }
    write(root / "section" / "record", with_mode(0, record_section));
    std::vector<std::uint8_t> user;
    {
        ruda::section_output_archive archive{user};
        const std::uint64_t moments = 1;
        const std::string key = "adam";
        const std::vector<double> values{0.5, 0.25};
        const bool nullopt = false; // cereal writes an optional as "is empty", then the value
        const std::vector<std::string> names{"w1", "b1"};
        archive(cereal::make_size_tag(moments), key, values, nullopt, names, std::uint64_t{7});
    }
    write(root / "section" / "user_state", with_mode(1, user));

    // record_fuzz: count, then per entry id, dtype, same-dtype flag, rank, dims, length/4, bytes.
    write(root / "record" / "f32", {1, 1, 1, 0, 1, 3, 3, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
    write(root / "record" / "quantized", {1, 2, 14, 6, 0, 0, 0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1});
    write(root / "record" / "duplicate", {2, 1, 1, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0, 1, 1, 1, 0, 0, 0, 0});
    write(root / "record" / "huge_dim", {1, 0, 0, 0, 2, 255, 255, 255, 255, 255, 255, 255, 255, 255, 4, 0});
    std::printf("seeds written under %s\n", root.c_str());
    return 0;
}
