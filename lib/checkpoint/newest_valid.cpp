// What load_newest_valid finds: the newest checkpoint of a directory that loads, trying the
// line of the run "latest" names first (the runs it resumed from, as the files record them),
// and only when none of that line loads the newest of another run, said so.
#include <ruda/checkpoint/newest_valid.hpp>
#include <ruda/checkpoint/run_identity.hpp>

#include <algorithm>
#include <set>
#include <string>

namespace ruda::detail {

result<newest_valid_checkpoint>
find_newest_valid(const std::filesystem::path& directory,
                  const std::vector<std::uint64_t>& candidates,
                  const std::function<std::filesystem::path(std::uint64_t)>& path_of,
                  const std::optional<std::string>& latest_run,
                  const checkpoint_load_options& options)
{
    if (candidates.empty()) {
        return error{errc::not_found, "No checkpoint in " + directory.string() + " yet"};
    }
    // Every file's frame first: the runs they record make the line of the run "latest" names.
    std::vector<std::optional<checkpoint_reader>> readers;
    std::vector<run_identity> identities;
    std::vector<skipped_checkpoint> skipped;
    for (auto step = candidates.rbegin(); step != candidates.rend(); ++step) {
        auto reader = checkpoint_reader::open(path_of(*step), options.max_header_bytes);
        if (!reader) {
            skipped.push_back({*step, std::move(reader).error()});
            readers.emplace_back();
            continue;
        }
        if (const auto& identity = reader.value().index().identity) {
            identities.push_back(*identity);
        }
        readers.emplace_back(std::move(reader).value());
    }
    const auto line = latest_run ? lineage_of(*latest_run, identities)
                                 : std::set<std::string, std::less<>>{};
    const auto run_of = [](const checkpoint_reader& reader) -> std::optional<std::string> {
        const auto& identity = reader.index().identity;
        return identity ? std::optional{identity->run_id} : std::nullopt;
    };
    const auto found = [&](std::uint64_t step, checkpoint contents, bool other) {
        std::string run = contents.identity() ? contents.identity()->run_id : std::string{};
        std::sort(skipped.begin(), skipped.end(),
                  [](const auto& a, const auto& b) { return a.step > b.step; });
        return newest_valid_checkpoint{step,          std::move(contents), std::move(skipped),
                                       std::move(run), latest_run,         other};
    };
    std::vector<std::size_t> of_other_runs;
    for (std::size_t k = 0; k < readers.size(); ++k) {
        const std::uint64_t step = candidates[candidates.size() - 1 - k];
        if (!readers[k]) {
            continue;
        }
        const auto run = run_of(*readers[k]);
        if (latest_run && (!run || !line.contains(*run))) {
            skipped.push_back({step,
                               error{errc::other_run,
                                     "written by " + (run ? "run " + *run : "no recorded run") +
                                         ", not of the line of run " + *latest_run +
                                         " that \"latest\" names"},
                               run});
            of_other_runs.push_back(k);
            continue;
        }
        auto loaded = std::move(*readers[k]).load(options);
        if (loaded) {
            return found(step, std::move(loaded).value(), false);
        }
        skipped.push_back({step, std::move(loaded).error(), run});
    }
    // None of the line "latest" names loads: the newest of another run that does, said so.
    for (const std::size_t k : of_other_runs) {
        const std::uint64_t step = candidates[candidates.size() - 1 - k];
        auto loaded = load_checkpoint_file(path_of(step), options);
        if (loaded) {
            return found(step, std::move(loaded).value(), true);
        }
        const auto at = std::find_if(skipped.begin(), skipped.end(),
                                     [step](const auto& s) { return s.step == step; });
        at->why = error{loaded.error().code(), at->why.message() + "; " + loaded.error().message()};
    }
    std::sort(skipped.begin(), skipped.end(),
              [](const auto& a, const auto& b) { return a.step > b.step; });
    std::string why = "No checkpoint in " + directory.string() + " loads";
    for (const skipped_checkpoint& s : skipped) {
        why += "; step " + std::to_string(s.step) + ": " + s.why.message();
    }
    return error{errc::io_error, why};
}

} // namespace ruda::detail
