#include <ruda/dist/dist_manifest.hpp>

#include <ruda/checkpoint/checkpoint_file.hpp>

#include "wire.hpp"

#include <cstdio>

namespace ruda {

namespace {

constexpr const char* section_name = "ruda.dist.manifest";

} // namespace

template <class Archive>
void serialize(Archive& ar, dist_manifest& m)
{
    ar(m.version, m.step, m.world_size, m.tensors);
}

std::string rank_file_name(std::uint32_t rank)
{
    char name[32];
    std::snprintf(name, sizeof name, "rank-%05u.ruda", rank);
    return name;
}

std::string manifest_file_name() { return "manifest.ruda"; }

result<void> validate_manifest(const dist_manifest& manifest)
{
    if (manifest.version != dist_manifest::current_version) {
        return error{errc::unsupported_version, "Distributed checkpoint manifest version " +
                                                    std::to_string(manifest.version) +
                                                    "; this ruda reads version " +
                                                    std::to_string(dist_manifest::current_version)};
    }
    if (manifest.world_size == 0) {
        return error{errc::malformed_record, "Distributed checkpoint manifest of no rank"};
    }
    for (std::size_t i = 0; i < manifest.tensors.size(); ++i) {
        const tensor_layout& t = manifest.tensors[i];
        if (i != 0 && !(manifest.tensors[i - 1].id < t.id)) {
            return error{errc::malformed_record, "Distributed checkpoint manifest: parameter " +
                                                     to_string(t.id) +
                                                     " is out of order or listed twice"};
        }
        BOOST_OUTCOME_TRY(validate_layout(t, manifest.world_size));
    }
    return success();
}

result<std::uint64_t> write_manifest(const std::filesystem::path& path,
                                     const dist_manifest& manifest, file_ops& ops)
{
    checkpoint contents;
    BOOST_OUTCOME_TRY(contents.put_bytes(section_name, detail::to_wire(manifest)));
    return save_checkpoint_file(path, contents, ops);
}

result<dist_manifest> read_manifest(const std::filesystem::path& path)
{
    BOOST_OUTCOME_TRY(const auto reader, checkpoint_reader::open(path));
    const checkpoint_section_info* found = nullptr;
    for (const checkpoint_section_info& s : reader.index().sections) {
        if (s.name == section_name) {
            found = &s;
        }
    }
    if (found == nullptr || !reader.index().entries.empty()) {
        return error{errc::malformed_record,
                     path.string() + " is not a distributed checkpoint manifest"};
    }
    BOOST_OUTCOME_TRY(const auto bytes, reader.read_section(*found));
    BOOST_OUTCOME_TRY(auto manifest, detail::from_wire<dist_manifest>(bytes, path.string()));
    BOOST_OUTCOME_TRY(validate_manifest(manifest));
    return manifest;
}

} // namespace ruda
