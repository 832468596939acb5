// The peak window (docs/strategies.md §4): the exact search solves the
// buffers live around the peak of live bytes, and greedy placement builds the
// rest around that answer.
//
// Why: on real traces the arena's size is decided near the peak, where a
// greedy order leaves a hole no later buffer can fill (pangu_2.6B: one hole
// at the peak instant, in every size or conflict order). The thousand
// buffers around the peak are an instance the exact
// search solves at the bound in a fraction of a second, and first fit in the
// order of its offsets keeps them there (below), so the rest only has to fit
// around.
#include <algorithm>
#include <numeric>

#include "emel/memory/placement/placement.hpp"

namespace emel::memory {

Buffers cut_to_window(const Buffers& b, const std::vector<uint32_t>& members, uint64_t from, uint64_t to) {
    // Cutting keeps every conflict among them (two intervals that meet each
    // other and the window meet inside it), so an answer for the cut
    // instance is valid for their full lifetimes.
    Buffers s;
    const size_t m = members.size();
    copy_rows(b, members, s);
    for (size_t k = 0; k < m; ++k) {
        s.lower[k] = std::max(s.lower[k], from);
        s.upper[k] = std::min(s.upper[k], to);
    }
    // Ranks stay in the instance's tie-break order, renumbered 0..m-1.
    std::vector<uint32_t> by_rank(m);
    std::iota(by_rank.begin(), by_rank.end(), 0u);
    std::sort(by_rank.begin(), by_rank.end(),
              [&](uint32_t i, uint32_t j) { return b.rank[members[i]] < b.rank[members[j]]; });
    for (size_t r = 0; r < m; ++r) s.rank[by_rank[r]] = static_cast<uint32_t>(r);
    if (b.has_partners()) {  // partners among the members only
        std::vector<uint32_t> index_of(b.count(), UINT32_MAX);
        for (size_t k = 0; k < m; ++k) index_of[members[k]] = static_cast<uint32_t>(k);
        s.partners.resize(m);
        for (size_t k = 0; k < m; ++k)
            for (uint32_t y : b.partners[members[k]])
                if (index_of[y] != UINT32_MAX) s.partners[k].push_back(index_of[y]);
    }
    return s;
}

PeakWindows::PeakWindows(const Buffers& b) : b_(b) {
    std::vector<std::pair<uint64_t, int64_t>> events;  // (instant, row; -1 - row at its end)
    for (uint32_t x = 0; x < b.count(); ++x) {
        if (b.lower[x] >= b.upper[x]) continue;
        lowers_.push_back(b.lower[x]);
        uppers_.push_back(b.upper[x]);
        events.emplace_back(b.lower[x], static_cast<int64_t>(x));
        events.emplace_back(b.upper[x], -1 - static_cast<int64_t>(x));
    }
    std::sort(lowers_.begin(), lowers_.end());
    std::sort(uppers_.begin(), uppers_.end());
    std::sort(events.begin(), events.end());
    // The instants where liveness changes, and the earliest instant of the
    // highest live bytes (the peak of the lower bound).
    unsigned __int128 bytes = 0, peak = 0;
    for (size_t e = 0; e < events.size();) {
        const uint64_t t = events[e].first;
        for (; e < events.size() && events[e].first == t; ++e) {
            const int64_t k = events[e].second;
            if (k < 0) bytes -= b.size[static_cast<size_t>(-1 - k)];
            else bytes += b.size[static_cast<size_t>(k)];
        }
        instants_.push_back(t);
        if (bytes > peak) {
            peak = bytes;
            peak_at_ = instants_.size() - 1;
        }
    }
}

size_t PeakWindows::live_in(size_t from, size_t to) const {
    // Every row is live over [lower, upper): the rows that end by the start
    // and those that start at the end or later are disjoint sets (lower <
    // upper), so the rest are the live ones.
    const size_t ended = std::upper_bound(uppers_.begin(), uppers_.end(), instants_[from]) - uppers_.begin();
    const size_t later = lowers_.end() - std::lower_bound(lowers_.begin(), lowers_.end(), instants_[to]);
    return lowers_.size() - ended - later;
}

PeakWindow PeakWindows::around_peak(size_t max_buffers) const {
    const Buffers& b = b_;
    const size_t n = b.count();
    PeakWindow w;
    if (instants_.empty()) {  // nothing is ever live: the empty window holds it all
        w.whole = true;
        return w;
    }
    // Grow [instants_[lo], instants_[hi]) around the peak, both sides at once,
    // then one side (the one adding fewer buffers first), while at most
    // `max_buffers` are live in it. The peak instant itself is always in.
    size_t lo = peak_at_, hi = peak_at_ + 1;
    for (;;) {
        const bool left = lo > 0, right = hi + 1 < instants_.size();
        if (left && right && live_in(lo - 1, hi + 1) <= max_buffers) {
            --lo;
            ++hi;
            continue;
        }
        const size_t by_left = left ? live_in(lo - 1, hi) : SIZE_MAX;
        const size_t by_right = right ? live_in(lo, hi + 1) : SIZE_MAX;
        const size_t fewer = std::min(by_left, by_right);
        if (fewer == SIZE_MAX || fewer > max_buffers) break;
        if (by_left <= by_right) --lo;  // ties: earlier instants first
        else ++hi;
    }
    w.from = instants_[lo];
    w.to = instants_[hi];
    w.whole = lo == 0 && hi + 1 == instants_.size();
    for (uint32_t x = 0; x < n; ++x)
        if (b.lower[x] < b.upper[x] && b.lower[x] < w.to && b.upper[x] > w.from) w.members.push_back(x);
    w.instance = cut_to_window(b, w.members, w.from, w.to);
    return w;
}

Placement place_around_window(const Buffers& b, const PeakWindow& w, const Placement& inside,
                              const std::vector<uint32_t>& rest_order, uint64_t give_up_above,
                              uint64_t expected_work) {
    // The window's buffers first, in the order of their offsets in `inside`:
    // first fit then puts each at or below that offset (the buffers before it
    // sit at or below theirs, so its own offset is still free), and so keeps
    // the window's answer. Then the others, in `rest_order`.
    std::vector<uint32_t> window_order(w.members.size());
    std::iota(window_order.begin(), window_order.end(), 0u);
    std::sort(window_order.begin(), window_order.end(), [&](uint32_t i, uint32_t j) {
        if (inside.offset[i] != inside.offset[j]) return inside.offset[i] < inside.offset[j];
        return w.instance.rank[i] < w.instance.rank[j];
    });
    for (uint32_t& k : window_order) k = w.members[k];
    Placement p = place_first_fit_after(b, window_order, rest_order, give_up_above, expected_work);
    p.method = "peak_window";
    return p;
}

Placement place_first_fit_after(const Buffers& b, const std::vector<uint32_t>& first,
                                const std::vector<uint32_t>& rest_order, uint64_t give_up_above,
                                uint64_t expected_work) {
    std::vector<uint32_t> order;
    order.reserve(b.count());
    std::vector<uint8_t> is_first(b.count(), 0);
    for (uint32_t x : first) {
        order.push_back(x);
        is_first[x] = 1;
    }
    for (uint32_t x : rest_order)
        if (!is_first[x]) order.push_back(x);
    Placement p = place_greedy(b, order, Fit::First, give_up_above, expected_work);
    p.work += kGreedyUnitsPerStep * 2 * b.count();  // the order
    return p;
}

}  // namespace emel::memory
