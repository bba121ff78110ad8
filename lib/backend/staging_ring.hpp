// A circular buffer of allocations, released in any order: the pinned host ring that uploads
// and reads into plain records pass through, and the device staging buffer. Internal to the CUDA
// device.
#pragma once

#include <algorithm>
#include <cstddef>
#include <deque>
#include <optional>

namespace ruda::detail {

// Allocations in a circular buffer, released in any order; space comes back once every older
// allocation is released too, which is the order copies on one stream land in anyway.
class staging_ring {
public:
    explicit staging_ring(std::size_t capacity) : capacity_(capacity) {}

    [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }

    std::optional<std::size_t> allocate(std::size_t bytes)
    {
        if (bytes == 0 || bytes > capacity_) {
            return std::nullopt;
        }
        if (live_.empty()) {
            head_ = 0;
        }
        std::size_t at = head_;
        if (!live_.empty()) {
            const std::size_t oldest = live_.front().offset;
            if (head_ > oldest) {
                // Used: [oldest, head). Free: [head, capacity) and [0, oldest).
                if (capacity_ - head_ < bytes) {
                    if (oldest < bytes) {
                        return std::nullopt;
                    }
                    at = 0;
                }
            } else if (oldest - head_ < bytes) {
                // Used: [oldest, capacity) and [0, head), or all of it when head == oldest.
                return std::nullopt;
            }
        }
        live_.push_back({at, false});
        head_ = at + bytes;
        return at;
    }

    void release(std::size_t offset)
    {
        const auto found = std::find_if(live_.begin(), live_.end(),
                                        [offset](const span& s) { return s.offset == offset; });
        if (found != live_.end()) {
            found->released = true;
        }
        while (!live_.empty() && live_.front().released) {
            live_.pop_front();
        }
    }

private:
    struct span {
        std::size_t offset;
        bool released;
    };
    std::size_t capacity_;
    std::size_t head_ = 0;
    std::deque<span> live_;
};

} // namespace ruda::detail
