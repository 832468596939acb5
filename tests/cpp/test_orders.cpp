// greedy_by_size's order (placement/orders.cpp, docs/strategies.md §2):
// from 65,536 buffers it is found by a radix sort over one packed key where
// the ranks rise with the numbering and the key fits 64 bits, else by
// comparing. Every way must give the order the comparison spells out.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "emel/memory/placement/placement.hpp"
#include "mini_test.hpp"

using namespace emel::memory;

namespace {

// Many ties in every field, so each tie-break decides somewhere.
Buffers tied_buffers(uint64_t seed, size_t n, uint64_t size_scale, uint64_t lower_scale) {
    Rng rng;
    rng.state = seed;
    Buffers b;
    for (size_t x = 0; x < n; ++x) {
        const uint64_t lo = rng.below(300) * lower_scale;
        b.lower.push_back(lo);
        b.upper.push_back(lo + rng.below(6));  // some never live
        b.size.push_back(rng.below(40) * size_scale);
        b.alignment.push_back(1);
        b.rank.push_back(static_cast<uint32_t>(x));
    }
    return b;
}

// §2: largest first; then earlier lower, longer lifetime, lower rank.
std::vector<uint32_t> spelled_out(const Buffers& b) {
    std::vector<uint32_t> order(b.count());
    std::iota(order.begin(), order.end(), 0u);
    std::sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
        if (b.size[x] != b.size[y]) return b.size[x] > b.size[y];
        if (b.lower[x] != b.lower[y]) return b.lower[x] < b.lower[y];
        const uint64_t lx = b.upper[x] - b.lower[x], ly = b.upper[y] - b.lower[y];
        if (lx != ly) return lx > ly;
        return b.rank[x] < b.rank[y];
    });
    return order;
}

}  // namespace

TEST(order_by_size_radix_and_comparison_agree_with_the_rule) {
    const size_t n = 70000;
    // Packed key: a radix sort.
    Buffers packed = tied_buffers(1, n, 1000, 7);
    CHECK(order_by_size(packed) == spelled_out(packed));
    // Sizes and times too wide for one 64-bit key: compared.
    Buffers wide = tied_buffers(2, n, uint64_t{1} << 50, uint64_t{1} << 30);
    CHECK(order_by_size(wide) == spelled_out(wide));
    // Ranks against the numbering: compared.
    Buffers shuffled = tied_buffers(3, n, 1000, 7);
    std::reverse(shuffled.rank.begin(), shuffled.rank.end());
    CHECK(order_by_size(shuffled) == spelled_out(shuffled));
    // Fewer than 65,536: compared.
    Buffers few = tied_buffers(4, 5000, 1000, 7);
    CHECK(order_by_size(few) == spelled_out(few));
}
