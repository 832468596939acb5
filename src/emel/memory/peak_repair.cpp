// Peak repair (docs/strategies.md §4): a large-neighbourhood search on a
// placement. A buffer that reaches the top is ripped up together with the
// buffers beside it in time whose tops sit high, and they are re-placed
// first fit (biggest first, then earlier; a few neighbours swapped at
// random) among everything else, which stays put. A move is kept when it
// lowers the end, or keeps it with fewer buffers reaching it (a plateau
// step); otherwise it is undone. Each move costs only its own buffers'
// conflicts, so huge traces get thousands of moves where a full greedy pass
// would cost seconds.
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "emel/memory/placed_index.hpp"
#include "emel/memory/placement.hpp"

namespace emel::memory {

namespace {

// The largest end (offset + size) over the buffers and how many reach it,
// under point updates: a max-tree over buffer indices.
class EndTree {
  public:
    explicit EndTree(size_t n) {
        leaves_ = 1;
        while (leaves_ < n) leaves_ <<= 1;
        node_.assign(2 * leaves_, {0, 0});
    }
    void set(uint32_t x, uint64_t end) {
        size_t i = leaves_ + x;
        node_[i] = {end, 1};
        for (i >>= 1; i >= 1; i >>= 1) {
            const Top& l = node_[2 * i];
            const Top& r = node_[2 * i + 1];
            node_[i] = l.end != r.end ? (l.end > r.end ? l : r) : Top{l.end, l.count + r.count};
        }
    }
    uint64_t end() const { return node_[1].end; }
    uint64_t count() const { return node_[1].count; }

  private:
    struct Top { uint64_t end, count; };
    size_t leaves_;
    std::vector<Top> node_;
};

}  // namespace

Placement repair_peaks(const Buffers& b, Placement start, uint64_t work_budget, uint64_t bound) {
    const size_t n = b.count();
    Placement out = std::move(start);
    if (n == 0 || out.end <= bound) return out;
    std::vector<uint64_t>& offset = out.offset;
    std::vector<uint8_t> placed(n, 1);
    PlacedIndex index(b);
    EndTree ends(n);
    for (uint32_t x = 0; x < n; ++x) {
        if (b.lower[x] < b.upper[x]) index.insert(x);
        ends.set(x, offset[x] + b.size[x]);
    }
    GapFinder gaps(b);
    Rng rng;
    uint64_t work = kGreedyUnitsPerStep * n * 4;  // building the index and the tree
    std::vector<uint32_t> top, near, ripped;
    std::vector<uint64_t> saved;
    bool improved = false;
    while (ends.end() > bound && work < work_budget) {
        const uint64_t end = ends.end(), at_top = ends.count();
        // A buffer that reaches the top, chosen at random.
        top.clear();
        for (uint32_t x = 0; x < n; ++x)
            if (offset[x] + b.size[x] == end) top.push_back(x);
        work += n / 8;
        const uint32_t x = top[rng.below(top.size())];
        // Its neighbours in time whose tops are within a random depth of the
        // end (1/8 down to 1/1024 of it, below x's own offset).
        const uint64_t depth = b.size[x] + (end >> (1 + rng.below(10)));
        const uint64_t cut = end > depth ? end - depth : 0;
        near.clear();
        index.collect(b.lower[x], b.upper[x], near);
        ripped.clear();
        for (uint32_t y : near)
            if (offset[y] + b.size[y] > cut) ripped.push_back(y);
        if (std::find(ripped.begin(), ripped.end(), x) == ripped.end()) ripped.push_back(x);
        std::sort(ripped.begin(), ripped.end(), [&](uint32_t p, uint32_t q) {
            if (b.size[p] != b.size[q]) return b.size[p] > b.size[q];
            if (b.lower[p] != b.lower[q]) return b.lower[p] < b.lower[q];
            return b.rank[p] < b.rank[q];
        });
        for (size_t k = 0; k + 1 < ripped.size(); ++k)
            if (rng.below(4) == 0) std::swap(ripped[k], ripped[k + 1]);
        work += kGreedyUnitsPerStep * (near.size() + ripped.size() * 2);
        // Rip up, then re-place first fit among the rest.
        saved.clear();
        for (uint32_t y : ripped) {
            saved.push_back(offset[y]);
            placed[y] = 0;
            if (b.lower[y] < b.upper[y]) index.remove(y);
        }
        bool overflow = false;
        for (uint32_t y : ripped) {
            try {
                offset[y] = gaps.find(index, offset, placed, y, Fit::First, work);
            } catch (const PlacementOverflow&) {
                overflow = true;  // keep the old place; the move is undone below
            }
            placed[y] = 1;
            if (b.lower[y] < b.upper[y]) index.insert(y);
            ends.set(y, offset[y] + b.size[y]);
        }
        const bool keep = !overflow && (ends.end() < end || (ends.end() == end && ends.count() <= at_top));
        if (getenv("EMEL_DEBUG_REPAIR")) fprintf(stderr, "x=%u ripped=%zu near=%zu end %lu->%lu count %lu->%lu keep=%d\n", x, ripped.size(), near.size(), end, ends.end(), at_top, ends.count(), keep);
        if (keep) {
            improved = improved || ends.end() < end;
            continue;
        }
        for (size_t k = 0; k < ripped.size(); ++k) {
            const uint32_t y = ripped[k];
            if (b.lower[y] < b.upper[y]) index.remove(y);
        }
        for (size_t k = 0; k < ripped.size(); ++k) {
            const uint32_t y = ripped[k];
            offset[y] = saved[k];
            if (b.lower[y] < b.upper[y]) index.insert(y);
            ends.set(y, offset[y] + b.size[y]);
        }
    }
    if (improved) out.method = "peak_repair";
    out.end = ends.end();
    out.work = work;
    return out;
}

}  // namespace emel::memory
