#include "safetensors_export.hpp"

#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/checkpoint/checkpoint_manager.hpp>
#include <ruda/checkpoint/safetensors.hpp>

#include <system_error>
#include <vector>

namespace ruda::tools {
namespace {

// The tensors an export writes: group `chosen`, else "weights" where there is one, else the
// only group, each tensor under its own name; else every group, each tensor named
// "group.name" (its id from that name, so that two groups' tensors of one parameter differ).
result<gradients_params_record> exported_tensors(checkpoint& contents,
                                                 const std::optional<std::string>& chosen)
{
    if (chosen) {
        return contents.take_group(*chosen);
    }
    if (contents.group("weights") != nullptr) {
        return contents.take_group("weights");
    }
    std::vector<const tensor_group*> held;
    for (const tensor_group& g : contents.groups()) {
        if (!g.tensors.entries().empty() || g.name != checkpoint::gradients_group) {
            held.push_back(&g);
        }
    }
    if (held.empty()) {
        return gradients_params_record{};
    }
    if (held.size() == 1) {
        const std::string only = held.front()->name;
        return contents.take_group(only);
    }
    std::vector<gradient_entry> entries;
    for (const tensor_group* g : held) {
        for (const gradient_entry& e : g->tensors.entries()) {
            std::string name = g->name + "." + (e.name.empty() ? to_string(e.id) : e.name);
            entries.push_back({param_id::from_name(name), e.dtype, e.data, std::move(name)});
        }
    }
    return gradients_params_record{std::move(entries)};
}

} // namespace

int export_safetensors_of(std::filesystem::path file, const std::optional<std::string>& group,
                          const std::filesystem::path& out_path, std::ostream& out,
                          progress_line& line)
{
    std::error_code ec;
    if (std::filesystem::is_directory(file, ec)) {
        file /= "latest";
    }
    if (file.filename() == "latest") {
        const checkpoint_manager manager{file.parent_path()};
        const auto step = manager.latest_step();
        if (!step || !step.value()) {
            out << file.string() << ": "
                << (step ? "no checkpoint saved yet" : step.error().message()) << "\n";
            return 1;
        }
        file = manager.path_of(*step.value());
    }
    checkpoint_load_options options;
    options.on_progress = [&](const checkpoint_progress& p) {
        line.show(file, p.bytes_done, p.bytes_total);
    };
    auto loaded = load_checkpoint_file(file, options);
    line.clear();
    if (!loaded) {
        out << file.string() << ": " << loaded.error().message() << "\n";
        return 1;
    }
    auto record = exported_tensors(loaded.value(), group);
    if (!record) {
        out << file.string() << ": " << record.error().message() << "\n";
        return 1;
    }
    const auto written = export_safetensors(record.value(), out_path);
    if (!written) {
        out << out_path.string() << ": " << written.error().message() << "\n";
        return 1;
    }
    out << out_path.string() << ": " << record.value().entries().size() << " tensors of "
        << file.string() << ", " << written.value() << " bytes\n";
    return 0;
}

} // namespace ruda::tools
