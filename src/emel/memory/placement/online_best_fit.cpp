// best_fit (docs/strategies.md §3): an online allocator replayed in execution
// order — a free-block list, best fit, coalescing on free — the way runtimes
// such as ggml-alloc place tensors as they go.
#include <algorithm>
#include <map>
#include <queue>
#include <set>

#include "emel/memory/core/checked_math.hpp"
#include "emel/memory/core/errors.hpp"
#include "emel/memory/placement/placement.hpp"

namespace emel::memory {

namespace {

class FreeList {
  public:
    // Returns [start, end) to the list, merged with free neighbours.
    void release(uint64_t start, uint64_t end) {
        if (start == end) return;
        auto next = by_start_.lower_bound(start);
        if (next != by_start_.end() && next->first == end) {
            end = next->second;
            erase(next);
        }
        auto it = by_start_.lower_bound(start);
        if (it != by_start_.begin()) {
            auto prev = std::prev(it);
            if (prev->second == start) {
                start = prev->first;
                erase(prev);
            }
        }
        by_start_.emplace(start, end);
        by_size_.emplace(end - start, start);
    }

    // Removes [start, start+size) from block `b` (which contains it).
    void take(uint64_t block_start, uint64_t start, uint64_t size) {
        auto it = by_start_.find(block_start);
        const uint64_t block_end = it->second;
        erase(it);
        if (block_start < start) insert(block_start, start);
        if (start + size < block_end) insert(start + size, block_end);
    }

    void insert(uint64_t start, uint64_t end) {
        by_start_.emplace(start, end);
        by_size_.emplace(end - start, start);
    }

    // Blocks in best-fit order (size, then start), from the first of size >= min.
    template <typename Visit>
    bool visit_from(uint64_t min_size, Visit visit) const {
        for (auto it = by_size_.lower_bound({min_size, 0}); it != by_size_.end(); ++it)
            if (visit(it->second, it->second + it->first)) return true;
        return false;
    }

    // The block ending exactly at `mark`, if any.
    const std::pair<const uint64_t, uint64_t>* ending_at(uint64_t mark) const {
        if (by_start_.empty()) return nullptr;
        auto last = std::prev(by_start_.end());
        return last->second == mark ? &*last : nullptr;
    }

  private:
    void erase(std::map<uint64_t, uint64_t>::iterator it) {
        by_size_.erase({it->second - it->first, it->first});
        by_start_.erase(it);
    }
    std::map<uint64_t, uint64_t> by_start_;
    std::set<std::pair<uint64_t, uint64_t>> by_size_;
};

}  // namespace

Placement place_online_best_fit(const Buffers& b) {
    const size_t n = b.count();
    Placement out;
    out.offset.assign(n, 0);
    out.method = "best_fit";
    // The buffers in birth order, sorted as (lower, id) records: sorting
    // indices by comparing through them missed the cache at every step on
    // large random traces (10^6 buffers: 1.11 s in all, most of it waiting
    // on those reads). Ties of lower, rarer, are broken through the arrays.
    struct Birth {
        uint64_t lower;
        uint32_t id;
    };
    std::vector<Birth> births(n);
    for (uint32_t x = 0; x < n; ++x) births[x] = {b.lower[x], x};
    std::sort(births.begin(), births.end(), [&](const Birth& p, const Birth& q) {
        if (p.lower != q.lower) return p.lower < q.lower;
        if (b.size[p.id] != b.size[q.id]) return b.size[p.id] > b.size[q.id];
        return b.rank[p.id] < b.rank[q.id];
    });
    std::vector<uint8_t> placed(b.has_partners() ? n : 0, 0);
    auto clashes_with_partner = [&](uint32_t x, uint64_t start) {
        if (!b.has_partners()) return false;
        for (uint32_t q : b.partners[x])
            if (placed[q] && b.size[q] && b.size[x] && start < out.offset[q] + b.size[q] &&
                out.offset[q] < start + b.size[x])
                return true;
        return false;
    };
    // The live blocks, soonest death first. Blocks that die at the same
    // instant are all freed before the next birth, and a release merges only
    // with the free blocks it touches: any order among them gives the same
    // free list.
    struct Live {
        uint64_t upper, start, end;
        bool operator>(const Live& o) const { return upper > o.upper; }
    };
    std::priority_queue<Live, std::vector<Live>, std::greater<Live>> live;
    FreeList free;
    uint64_t mark = 0;  // high-water mark
    // The rows are read through the index: fetched a few buffers ahead.
    constexpr size_t kAhead = 16;
    for (size_t i = 0; i < n; ++i) {
        if (i + kAhead < n) {
            const uint32_t ahead = births[i + kAhead].id;
            __builtin_prefetch(&b.upper[ahead]);
            __builtin_prefetch(&b.size[ahead]);
            __builtin_prefetch(&b.alignment[ahead]);
        }
        const uint32_t x = births[i].id;
        const uint64_t now = births[i].lower, upper = b.upper[x];
        for (; !live.empty() && live.top().upper <= now; live.pop())
            free.release(live.top().start, live.top().end);
        const uint64_t a = b.alignment[x], size = b.size[x];
        uint64_t block = 0, start = 0;
        const bool fits = free.visit_from(size, [&](uint64_t bs, uint64_t be) {
            out.work += kGreedyUnitsPerStep;
            auto s = checked_align_up(bs, a);
            if (!s || *s > be || size > be - *s || clashes_with_partner(x, *s)) return false;
            block = bs;
            start = *s;
            return true;
        });
        out.work += kGreedyUnitsPerStep;
        if (fits) {
            free.take(block, start, size);
        } else {
            // Grow at the top: from the free block that ends at the mark, if any.
            const auto* top = free.ending_at(mark);
            auto s = top ? checked_align_up(top->first, a) : std::nullopt;
            if (s && !clashes_with_partner(x, *s)) {
                const uint64_t block_start = top->first;
                free.take(block_start, block_start, mark - block_start);
                if (block_start < *s) free.insert(block_start, *s);  // padding stays free
                start = *s;
            } else {
                auto s2 = checked_align_up(mark, a);
                if (!s2) throw PlacementOverflow(x);
                free.release(mark, *s2);
                start = *s2;
            }
            auto e = checked_add(start, size);
            if (!e) throw PlacementOverflow(x);
            mark = std::max(mark, *e);
        }
        out.offset[x] = start;
        if (b.has_partners()) placed[x] = 1;
        // Never live: never freed (it holds no instant; as the replay always did).
        if (now < upper) live.push({upper, start, start + size});
        out.end = std::max(out.end, start + size);
    }
    return out;
}

}  // namespace emel::memory
