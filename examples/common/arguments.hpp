// An example's command line: `--name value` options, each read into a variable of its own.
//
//     examples::arguments args;
//     args.option("--steps", opts.steps).option("--dir", opts.dir);
//     if (!args.parse(argc, argv)) { /* usage */ }
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace examples {

class arguments {
public:
    arguments& option(std::string name, std::uint64_t& value) { return number(name, value); }
    arguments& option(std::string name, long& value) { return number(name, value); }
    arguments& option(std::string name, std::string& value)
    {
        return add(std::move(name), [&value](const char* text) {
            value = text;
            return true;
        });
    }
    arguments& option(std::string name, std::optional<std::string>& value)
    {
        return add(std::move(name), [&value](const char* text) {
            value = text;
            return true;
        });
    }
    arguments& option(std::string name, std::optional<std::filesystem::path>& value)
    {
        return add(std::move(name), [&value](const char* text) {
            value = text;
            return true;
        });
    }

    /// False for an option not declared, one without its value, or a number that is not one.
    [[nodiscard]] bool parse(int argc, char** argv) const
    {
        for (int i = 1; i < argc; i += 2) {
            const auto known = std::find_if(options_.begin(), options_.end(),
                                            [&](const auto& o) { return o.first == argv[i]; });
            if (known == options_.end() || i + 1 >= argc || !known->second(argv[i + 1])) {
                return false;
            }
        }
        return true;
    }

private:
    template <class Number>
    arguments& number(std::string name, Number& value)
    {
        return add(std::move(name), [&value](const char* text) {
            const char* end = text + std::strlen(text);
            const auto [stop, failure] = std::from_chars(text, end, value);
            return failure == std::errc{} && stop == end;
        });
    }
    arguments& add(std::string name, std::function<bool(const char*)> read)
    {
        options_.emplace_back(std::move(name), std::move(read));
        return *this;
    }

    std::vector<std::pair<std::string, std::function<bool(const char*)>>> options_;
};

} // namespace examples
