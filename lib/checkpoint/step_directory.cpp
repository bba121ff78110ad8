#include <ruda/checkpoint/detail/durable_writer.hpp>
#include <ruda/checkpoint/detail/posix_io.hpp>
#include <ruda/checkpoint/detail/regular_file.hpp>
#include <ruda/checkpoint/detail/step_directory.hpp>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdio>
#include <system_error>

namespace ruda::detail {

namespace {
constexpr std::string_view step_prefix = "step-";
constexpr std::size_t step_digits = 20;
} // namespace

std::string step_name(std::uint64_t step, std::string_view suffix)
{
    char digits[32];
    std::snprintf(digits, sizeof digits, "%020llu", static_cast<unsigned long long>(step));
    return std::string(step_prefix) + digits + std::string(suffix);
}

std::optional<std::uint64_t> step_of(std::string_view name, std::string_view suffix)
{
    if (name.size() != step_prefix.size() + step_digits + suffix.size() ||
        !name.starts_with(step_prefix) || !name.ends_with(suffix)) {
        return std::nullopt;
    }
    const auto digits = name.substr(step_prefix.size(), step_digits);
    std::uint64_t step = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
    if (ec != std::errc{} || end != digits.data() + digits.size()) {
        return std::nullopt;
    }
    return step;
}

std::vector<std::uint64_t> past_retention(std::vector<std::uint64_t> others, std::size_t keep_last)
{
    const std::size_t keep_others = std::max<std::size_t>(keep_last, 1) - 1;
    others.resize(others.size() > keep_others ? others.size() - keep_others : 0);
    return others;
}

// The iterator moves with increment(ec), so a failure is an error, never an exception.
result<void> for_each_entry(const std::filesystem::path& dir,
                            const std::function<void(const std::filesystem::path&)>& each)
{
    std::error_code ec;
    std::filesystem::directory_iterator item{dir, ec};
    if (ec == std::errc::no_such_file_or_directory) {
        return success();
    }
    for (; !ec && item != std::filesystem::directory_iterator{}; item.increment(ec)) {
        each(item->path());
    }
    if (ec) {
        return error{errc::io_error, "Listing " + dir.string() + ": " + ec.message()};
    }
    return success();
}

result<std::optional<step_pointer>> read_pointer(const std::filesystem::path& path,
                                                 std::string_view suffix)
{
    std::error_code ec;
    if (!std::filesystem::exists(path, ec) && !ec) {
        return std::optional<step_pointer>{};
    }
    // The pointer is one short line: read no more than that, whatever the file is or claims.
    BOOST_OUTCOME_TRY(const auto file, open_regular_file(path));
    std::array<std::uint8_t, 256> text{};
    const auto length = static_cast<std::size_t>(std::min<std::uint64_t>(file.size, text.size()));
    auto read = read_exact_at(file.fd, path, text.data(), length, 0);
    ::close(file.fd);
    BOOST_OUTCOME_TRY(std::move(read));
    const std::string content(reinterpret_cast<const char*>(text.data()), length);
    const std::size_t end = std::min(content.size(), content.find('\n'));
    const std::string line = content.substr(0, end);
    const auto step = step_of(line, suffix);
    if (!step) {
        return error{errc::malformed_record, path.string() +
                                                 " does not name a checkpoint file: \"" +
                                                 line.substr(0, 64) + "\""};
    }
    step_pointer pointer{*step, {}};
    constexpr std::string_view run_prefix = "run ";
    if (end < content.size()) {
        std::string_view rest = std::string_view{content}.substr(end + 1);
        rest = rest.substr(0, rest.find('\n'));
        if (rest.starts_with(run_prefix)) {
            pointer.run_id = rest.substr(run_prefix.size());
        }
    }
    return pointer;
}

result<std::optional<std::uint64_t>> read_step_pointer(const std::filesystem::path& path,
                                                       std::string_view suffix)
{
    BOOST_OUTCOME_TRY(const auto pointer, read_pointer(path, suffix));
    return pointer ? std::optional{pointer->step} : std::nullopt;
}

result<void> write_step_pointer(const std::filesystem::path& path, std::uint64_t step,
                                std::string_view suffix, file_ops& ops, std::string_view run_id)
{
    std::string pointer = step_name(step, suffix) + "\n";
    if (!run_id.empty()) {
        pointer += "run " + std::string(run_id) + "\n";
    }
    BOOST_OUTCOME_TRY(auto latest, durable_writer::create(path, ops));
    BOOST_OUTCOME_TRY(
        latest->write({reinterpret_cast<const std::uint8_t*>(pointer.data()), pointer.size()}));
    return latest->commit();
}

} // namespace ruda::detail
