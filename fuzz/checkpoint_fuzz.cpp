// libFuzzer target: the checkpoint loader. The first byte picks how the rest is used:
//   even: the rest is a whole file, so the frame checks (magic, version, lengths, checksums)
//         meet arbitrary bytes;
//   odd:  the rest is a header then a payload area (the header's length in the next two
//         bytes), wrapped in a preamble and trailer with correct checksums, so the fuzzer gets
//         past the frame to the header decoder, the payload checks and record validation;
//         bit 1 of the first byte skips payload checksums, bit 2 asks for a partial load, and
//         bits 3 to 5 are the preamble's flags (names, groups, run identity).
// Nothing may crash or allocate beyond the input's size (-malloc_limit_mb); a checkpoint that
// loads must read back identically entry by entry, each in its group.
#include "fuzz_input.hpp"

#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/checkpoint/detail/frame.hpp>
#include <ruda/version.hpp>

#include <vector>

namespace {

// A file around `header` and `area`, every frame checksum right.
std::vector<std::uint8_t> framed(std::span<const std::uint8_t> header,
                                 std::span<const std::uint8_t> area, std::uint32_t flags)
{
    ruda::detail::frame f;
    f.flags = flags;
    f.producer = {RUDA_VERSION_MAJOR, RUDA_VERSION_MINOR, RUDA_VERSION_PATCH};
    f.header_offset = ruda::detail::preamble_size + area.size();
    f.header_length = header.size();
    f.header_checksum = ruda::detail::checksum(header);
    f.file_length = f.header_offset + header.size() + ruda::detail::trailer_size;
    std::vector<std::uint8_t> file;
    const auto preamble = ruda::detail::encode_preamble(f);
    file.insert(file.end(), preamble.begin(), preamble.end());
    file.insert(file.end(), area.begin(), area.end());
    file.insert(file.end(), header.begin(), header.end());
    const auto trailer = ruda::detail::encode_trailer(f);
    file.insert(file.end(), trailer.begin(), trailer.end());
    return file;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    fuzz::input in{data, size};
    const std::uint8_t mode = in.byte();
    std::vector<std::uint8_t> file;
    if (mode % 2 == 0) {
        file.assign(in.rest().begin(), in.rest().end());
    } else {
        const std::size_t header_length = in.byte() | (std::size_t{in.byte()} << 8U);
        const auto header = in.bytes(header_length);
        file = framed(header, in.rest(), (mode >> 3U) & 7U);
    }
    ruda::checkpoint_load_options options;
    options.verify_checksums = (mode & 2U) == 0;
    auto reader = ruda::checkpoint_reader::open_bytes(file);
    if (!reader) {
        return 0;
    }
    if ((mode & 4U) != 0 && !reader.value().index().entries.empty()) {
        options.only_ids = std::vector<ruda::param_id>{reader.value().index().entries.back().id};
    }
    const auto loaded = reader.value().load(options);
    if (!loaded) {
        return 0;
    }
    const auto& index = reader.value().index();
    for (const auto& group : index.groups) {
        const auto* record = loaded.value().group(group.name);
        fuzz::require(record != nullptr);
        for (const auto& entry : record->entries()) {
            bool found = false;
            for (std::size_t k = group.first; k < group.first + group.count && !found; ++k) {
                const auto& info = index.entries[k];
                if (info.id == entry.id) {
                    auto again = reader.value().read_entry(info, options.verify_checksums);
                    fuzz::require(again.has_value() && again.value() == entry.data);
                    found = true;
                }
            }
            fuzz::require(found);
        }
    }
    return 0;
}
