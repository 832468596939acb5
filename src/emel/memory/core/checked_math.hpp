// uint64 arithmetic that refuses to wrap: every size and offset goes through here.
#pragma once

#include <cstdint>
#include <optional>

namespace emel::memory {

inline std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) {
    uint64_t r;
    if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
    return r;
}

inline std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
    uint64_t r;
    if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
    return r;
}

inline bool is_power_of_two(uint64_t a) { return a != 0 && (a & (a - 1)) == 0; }

// align_up(x, a) for a power of two a; nullopt when the result does not fit.
inline std::optional<uint64_t> checked_align_up(uint64_t x, uint64_t a) {
    const uint64_t mask = a - 1;
    auto bumped = checked_add(x, mask);
    if (!bumped) return std::nullopt;
    return *bumped & ~mask;
}

}  // namespace emel::memory
