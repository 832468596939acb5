// best_fit (docs/strategies.md §3): an online allocator replayed in execution
// order — a free-block list, best fit, coalescing on free — the way runtimes
// such as ggml-alloc place tensors as they go.
#include <algorithm>
#include <map>
#include <numeric>
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
    std::vector<uint32_t> by_birth(n), by_death(n);
    std::iota(by_birth.begin(), by_birth.end(), 0u);
    std::iota(by_death.begin(), by_death.end(), 0u);
    std::sort(by_birth.begin(), by_birth.end(), [&](uint32_t x, uint32_t y) {
        if (b.lower[x] != b.lower[y]) return b.lower[x] < b.lower[y];
        if (b.size[x] != b.size[y]) return b.size[x] > b.size[y];
        return b.rank[x] < b.rank[y];
    });
    std::sort(by_death.begin(), by_death.end(),
              [&](uint32_t x, uint32_t y) { return b.upper[x] < b.upper[y]; });
    std::vector<uint8_t> placed(n, 0);
    auto clashes_with_partner = [&](uint32_t x, uint64_t start) {
        if (!b.has_partners()) return false;
        for (uint32_t q : b.partners[x])
            if (placed[q] && b.size[q] && b.size[x] && start < out.offset[q] + b.size[q] &&
                out.offset[q] < start + b.size[x])
                return true;
        return false;
    };
    FreeList free;
    uint64_t mark = 0;  // high-water mark
    size_t next_death = 0;
    for (uint32_t x : by_birth) {
        const uint64_t now = b.lower[x];
        for (; next_death < n && b.upper[by_death[next_death]] <= now; ++next_death) {
            const uint32_t d = by_death[next_death];
            if (placed[d] && b.lower[d] < b.upper[d])
                free.release(out.offset[d], out.offset[d] + b.size[d]);
        }
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
        placed[x] = 1;
        out.end = std::max(out.end, start + size);
    }
    return out;
}

}  // namespace emel::memory
