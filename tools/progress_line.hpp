// ruda-inspect's progress line: what a person at a terminal watches while a long file is read.
#pragma once

#include "inspect.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>

namespace ruda::tools {

// "FILE: 45% of 3.0 GiB" on one line, rewritten in place at most ten times a second and at
// the end, then erased: what a person at a terminal watches during a long read. Prints
// nothing without a sink.
class progress_line {
public:
    explicit progress_line(std::ostream* sink) : sink_(sink) {}
    progress_line(const progress_line&) = delete;
    progress_line& operator=(const progress_line&) = delete;
    ~progress_line() { clear(); }

    void show(const std::filesystem::path& file, std::uint64_t done, std::uint64_t total)
    {
        const auto now = std::chrono::steady_clock::now();
        if (sink_ == nullptr || (done < total && now - last_ < std::chrono::milliseconds(100))) {
            return;
        }
        last_ = now;
        const unsigned percent = total == 0 ? 100U : static_cast<unsigned>(done * 100 / total);
        std::string text = file.string() + ": " + std::to_string(percent) + "% of " +
                           human_size(total);
        const std::size_t width = std::max(shown_, text.size());
        shown_ = text.size();
        text.resize(width, ' '); // covers a longer line shown before
        *sink_ << '\r' << text << std::flush;
    }
    void clear()
    {
        if (sink_ != nullptr && shown_ != 0) {
            *sink_ << '\r' << std::string(shown_, ' ') << '\r' << std::flush;
            shown_ = 0;
        }
    }

private:
    std::ostream* sink_;
    std::size_t shown_ = 0;
    std::chrono::steady_clock::time_point last_{};
};

} // namespace ruda::tools
