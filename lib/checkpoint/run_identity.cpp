// Run ids: short UTF-8 text that fits on one line of a manager's `latest`, random by default.
#include <ruda/checkpoint/detail/utf8.hpp>
#include <ruda/checkpoint/run_identity.hpp>

#include <algorithm>
#include <map>
#include <random>

namespace ruda {

result<void> check_run_id(std::string_view run_id)
{
    if (run_id.empty() || run_id.size() > run_identity::max_run_id_length) {
        return error{errc::malformed_record,
                     "A run id must have 1 to " + std::to_string(run_identity::max_run_id_length) +
                         " bytes, not " + std::to_string(run_id.size())};
    }
    const bool control = std::any_of(run_id.begin(), run_id.end(), [](char c) {
        const auto byte = static_cast<unsigned char>(c);
        return byte < 0x20 || byte == 0x7f;
    });
    if (control || !detail::valid_utf8(run_id)) {
        return error{errc::malformed_record,
                     "A run id must be UTF-8 text without control characters"};
    }
    return success();
}

result<void> check_identity(const run_identity& identity)
{
    BOOST_OUTCOME_TRY(check_run_id(identity.run_id));
    if (!identity.parent_run_id.empty()) {
        if (auto valid = check_run_id(identity.parent_run_id); !valid) {
            return error{valid.error().code(), "Parent run: " + valid.error().message()};
        }
    }
    return success();
}

std::set<std::string, std::less<>> lineage_of(std::string_view run,
                                              std::span<const run_identity> identities)
{
    std::map<std::string, std::string, std::less<>> parent;
    for (const run_identity& id : identities) {
        if (!id.parent_run_id.empty() && id.parent_run_id != id.run_id) {
            parent.try_emplace(id.run_id, id.parent_run_id);
        }
    }
    // Follows parents from `from` (a chain of at most as many links as there are runs).
    const auto ancestors = [&parent](std::string_view from) {
        std::set<std::string, std::less<>> chain{std::string{from}};
        for (auto at = parent.find(from); at != parent.end() && chain.insert(at->second).second;
             at = parent.find(at->second)) {
        }
        return chain;
    };
    auto line = ancestors(run);
    for (const run_identity& id : identities) {
        if (ancestors(id.run_id).contains(run)) {
            line.insert(id.run_id);
        }
    }
    return line;
}

std::string generate_run_id()
{
    static constexpr char digits[] = "0123456789abcdef";
    std::random_device random;
    std::string id;
    for (int k = 0; k < 4; ++k) {
        auto word = static_cast<std::uint32_t>(random());
        for (int d = 0; d < 8; ++d, word >>= 4U) {
            id += digits[word & 0xfU];
        }
    }
    return id;
}

} // namespace ruda
