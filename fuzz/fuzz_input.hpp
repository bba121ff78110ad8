// Reading fuzz input: bytes taken from the front, zeros once it runs out, so every input
// means something and small inputs stay small.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

namespace fuzz {

class input {
public:
    input(const std::uint8_t* data, std::size_t size) : rest_(data, size) {}

    std::uint8_t byte()
    {
        if (rest_.empty()) {
            return 0;
        }
        const std::uint8_t b = rest_.front();
        rest_ = rest_.subspan(1);
        return b;
    }
    std::uint64_t u64()
    {
        std::uint64_t v = 0;
        for (int i = 0; i < 8; ++i) {
            v |= static_cast<std::uint64_t>(byte()) << (8 * i);
        }
        return v;
    }
    /// Up to `n` bytes.
    std::span<const std::uint8_t> bytes(std::size_t n)
    {
        const auto taken = rest_.first(n < rest_.size() ? n : rest_.size());
        rest_ = rest_.subspan(taken.size());
        return taken;
    }
    [[nodiscard]] std::span<const std::uint8_t> rest() const { return rest_; }
    [[nodiscard]] bool empty() const { return rest_.empty(); }

private:
    std::span<const std::uint8_t> rest_;
};

/// A failed property: a crash the fuzzer reports with the input.
inline void require(bool ok)
{
    if (!ok) {
        std::abort();
    }
}

} // namespace fuzz
