// The exact search's neighbourhoods (docs/strategies.md §5): a few buffers
// freed from a placement and searched again around the others, kept where
// they are — around the peak of an instance the search takes whole
// (improve_peak, after the capacity ladder), and in windows of time on
// instances it does not (improve_by_windows, from auto).
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "emel/memory/placement/canonical_search.hpp"
#include "emel/memory/placement/neighbourhood_search.hpp"
#include "emel/memory/placement/worker_pool.hpp"

namespace emel::memory {

namespace exact {

// Window neighbourhoods (improve_by_windows): at most this many buffers
// freed, and a window reaches at most 2^(this - 1) lifetimes past its top
// buffer's on each side.
constexpr size_t kWindowFreed = 2048;
constexpr unsigned kWidenings = 4;
// Large neighbourhood search from a placement: a few buffers around its
// peak are freed, everything else stays where it is, and the exact search
// places the freed ones again under the best end minus one, into any hole
// the others leave. Two neighbourhoods take turns: the `m` buffers nearest in
// time to a buffer that reaches the top (its start), and the `m` highest
// tops. Sizes from 16 buffers, doubling through both neighbourhoods and the
// three preorders while nothing is found, again from 16 after a success.
// It returns after a round through every size that found nothing: another
// round would search the same neighbourhoods again (the highest tops are
// the same, and few buffers reach the top), while the ladder's attempts,
// which keep their failures, resume where they stopped.
void improve_peak(const CanonicalInstance& in, Placement& best, uint64_t lo, uint64_t budget, uint64_t& work) {
    const Buffers& b = in.b;
    const size_t n = in.active.size();
    if (n < 2) return;
    CanonicalSearch search(in);
    std::vector<uint64_t> offsets;
    std::vector<uint8_t> free(b.count(), 0);
    std::vector<std::pair<uint64_t, uint32_t>> ranked;  // (key, buffer): the lowest keys are freed
    Rng rng;
    size_t m = 16;
    int step = 0;  // neighbourhood x preorder
    const uint64_t start = work;
    while (best.end > lo && work - start < budget) {
        const uint64_t capacity = best.end - 1;
        const int kind = step % 2, heuristic = step / 2;
        // What reaches above the capacity cannot stay: always freed.
        std::vector<uint32_t> top;
        for (uint32_t x : in.active)
            if (best.offset[x] + b.size[x] > capacity) top.push_back(x);
        if (top.empty()) return;  // the end is a row's outside the search: nothing here lowers it
        ranked.clear();
        if (kind == 0) {
            const uint64_t t = b.lower[top[rng.below(top.size())]];
            for (uint32_t x : in.active) {
                const uint64_t distance = b.lower[x] > t ? b.lower[x] - t : b.upper[x] <= t ? t - b.upper[x] + 1 : 0;
                ranked.emplace_back(distance, x);
            }
        } else {
            for (uint32_t x : in.active) ranked.emplace_back(UINT64_MAX - (best.offset[x] + b.size[x]), x);
        }
        const size_t k = std::min(m, n);
        std::nth_element(ranked.begin(), ranked.begin() + (k - 1), ranked.end());
        std::fill(free.begin(), free.end(), 0);
        for (size_t i = 0; i < k; ++i) free[ranked[i].second] = 1;
        for (uint32_t x : top) free[x] = 1;
        work += 4 * n;  // the ranking, its partial sort and the marks
        if (work - start >= budget) break;
        const uint64_t share =
            std::min<uint64_t>(budget - (work - start), std::max<uint64_t>(uint64_t{1} << 16, 256 * k * k));
        uint64_t spent = 0;
        const Outcome r = search.run_around(capacity, heuristic, share, free, best.offset, offsets, spent);
        work += std::min(spent, share);  // as the race charges: a search stops within a node of its share
        if (r == Outcome::Found) {
            uint64_t end = 0;
            for (uint32_t x : in.active) end = std::max(end, offsets[x] + b.size[x]);
            best.offset = offsets;  // the rows outside the search at 0, as the ladder leaves them
            best.end = end;
            best.method = "neighbourhood_search";
            m = 16;
            step = 0;
            continue;
        }
        if (++step == 2 * CanonicalSearch::kHeuristics) {
            step = 0;
            if (m >= n) return;  // a whole round found nothing
            m *= 2;
        }
    }
}

}  // namespace exact

using namespace exact;

namespace {

// The searched rows by start, so that a window looks only at the rows that
// may live in it, not at every row. They are grouped by lifetime (1, 2,
// 3-4, 5-8, ... doubling): a row of a group can start at most the group's
// longest lifetime before a window and still live in it, so a few long
// lifetimes (a training step's accumulators) do not send every window back
// over all the rows.
struct RowsByStart {
    explicit RowsByStart(const Buffers& b) {
        for (uint32_t x = 0; x < b.count(); ++x) {
            if (!b.searched(x)) continue;
            const uint64_t length = b.upper[x] - b.lower[x];
            const size_t c = length <= 1 ? 0 : static_cast<size_t>(64 - __builtin_clzll(length - 1));
            if (groups.size() <= c) groups.resize(c + 1);
            groups[c].rows.push_back(x);
            groups[c].longest = std::max(groups[c].longest, length);
        }
        for (Group& g : groups) {
            std::stable_sort(g.rows.begin(), g.rows.end(), [&](uint32_t x, uint32_t y) { return b.lower[x] < b.lower[y]; });
            for (uint32_t x : g.rows) g.lowers.push_back(b.lower[x]);
        }
    }
    // The rows live at some instant of [from, to), in row order.
    void live_in(const Buffers& b, uint64_t from, uint64_t to, std::vector<uint32_t>& out) const {
        out.clear();
        for (const Group& g : groups) {
            const uint64_t earliest = from > g.longest ? from - g.longest : 0;  // a row live there starts after it
            for (size_t i = std::lower_bound(g.lowers.begin(), g.lowers.end(), earliest) - g.lowers.begin();
                 i < g.lowers.size() && g.lowers[i] < to; ++i)
                if (b.upper[g.rows[i]] > from) out.push_back(g.rows[i]);
        }
        std::sort(out.begin(), out.end());
    }
    struct Group {
        std::vector<uint32_t> rows;    // by start
        std::vector<uint64_t> lowers;  // their starts
        uint64_t longest = 0;
    };
    std::vector<Group> groups;
};

}  // namespace

void improve_by_windows(const Buffers& b, Placement& best, uint64_t budget, uint64_t& work) {
    // Partners may live outside any window: their constraint would be lost.
    if (b.has_partners() || b.count() == 0) return;
    const size_t n = b.count();
    const uint64_t start = work;
    size_t next_top = 0;   // which top buffer to lower next (round robin)
    unsigned widen = 0;    // how far the window reaches past the buffer's lifetime
    unsigned failures = 0;
    const RowsByStart by_start(b);
    std::vector<uint32_t> live;
    // Wider around the same top buffer, or (too wide, or told to) the next
    // top buffer's own lifetime; true when it moved to the next top buffer.
    auto next_window = [&](bool next_top_now) {
        if (next_top_now || widen >= kWidenings) {
            widen = 0;
            ++next_top;
            return true;
        }
        ++widen;
        return false;
    };
    // The buffers that reach the end: each must come down for the end to.
    // Found again only after a window moved buffers (most windows do not),
    // but charged on every window as the two scans it was, so that a budget
    // buys the same windows.
    std::vector<uint32_t> tops;
    uint64_t end = 0;
    bool moved = true;
    while (work - start < budget) {
        if (moved) {
            end = 0;
            tops.clear();
            for (uint32_t x = 0; x < n; ++x)
                if (b.searched(x)) end = std::max(end, best.offset[x] + b.size[x]);
            for (uint32_t x = 0; x < n; ++x)
                if (b.searched(x) && best.offset[x] + b.size[x] == end) tops.push_back(x);
            moved = false;
        }
        work += 2 * n;
        if (end < best.end) {  // every top came down: a smaller arena
            best.end = end;
            best.method = "window_neighbourhood_search";
            for (uint32_t x = 0; x < n; ++x)  // rows outside every search at 0, as the exact search leaves them
                if (!b.searched(x)) best.offset[x] = 0;
        }
        if (tops.empty() || end == 0) return;
        const uint32_t p = tops[next_top % tops.size()];
        const uint64_t length = b.upper[p] - b.lower[p];
        const uint64_t reach = widen == 0 ? 0 : length << (widen - 1);
        const uint64_t from = b.lower[p] > reach ? b.lower[p] - reach : 0;
        const uint64_t to = b.upper[p] > UINT64_MAX - reach ? UINT64_MAX : b.upper[p] + reach;
        // Free: the buffers live only inside the window. Their obstacles:
        // the others live with them, all of which are live in the window.
        std::vector<uint32_t> freed_rows, crossing;
        bool top_fixed = false;
        by_start.live_in(b, from, to, live);
        for (uint32_t x : live) {
            if (b.lower[x] >= from && b.upper[x] <= to) {
                freed_rows.push_back(x);
            } else {
                crossing.push_back(x);
                top_fixed = top_fixed || best.offset[x] + b.size[x] == end;
            }
        }
        work += n;  // charged as the scan of every row it replaces
        const size_t freed = freed_rows.size();
        const bool too_large = freed > kWindowFreed;
        if (top_fixed || too_large) {  // this window cannot lower the end: the next one
            if (next_window(too_large) && ++failures > tops.size() * (kWidenings + 1)) return;
            continue;
        }
        const Buffers sub = cut_to_window(b, freed_rows, from, to);  // nothing cut: they live inside
        const SearchCosts costs = search_costs(sub);
        if (work - start + costs.build + freed * crossing.size() >= budget) return;
        work += costs.build;
        // Each freed buffer's obstacles: the crossing buffers live with it.
        std::vector<std::vector<std::pair<uint64_t, uint64_t>>> obstacles(freed);
        for (uint32_t k = 0; k < freed; ++k) {
            const uint32_t x = freed_rows[k];
            for (uint32_t z : crossing)
                if (b.lower[z] < b.upper[x] && b.lower[x] < b.upper[z])
                    obstacles[k].emplace_back(best.offset[z], best.offset[z] + b.size[z]);
        }
        work += freed * crossing.size();
        const CanonicalInstance instance(sub);
        CanonicalSearch search(instance);
        std::vector<uint8_t> free(freed, 1);
        std::vector<uint64_t> fixed(freed, 0), offsets;
        const uint64_t share = std::min<uint64_t>(budget - (work - start),
                                                  std::max<uint64_t>(uint64_t{1} << 16, 256 * freed * freed));
        uint64_t spent = 0;
        Outcome r = Outcome::OutOfBudget;
        auto run = [&] {
            r = search.run_around(end - 1, static_cast<int>(failures % CanonicalSearch::kHeuristics), share, free, fixed, offsets, spent, &obstacles);
        };
        if (freed <= kCallerStackLevels) run();
        else if (!run_on_stack(kStackBase + kStackPerLevel * freed, run)) return;
        work += std::min(spent, share);
        if (r == Outcome::Found) {
            for (size_t k = 0; k < freed; ++k) best.offset[freed_rows[k]] = offsets[k];
            moved = true;
            widen = 0;
            failures = 0;
            continue;  // the same top index now names the next buffer still at the end
        }
        next_window(false);
        if (++failures > tops.size() * (kWidenings + 1) * 3) return;
    }
}

}  // namespace emel::memory
