// Placed buffers, searchable by interval, and the gap choice of greedy
// placement (docs/strategies.md §2), used by greedy_by_size.cpp.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <numeric>
#include <vector>

#include "emel/memory/core/checked_math.hpp"
#include "emel/memory/placement/placement.hpp"

namespace emel::memory {

// A placed buffer's bytes: [offset, end), and its rank for tie-breaks.
struct Span { uint64_t offset, end; uint32_t rank; };

// Placed buffers by interval. Buffers are sorted by `lower`, and everything a
// query reads is kept by sorted position, so a query walks contiguous memory
// and hands back spans without touching the per-buffer arrays. Short buffers
// (lifetime at most `short_limit_`, the 90th percentile) are found by a linear
// scan: any conflict with [lo, hi) has its `lower` in (lo - short_limit_, hi).
// Long ones sit in a max-tree over the same order holding each placed long
// buffer's `upper` (0 when not placed); a query visits only subtrees that can
// hold a conflict, O((k + 1) log n) for k reported. An insert costs O(log n).
class PlacedIndex {
  public:
    explicit PlacedIndex(const Buffers& b) : b_(b) {
        const size_t n = b.count();
        std::vector<uint32_t> by_lower(n);
        std::iota(by_lower.begin(), by_lower.end(), 0u);
        std::sort(by_lower.begin(), by_lower.end(),
                  [&](uint32_t x, uint32_t y) { return b.lower[x] < b.lower[y]; });
        position_.resize(n);
        lower_.resize(n);
        for (size_t k = 0; k < n; ++k) {
            position_[by_lower[k]] = static_cast<uint32_t>(k);
            lower_[k] = b.lower[by_lower[k]];
        }
        placed_upper_.assign(n, 0);
        span_.assign(n, Span{0, 0, 0});
        if (n > 0) {
            std::vector<uint64_t> length(n);
            for (size_t x = 0; x < n; ++x) length[x] = b.upper[x] - b.lower[x];
            auto at = length.begin() + static_cast<std::ptrdiff_t>(n - 1 - (n - 1) / 10);
            std::nth_element(length.begin(), at, length.end());
            short_limit_ = *at;
        }
        leaves_ = 1;
        while (leaves_ < n) leaves_ <<= 1;
        max_upper_.assign(2 * leaves_, 0);
    }

    void insert(uint32_t x, uint64_t offset) {
        const uint32_t k = position_[x];
        placed_upper_[k] = b_.upper[x];
        span_[k] = Span{offset, offset + b_.size[x], b_.rank[x]};
        if (b_.upper[x] - b_.lower[x] <= short_limit_) return;
        size_t node = leaves_ + k;
        max_upper_[node] = b_.upper[x];
        for (node >>= 1; node >= 1; node >>= 1)
            max_upper_[node] = std::max(max_upper_[2 * node], max_upper_[2 * node + 1]);
    }

    // Appends the span of every placed buffer with lower < hi and upper > lo.
    void collect(uint64_t lo, uint64_t hi, std::vector<Span>& out) const {
        // Sorted positions [0, end) have lower < hi.
        const size_t end = std::lower_bound(lower_.begin(), lower_.end(), hi) - lower_.begin();
        if (end == 0) return;
        // Short buffers: lower > lo - short_limit_.
        const uint64_t from_lower = lo >= short_limit_ ? lo - short_limit_ + 1 : 0;
        const size_t from = std::lower_bound(lower_.begin(), lower_.begin() + end, from_lower) - lower_.begin();
        for (size_t k = from; k < end; ++k) {
            const uint64_t up = placed_upper_[k];
            if (up > lo && up - lower_[k] <= short_limit_) out.push_back(span_[k]);
        }
        // Long buffers: the tree.
        stack_.clear();
        stack_.push_back({1, 0, leaves_});
        while (!stack_.empty()) {
            const Frame f = stack_.back();
            stack_.pop_back();
            if (f.from >= end || max_upper_[f.node] <= lo) continue;
            if (f.node >= leaves_) {
                out.push_back(span_[f.from]);
                continue;
            }
            const size_t mid = f.from + (f.to - f.from) / 2;
            stack_.push_back({2 * f.node + 1, mid, f.to});
            stack_.push_back({2 * f.node, f.from, mid});
        }
    }

  private:
    struct Frame { size_t node, from, to; };
    const Buffers& b_;
    std::vector<uint32_t> position_;      // buffer -> sorted position
    std::vector<uint64_t> lower_;         // by sorted position
    std::vector<uint64_t> placed_upper_;  // by sorted position; 0 when not placed
    std::vector<Span> span_;              // by sorted position, once placed
    uint64_t short_limit_ = 0;
    size_t leaves_;
    std::vector<uint64_t> max_upper_;
    mutable std::vector<Frame> stack_;
};

// Sorts spans by offset, ties by end then rank: small inputs by comparison,
// large ones by a stable radix sort on the offset alone, which gives the same
// gap choice (below) for any buffer that holds bytes, since among spans that
// start at one offset only the first is ever a candidate gap's upper edge.
class SpanSorter {
  public:
    void sort(std::vector<Span>& spans, bool full_order) {
        const size_t k = spans.size();
        if (full_order || !by_radix(k)) {
            std::sort(spans.begin(), spans.end(), [](const Span& p, const Span& q) {
                if (p.offset != q.offset) return p.offset < q.offset;
                if (p.end != q.end) return p.end < q.end;
                return p.rank < q.rank;
            });
            return;
        }
        uint64_t top = 0;
        for (const Span& s : spans) top |= s.offset;
        scratch_.resize(k);
        for (unsigned shift = 0; shift < 64 && (top >> shift) != 0; shift += kBits) {
            count_.fill(0);
            for (const Span& s : spans) ++count_[(s.offset >> shift) & kMask];
            size_t sum = 0;
            for (auto& c : count_) { const size_t here = c; c = sum; sum += here; }
            for (const Span& s : spans) scratch_[count_[(s.offset >> shift) & kMask]++] = s;
            spans.swap(scratch_);
        }
    }

    static bool by_radix(size_t k) { return k >= 256; }

  private:
    static constexpr unsigned kBits = 11;
    static constexpr uint64_t kMask = (uint64_t{1} << kBits) - 1;
    std::array<size_t, size_t{1} << kBits> count_{};
    std::vector<Span> scratch_;
};

// Where greedy placement puts buffer x among the placed buffers of `index`
// and its placed must_not_alias partners (docs/strategies.md §2): walk the
// conflicting buffers in offset order (ties: end, then id), keeping the
// highest end seen; best fit takes the fitting gap with the least room, first
// fit the lowest one; with no fitting gap, on top. `work` is charged for the
// conflicts examined and sorted. Throws PlacementOverflow past 2^64-1.
class GapFinder {
  public:
    explicit GapFinder(const Buffers& b) : b_(b) {}

    uint64_t find(const PlacedIndex& index, const std::vector<uint64_t>& offset,
                  const std::vector<uint8_t>& placed, uint32_t x, Fit fit, uint64_t& work) {
        spans_.clear();
        if (b_.lower[x] < b_.upper[x]) index.collect(b_.lower[x], b_.upper[x], spans_);
        if (b_.has_partners())
            for (uint32_t q : b_.partners[x])
                if (placed[q] && !b_.live_together(x, q))
                    spans_.push_back({offset[q], offset[q] + b_.size[q], b_.rank[q]});
        // A zero-size buffer can land between spans that start at one offset:
        // it needs their full order.
        sorter_.sort(spans_, b_.size[x] == 0);
        // Charge the sort too (k log k by comparison, linear by radix), so
        // huge traces with thousands of conflicts per buffer cost what they
        // really take.
        const uint64_t k = spans_.size();
        work += kGreedyUnitsPerStep * (1 + k) +
                (SpanSorter::by_radix(k) ? 3 * k : kGreedyUnitsPerStep * k * (64 - __builtin_clzll(k | 1)) / 4);
        const uint64_t a = b_.alignment[x], size = b_.size[x];
        uint64_t cursor = 0, best_gap = UINT64_MAX, chosen = 0;
        bool found = false;
        for (const Span& q : spans_) {
            auto aligned = checked_align_up(cursor, a);
            if (aligned && *aligned <= q.offset && size <= q.offset - *aligned) {
                const uint64_t gap = q.offset - cursor;
                if (gap < best_gap) {
                    best_gap = gap;
                    chosen = *aligned;
                    found = true;
                    if (fit == Fit::First) break;
                }
            }
            cursor = std::max(cursor, q.end);
        }
        if (!found) {
            auto top = checked_align_up(cursor, a);
            if (!top) throw PlacementOverflow(x);
            chosen = *top;
        }
        if (!checked_add(chosen, size)) throw PlacementOverflow(x);
        return chosen;
    }

  private:
    const Buffers& b_;
    std::vector<Span> spans_;
    SpanSorter sorter_;
};

}  // namespace emel::memory
