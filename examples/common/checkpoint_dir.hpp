// Where an example writes its checkpoints: the directory given on the command line (kept), or
// a fresh temporary one that is removed when the example ends.
#pragma once

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>

#include <stdlib.h>

namespace examples {

class checkpoint_dir {
public:
    /// `given` (made absolute and created), or a new `<tmp>/<prefix>-XXXXXX`; check `ok()`.
    checkpoint_dir(const std::optional<std::filesystem::path>& given, const std::string& prefix)
        : temporary_(!given)
    {
        if (given) {
            path_ = std::filesystem::absolute(*given);
            std::error_code ec;
            std::filesystem::create_directories(path_, ec);
            ok_ = !ec;
            return;
        }
        std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
        ok_ = ::mkdtemp(pattern.data()) != nullptr;
        if (!ok_) {
            std::perror("mkdtemp");
        }
        path_ = pattern;
    }
    ~checkpoint_dir()
    {
        if (temporary_ && ok_) {
            std::error_code ignored;
            std::filesystem::remove_all(path_, ignored);
        }
    }
    checkpoint_dir(const checkpoint_dir&) = delete;
    checkpoint_dir& operator=(const checkpoint_dir&) = delete;

    [[nodiscard]] bool ok() const noexcept { return ok_; }
    [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

private:
    std::filesystem::path path_;
    bool temporary_;
    bool ok_ = false;
};

} // namespace examples
