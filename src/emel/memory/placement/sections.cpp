// Time sections (docs/strategies.md §5, "Time sections"): the exact search
// on instances too large to search whole, one stretch of time at a time.
//
// Why: the search's instance takes memory and time in the square of its
// buffers, so it stops at kSearchUpTo. But real traces fall apart in time: a
// training iteration that ends in a pipeline flush shares no buffer with the
// next, and a decoding trace that never empties still has instants few
// buffers live across. So:
//  (a) at instants no buffer spans, the trace splits into *components*
//      whose placements are independent (they share no instant): each is
//      placed on its own from offset 0, the arena is the largest of theirs,
//      and the bound of the whole is the largest of their bounds. A component
//      that the answer so far already fits under the target needs nothing;
//      only the ones above it are searched, each with the target as its
//      capacity. A proof for every component is a proof for the whole, and a
//      component proven above the target raises the target for the rest.
//  (b) a component too large to search whole is cut at instants few buffers
//      live across and solved one section at a time (a rolling horizon):
//      the section of its peak first, with every buffer live there, then
//      outwards in time, each section's buffers placed around the buffers
//      already placed that live with them, fixed, as obstacles. A section
//      that cannot be placed under the target is placed by first fit around
//      them, and the component keeps whichever of this and its answer so far
//      ends lower.
// Components of the same shape (the same rows, shifted in time: the
// iterations of a training loop) are solved once.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <numeric>
#include <tuple>
#include <utility>
#include <vector>

#include "emel/memory/placement/canonical_search.hpp"
#include "emel/memory/placement/placed_index.hpp"
#include "emel/memory/placement/placement.hpp"
#include "emel/memory/placement/preorder_race.hpp"
#include "emel/memory/placement/worker_pool.hpp"

namespace emel::memory {

using namespace exact;

namespace {

// SectionSizes (placement.hpp): a component of up to 4,096 rows is searched
// whole (the race, then the ladder); a larger one by the rolling horizon, in
// sections of 512-1,024 rows, which first fit places at once and the search
// settles in a fraction of a millisecond when it must.

// The roll is not tried where its cuts cross, on average, at least
// 1/kRollCrossingShare of a section's rows (roll_through).
constexpr uint64_t kRollCrossingShare = 2;

// The searched rows in order of start (ties: row), cut into components at
// every instant no row spans: [begin, end) index ranges into `by_start`.
struct Components {
    std::vector<uint32_t> by_start;
    std::vector<std::pair<size_t, size_t>> ranges;
};

Components find_components(const Buffers& b) {
    Components c;
    for (uint32_t x = 0; x < b.count(); ++x)
        if (b.searched(x)) c.by_start.push_back(x);
    std::sort(c.by_start.begin(), c.by_start.end(), [&](uint32_t x, uint32_t y) {
        return b.lower[x] != b.lower[y] ? b.lower[x] < b.lower[y] : x < y;
    });
    uint64_t reach = 0;  // the latest end so far
    size_t begin = 0;
    for (size_t i = 0; i < c.by_start.size(); ++i) {
        const uint32_t x = c.by_start[i];
        if (i > begin && reach <= b.lower[x]) {  // nothing started before x is live at its start
            c.ranges.emplace_back(begin, i);
            begin = i;
        }
        reach = std::max(reach, b.upper[x]);
    }
    if (begin < c.by_start.size()) c.ranges.emplace_back(begin, c.by_start.size());
    return c;
}

}  // namespace

bool falls_apart_in_time(const Buffers& b) { return find_components(b).ranges.size() > 1; }

namespace {

// A component's rows as an instance of their own, and the same shape's key:
// its rows shifted to start at instant 0 (two components with equal keys
// have the same placements, row for row).
using ShapeKey = std::vector<std::tuple<uint64_t, uint64_t, uint64_t, uint64_t>>;

ShapeKey shape_of(const Buffers& b, const std::vector<uint32_t>& rows) {
    ShapeKey key;
    key.reserve(rows.size());
    const uint64_t t0 = b.lower[rows.front()];
    for (uint32_t x : rows) key.emplace_back(b.lower[x] - t0, b.upper[x] - t0, b.size[x], b.alignment[x]);
    return key;
}

uint64_t end_of(const Buffers& b, const std::vector<uint32_t>& rows, const std::vector<uint64_t>& offset) {
    uint64_t end = 0;
    for (uint32_t x : rows) end = std::max(end, offset[x] + b.size[x]);
    return end;
}

// First fit of a section's rows (their own instance `sub`) in `order` around
// `obstacles` (each row's (offset, top) pairs, placed before, sorted): the quick try
// before the search, and the fallback when it fails. Offsets into `out`;
// returns their end. `conflicts`: each row's rows live with it. Stops, the
// offsets partial, once `work` passes `work_limit` (a section of thousands
// of rows all live together costs millions of units a pass).
uint64_t first_fit_around(const Buffers& sub, const std::vector<uint32_t>& order,
                          const std::vector<std::vector<uint32_t>>& conflicts,
                          const std::vector<std::vector<std::pair<uint64_t, uint64_t>>>& obstacles,
                          std::vector<uint64_t>& out, uint64_t& work, uint64_t work_limit) {
    const size_t m = sub.count();
    uint64_t end = 0;
    std::vector<uint8_t> placed(m, 0);
    std::vector<Span> mine;
    SpanSorter sorter;
    out.assign(m, 0);
    for (uint32_t x : order) {
        if (work > work_limit) break;
        // The section's rows placed so far that live with x, by offset; the
        // obstacles are sorted already: first fit walks both in offset order.
        // Spans of one bottom may come in any order: the offset they raise
        // x to is the highest of their tops, aligned, in any order (the
        // bucket sort, not a comparison sort: a section of random long
        // lifetimes has a thousand or more per row).
        mine.clear();
        for (uint32_t y : conflicts[x])
            if (placed[y]) mine.emplace_back(out[y], out[y] + sub.size[y]);
        sorter.sort(mine, false);
        const auto& fixed = obstacles[x];
        work += kGreedyUnitsPerStep * (1 + conflicts[x].size()) + 2 * fixed.size();
        uint64_t offset = 0;
        for (size_t i = 0, j = 0; i < fixed.size() || j < mine.size();) {
            uint64_t bottom, top;
            if (j == mine.size() || (i < fixed.size() && fixed[i].first < mine[j].offset)) {
                std::tie(bottom, top) = fixed[i++];
            } else {
                bottom = mine[j].offset;
                top = mine[j++].end;
            }
            if (offset + sub.size[x] <= bottom) break;
            if (top > offset) {
                auto raised = checked_align_up(top, sub.alignment[x]);
                if (!raised) throw PlacementOverflow(x);
                offset = *raised;
            }
        }
        if (offset > UINT64_MAX - sub.size[x]) throw PlacementOverflow(x);
        out[x] = offset;
        placed[x] = 1;
        end = std::max(end, offset + sub.size[x]);
    }
    return end;
}

// Each row's rows live with it, by a sweep in start order (each pair once).
std::vector<std::vector<uint32_t>> conflict_lists(const Buffers& sub, uint64_t& work) {
    const size_t m = sub.count();
    std::vector<uint32_t> by_start(m);
    std::iota(by_start.begin(), by_start.end(), 0u);
    std::sort(by_start.begin(), by_start.end(), [&](uint32_t x, uint32_t y) {
        return sub.lower[x] != sub.lower[y] ? sub.lower[x] < sub.lower[y] : x < y;
    });
    std::vector<std::vector<uint32_t>> c(m);
    uint64_t pairs = 0;
    for (size_t i = 0; i < m; ++i)
        for (size_t j = i + 1; j < m && sub.lower[by_start[j]] < sub.upper[by_start[i]]; ++j) {
            c[by_start[i]].push_back(by_start[j]);
            c[by_start[j]].push_back(by_start[i]);
            ++pairs;
        }
    work += sort_work(m) + 2 * pairs;
    return c;
}

// The instant of a component's peak of live bytes (its earliest), from its
// rows in start order.
uint64_t peak_instant(const Buffers& b, const std::vector<uint32_t>& rows, uint64_t& work) {
    std::vector<std::pair<uint64_t, uint32_t>> ends;
    ends.reserve(rows.size());
    for (uint32_t x : rows) ends.emplace_back(b.upper[x], x);
    std::sort(ends.begin(), ends.end());
    work += sort_work(rows.size());
    unsigned __int128 live = 0, peak = 0;
    uint64_t at = b.lower[rows.front()];
    size_t e = 0;
    for (size_t i = 0; i < rows.size();) {
        const uint64_t t = b.lower[rows[i]];
        for (; e < ends.size() && ends[e].first <= t; ++e) live -= b.size[ends[e].second];
        for (; i < rows.size() && b.lower[rows[i]] == t; ++i) live += b.size[rows[i]];
        if (live > peak) {
            peak = live;
            at = t;
        }
    }
    return at;
}

// A section placed around fixed neighbours: the three preorders in turn,
// each with `each` units, until one places it under `capacity` (into
// `offsets`; true). Where threads are free they search at once, a later one
// stopped as soon as an earlier one has placed it, and the outcome and the
// work charged are those of one after another: each up to the first that
// placed it.
bool search_preorders_in_turn(const CanonicalInstance& instance, uint64_t capacity, uint64_t each,
                              const std::vector<std::vector<std::pair<uint64_t, uint64_t>>>& obstacles,
                              std::vector<uint64_t>& offsets, uint64_t& work) {
    constexpr int kH = CanonicalSearch::kHeuristics;
    const size_t m = instance.n;
    const std::vector<uint8_t> free(m, 1);
    const std::vector<uint64_t> fixed(m, 0);
    struct Turn {
        Outcome outcome = Outcome::OutOfBudget;
        uint64_t spent = 0;
        std::vector<uint64_t> offsets;
        bool ran = false;  // false: no stack deep enough, or not needed
    };
    std::array<Turn, kH> turn;
    // Preorder h's search (`deep_stack`: on a pool thread made for its depth).
    auto search_turn = [&](CanonicalSearch& search, int h, bool deep_stack, const std::atomic<uint64_t>* go) {
        turn[h].ran = run_with_stack_for(m, [&] {
            turn[h].outcome = search.run_around(capacity, h, each, free, fixed, turn[h].offsets, turn[h].spent,
                                                &obstacles, go);
        }, deep_stack);
    };
    const unsigned threads = std::min<unsigned>(kH, placement_threads());
    std::unique_ptr<WorkerPool> pool;
    if (threads > 1) {
        pool = std::make_unique<WorkerPool>(threads, m > kCallerStackLevels ? stack_bytes_for(m) : 0);
        if (pool->size() < 2) pool.reset();
    }
    if (pool) {
        // go[h] drops to 0 once an earlier preorder has placed the section.
        std::array<std::atomic<uint64_t>, kH> go;
        for (auto& g : go) g.store(UINT64_MAX);
        pool->run([&](unsigned t) {
            for (int h = static_cast<int>(t); h < kH; h += static_cast<int>(pool->size())) {
                if (go[h].load() == 0) return;
                CanonicalSearch search(instance);
                search_turn(search, h, /*deep_stack=*/t != 0, &go[h]);  // the caller's stack may not hold it
                if (turn[h].outcome == Outcome::Found)
                    for (int later = h + 1; later < kH; ++later) go[later].store(0);
            }
        });
    } else {
        CanonicalSearch search(instance);
        for (int h = 0; h < kH; ++h) {
            search_turn(search, h, false, nullptr);
            if (!turn[h].ran || turn[h].outcome == Outcome::Found) break;
        }
    }
    // One after another: each charged, up to the first that placed it.
    for (int h = 0; h < kH; ++h) {
        if (!turn[h].ran) return false;
        work += std::min(turn[h].spent, each);
        if (turn[h].outcome == Outcome::Found) {
            offsets.swap(turn[h].offsets);
            return true;
        }
    }
    return false;
}

// One component's rows in start order, placed in time sections (b): into
// `offset` (rows outside the component untouched). Returns the component's
// end, or UINT64_MAX once it passes `give_up_above` or the budget.
//
// Sections are cut at instants few rows live across. The section holding the
// component's peak of live bytes goes first, with every row live in it (its
// bound is the component's: there the target leaves no slack, so nothing
// placed before may constrain it; lifetimes cut to the section, which loses
// no conflict among them); then the later sections in time order, then the
// earlier ones backwards, each around the rows already placed that live with
// its rows, fixed, as obstacles. Each section: first fit in two orders, then
// the search under the capacity, else the better first fit (above it).
uint64_t roll_through(const Buffers& b, const std::vector<uint32_t>& rows, size_t section_rows, uint64_t capacity,
                      uint64_t budget, uint64_t give_up_above, std::vector<uint64_t>& offset, uint64_t& work) {
    const uint64_t work_limit = work + budget;
    const size_t n = rows.size();
    std::vector<uint64_t> ends(n), starts(n);
    uint64_t longest = 0;
    for (size_t i = 0; i < n; ++i) {
        ends[i] = b.upper[rows[i]];
        starts[i] = b.lower[rows[i]];
        longest = std::max(longest, ends[i] - starts[i]);
    }
    std::sort(ends.begin(), ends.end());
    work += sort_work(n);
    auto crossing = [&](size_t i) {  // rows started before rows[i]'s instant and still live there
        const uint64_t t = starts[i];
        const size_t ended = std::upper_bound(ends.begin(), ends.end(), t) - ends.begin();
        const size_t started = std::lower_bound(starts.begin(), starts.end(), t) - starts.begin();
        return started - std::min(started, ended);
    };
    // Cuts: from each section's start, the start instant with the fewest rows
    // across it among those that leave the section between half and all of
    // `section_rows` (ties: the later).
    std::vector<size_t> cuts{0};
    section_rows = std::max<size_t>(section_rows, 2);
    uint64_t crossed = 0;  // rows across the cuts, summed
    while (n - cuts.back() > section_rows) {
        const size_t from = cuts.back() + section_rows / 2, to = cuts.back() + section_rows;
        size_t best = SIZE_MAX, fewest = SIZE_MAX;
        for (size_t i = from; i <= to; ++i) {
            if (starts[i] == starts[i - 1]) continue;  // not an instant's first row
            const size_t c = crossing(i);
            if (c <= fewest) {
                fewest = c;
                best = i;
            }
        }
        work += 2 * (to - from);
        if (best == SIZE_MAX) {  // one instant holds them all: cut inside it (still valid)
            best = to;
            fewest = section_rows;
        }
        crossed += fewest;
        cuts.push_back(best);
    }
    cuts.push_back(n);
    const size_t sections = cuts.size() - 1;
    // Where the cuts cross, on average, half a section's rows or more, the
    // component does not fall apart in time: each section is placed around
    // about as many fixed rows as it holds, and the roll has won nowhere
    // (random lifetimes up to 2,000 steps, about 950 rows across each cut of
    // 1,024-row sections; S_1, 1,400; pangu_2.6B, 630), for up to 0.9 s of
    // a default call that goes uncounted (docs/strategies.md §5).
    if (sections > 1 && crossed * kRollCrossingShare >= (sections - 1) * section_rows) return UINT64_MAX;
    const uint64_t peak_at = peak_instant(b, rows, work);
    size_t first = 0;
    while (first + 1 < sections && starts[cuts[first + 1]] <= peak_at) ++first;
    std::vector<size_t> order;
    for (size_t k = first; k < sections; ++k) order.push_back(k);
    for (size_t k = first; k-- > 0;) order.push_back(k);

    std::vector<uint8_t> placed_row(n, 0);  // by position in `rows`
    bool over_budget = false;  // an attempt ran past the budget (or the search's pairs): the roll is given up
    // One attempt at the rows `at` (positions, ascending) around the placed
    // rows that live with them; `cut_from`/`cut_to`: the window their
    // lifetimes are cut to (the first section's; else none). Offsets into
    // `placed`; true when they end at or below the capacity, else `placed`
    // is the better first fit.
    auto attempt = [&](const std::vector<size_t>& at, uint64_t cut_from, uint64_t cut_to,
                       std::vector<uint64_t>& placed) {
        std::vector<uint32_t> members;
        uint64_t lo_t = UINT64_MAX, hi_t = 0;
        for (size_t i : at) {
            members.push_back(rows[i]);
            lo_t = std::min(lo_t, starts[i]);
            hi_t = std::max(hi_t, b.upper[rows[i]]);
        }
        const size_t m = members.size();
        // Placed rows that may live with them: started within `longest`
        // before the earliest member and before the latest member's end.
        std::vector<uint32_t> near;
        const size_t scan_from =
            std::lower_bound(starts.begin(), starts.end(), lo_t > longest ? lo_t - longest : 0) - starts.begin();
        const size_t scan_to = std::lower_bound(starts.begin(), starts.end(), hi_t) - starts.begin();
        for (size_t i = scan_from; i < scan_to; ++i)
            if (placed_row[i] && b.upper[rows[i]] > lo_t) near.push_back(rows[i]);
        const Buffers sub = cut_to_window(b, members, cut_from, cut_to);
        // What the steps below charge at least: `setup` (the scan, the
        // obstacles, the search's instance) and the conflict lists (`costs.build`
        // again, at least). Past the roll's budget, it is given up before
        // them: a section of some 16,000 rows all live together (a
        // near-clique's peak) took seconds for a budget of milliseconds.
        const SearchCosts costs = search_costs(sub);
        const uint64_t setup = (scan_to - scan_from) + m * near.size() + costs.build;
        // Nor past the pairs the exact search holds (kSearchMaxConflicts):
        // the conflict lists of a section of 16,000 rows all live together
        // take 1 GB and, built at about half the rate charged, `optimal` at
        // 1,000 ms some 2 s on a near-clique of 17,000 buffers.
        if (work + setup + costs.build > work_limit || costs.conflict_pairs > kSearchMaxConflicts) {
            work += scan_to - scan_from;
            over_budget = true;
            return false;
        }
        std::vector<std::vector<std::pair<uint64_t, uint64_t>>> obstacles(m);
        for (size_t j = 0; j < m; ++j) {
            for (uint32_t z : near)
                if (b.live_together(z, members[j])) obstacles[j].emplace_back(offset[z], offset[z] + b.size[z]);
            std::sort(obstacles[j].begin(), obstacles[j].end());  // by offset: first fit and the search walk them so
            work += obstacles[j].size() * (64 - static_cast<uint64_t>(__builtin_clzll(obstacles[j].size() | 1)));
        }
        work += setup;
        // The search's share: half of what is left. Most sections fit by
        // first fit; one that does not is where the roll is won or lost.
        const uint64_t share = (work_limit - std::min(work_limit, work)) / 2;
        // Quick first: first fit in two of auto's orders; the search only
        // when neither fits under the capacity.
        std::vector<uint64_t> tried;
        uint64_t section_end = UINT64_MAX;
        const auto conflicts = conflict_lists(sub, work);
        for (const auto& by : {order_by_live_peak(sub), order_by_size(sub)}) {
            if (section_end <= capacity) break;
            const uint64_t e = first_fit_around(sub, by, conflicts, obstacles, tried, work, work_limit);
            if (work > work_limit) {
                over_budget = true;
                return false;
            }
            if (e < section_end) {
                section_end = e;
                placed.swap(tried);
            }
        }
        if (section_end <= capacity) return true;
        bool found = false;
        const CanonicalInstance instance(sub);
        if (near.empty()) {
            // Nothing placed around them (the first section): the race (§5).
            PreorderRace race(instance);
            uint64_t spent = 0;
            const Outcome r = race.solve(capacity, share, tried, spent);
            work += spent;
            found = r == Outcome::Found && end_of(sub, instance.active, tried) <= capacity;
        } else {
            found = search_preorders_in_turn(instance, capacity, share / CanonicalSearch::kHeuristics, obstacles,
                                             tried, work);
        }
        if (found) placed.swap(tried);
        return found;
    };
    auto commit = [&](const std::vector<size_t>& at, const std::vector<uint64_t>& placed) {
        for (size_t j = 0; j < at.size(); ++j) {
            offset[rows[at[j]]] = placed[j];
            placed_row[at[j]] = 1;
        }
    };
    uint64_t end = 0;
    std::vector<std::vector<size_t>> taken(sections);  // each section's rows (positions), once placed
    for (size_t k : order) {
        // The section's rows: those starting in it not placed yet, and for
        // the first, every earlier row live at its start.
        std::vector<size_t> at;
        const uint64_t from_t = starts[cuts[k]];
        const uint64_t to_t = k + 1 < sections ? starts[cuts[k + 1]] : UINT64_MAX;
        if (k == first)
            for (size_t i = 0; i < cuts[k]; ++i)
                if (b.upper[rows[i]] > from_t) at.push_back(i);
        for (size_t i = cuts[k]; i < cuts[k + 1]; ++i)
            if (!placed_row[i]) at.push_back(i);
        work += (k == first ? cuts[k] : 0) + (cuts[k + 1] - cuts[k]);
        if (at.empty()) continue;
        std::vector<uint64_t> placed;
        bool found = k == first ? attempt(at, from_t, to_t, placed) : attempt(at, 0, UINT64_MAX, placed);
        if (over_budget) return UINT64_MAX;
        // Not under the capacity: once more together with the section placed
        // just before it on its side (its neighbour in time), which may have
        // put its rows where this one needed room.
        const size_t before = k > first ? k - 1 : k + 1;
        if (!found && k != first && !taken[before].empty()) {
            std::vector<size_t> both = taken[before];
            both.insert(both.end(), at.begin(), at.end());
            std::sort(both.begin(), both.end());
            for (size_t i : taken[before]) placed_row[i] = 0;
            std::vector<uint64_t> placed_both;
            const bool both_found = attempt(both, 0, UINT64_MAX, placed_both);
            if (over_budget) return UINT64_MAX;
            if (both_found) {
                commit(both, placed_both);
                for (size_t j = 0; j < both.size(); ++j) end = std::max(end, placed_both[j] + b.size[rows[both[j]]]);
                taken[before].clear();
                taken[k] = std::move(both);
                continue;
            }
            for (size_t i : taken[before]) placed_row[i] = 1;
        }
        commit(at, placed);
        for (size_t j = 0; j < at.size(); ++j) end = std::max(end, placed[j] + b.size[rows[at[j]]]);
        taken[k] = std::move(at);
        capacity = std::max(capacity, end);  // above it already: no later section need do better
        if (end > give_up_above || work > work_limit) return UINT64_MAX;  // it can no longer win
    }
    return end;
}

// What a greedy pass over a component `sub` of `rows` of the instance's
// `count` rows costs, about: its share of a whole pass (`pass_work`, when
// known), and at least a step per buffer and per pair live together (the
// later of the two meets the earlier one placed). A pass is not started
// where its share cannot hold that: on 10^5 random buffers beside
// longer-lived ones a component's pass cost 3.3G units where the sections
// had 0.15G. `costs`: search_costs(sub), charged here as a sort of the starts
// and of the ends.
uint64_t greedy_pass_cost(const Buffers& sub, const SearchCosts& costs, size_t count, uint64_t pass_work,
                          uint64_t& work) {
    work += sort_work(sub.count());
    const uint64_t at_least = kGreedyUnitsPerStep * (sub.count() + costs.conflict_pairs);
    const uint64_t share_of_whole =
        count ? static_cast<uint64_t>(static_cast<unsigned __int128>(pass_work) * sub.count() / count) : 0;
    return std::max(at_least, share_of_whole);
}

// One component above the target (a window of rows of `b`, none spanning
// its edges): placed on its own, as low as it can within `share`, under
// `capacity` when it can. Quick greedy orders first, then the race at the
// capacity (§5); proven above it, the ladder seeks its optimum. Offsets into
// `mine` (row for row) when it ends below `before`; returns its end (or
// `before`). `proven` rises to what it proves.
uint64_t solve_component(const Buffers& b, const std::vector<uint32_t>& rows, const std::vector<uint64_t>& offset,
                         uint64_t before, uint64_t capacity, uint64_t share, uint64_t pass_work,
                         uint64_t passes_limit, std::vector<uint64_t>& mine, uint64_t& proven, uint64_t& work) {
    const uint64_t limit = work + share;
    uint64_t end = before;
    const Buffers sub = cut_to_window(b, rows, 0, UINT64_MAX);
    const SearchCosts costs = search_costs(sub);  // for the passes and the search below
    const uint64_t pass = greedy_pass_cost(sub, costs, b.count(), pass_work, work);
    // Auto's greedy orders on the component alone: a whole trace's best
    // order is not every component's. Each while what is left of the
    // sections' whole budget (`passes_limit`; more than this component's
    // share: these passes are what most often wins) holds one.
    for (const auto& order :
         {order_by_live_peak(sub), order_by_size(sub), order_by_conflict_size(sub), order_by_lifetime(sub)})
        for (Fit fit : {Fit::Best, Fit::First}) {
            if (end <= capacity) return end;
            if (work + pass > passes_limit) break;
            const Placement g = place_greedy(sub, order, fit, end - 1);
            work += g.work + kGreedyUnitsPerStep * 2 * rows.size();
            if (!g.abandoned && g.end < end) {
                mine = g.offset;
                end = g.end;
            }
        }
    if (end <= capacity || work >= limit) return end;
    const CanonicalInstance instance(sub);
    work += costs.build;
    // The target first, with three quarters of the share: any placement
    // under it will do.
    PreorderRace race(instance);
    std::vector<uint64_t> found;
    uint64_t spent = 0;
    const Outcome r = race.solve(capacity, (limit - std::min(limit, work)) / 4 * 3, found, spent);
    work += spent;
    if (r == Outcome::Found && end_of(sub, instance.active, found) <= capacity) {
        mine = found;
        return end_of(sub, instance.active, found);
    }
    if (r != Outcome::Infeasible || work >= limit) return end;
    // Proven above the target, so is the whole: the component's optimum is
    // sought with the rest of its share.
    proven = std::max(proven, capacity + 1);
    Placement incumbent;
    incumbent.offset.resize(rows.size());
    for (size_t k = 0; k < rows.size(); ++k) incumbent.offset[k] = end < before ? mine[k] : offset[rows[k]];
    incumbent.end = end;
    const Placement p = place_optimal(sub, limit - work, 0, &incumbent);
    work += p.work;
    proven = std::max(proven, p.proven_bound);
    if (!p.abandoned && p.end < end) {
        mine = p.offset;
        end = p.end;
    }
    return end;
}

}  // namespace

Placement place_by_sections(const Buffers& b, const Placement& start, uint64_t capacity, uint64_t work_budget,
                            SectionSizes sizes, uint64_t pass_work, const WholePass& live_peak_pass) {
    Placement out;
    out.abandoned = true;
    if (b.has_partners() || b.count() == 0) return out;  // partners may tie any two times together
    const uint64_t bound = peak_live_bytes(b);
    capacity = std::max(capacity, bound);
    const Components comps = find_components(b);
    uint64_t work = sort_work(b.count());
    std::vector<uint64_t> offset = start.offset;
    // The components above the target, in time order.
    std::vector<size_t> above;
    for (size_t c = 0; c < comps.ranges.size(); ++c) {
        const auto [i, j] = comps.ranges[c];
        uint64_t end = 0;
        for (size_t k = i; k < j; ++k) end = std::max(end, offset[comps.by_start[k]] + b.size[comps.by_start[k]]);
        if (end > capacity) above.push_back(c);
    }
    work += b.count();
    uint64_t proven = bound;
    // A shape's answer, row for row: the same rows shifted in time (a
    // training loop's iterations) are solved once. (An ordered map: lookups
    // only, no order of it reaches the answer.)
    std::map<ShapeKey, std::vector<uint64_t>> solved;
    for (size_t a = 0; a < above.size() && work < work_budget; ++a) {
        const auto [i, j] = comps.ranges[above[a]];
        const std::vector<uint32_t> rows(comps.by_start.begin() + i, comps.by_start.begin() + j);
        const uint64_t before = end_of(b, rows, offset);
        work += rows.size();
        if (before <= capacity) continue;  // the target rose past it (a component proven above it)
        ShapeKey key = shape_of(b, rows);
        work += 2 * rows.size() * (64 - static_cast<uint64_t>(__builtin_clzll(solved.size() | 1)));
        std::vector<uint64_t> mine(rows.size());
        uint64_t end = before;
        if (auto it = solved.find(key); it != solved.end()) {
            mine = it->second;
            end = 0;
            for (size_t k = 0; k < rows.size(); ++k) end = std::max(end, mine[k] + b.size[rows[k]]);
        } else {
            // Each component above the target gets an equal share of what is left.
            const uint64_t share = (work_budget - std::min(work, work_budget)) / (above.size() - a);
            try {
                if (rows.size() <= sizes.search_whole_up_to) {
                    end = solve_component(b, rows, offset, before, capacity, share, pass_work, work_budget, mine,
                                          proven, work);
                    // A proof holds for the whole: no later component need go lower.
                    capacity = std::max(capacity, proven);
                } else {
                    // Auto's most often best greedy order (live peak, best
                    // fit) on the component alone, when the sections' budget
                    // holds it (auto's is one pass's worth: a component of
                    // nearly every buffer is then not refused for the
                    // sections' own few steps), then the roll.
                    const Buffers sub = cut_to_window(b, rows, 0, UINT64_MAX);
                    if (greedy_pass_cost(sub, search_costs(sub), b.count(), pass_work, work) <= work_budget) {
                        // A component of every buffer: that pass is the
                        // caller's over the whole instance (the same order,
                        // ties by rank, and the same answer and work).
                        const bool whole = live_peak_pass && rows.size() == b.count();
                        const Placement g = whole ? live_peak_pass(before - 1)
                                                  : place_greedy(sub, order_by_live_peak(sub), Fit::Best, before - 1);
                        work += g.work + kGreedyUnitsPerStep * 2 * rows.size();
                        if (!g.abandoned && g.end < end) {
                            for (size_t k = 0; k < rows.size(); ++k) mine[k] = g.offset[whole ? rows[k] : k];
                            end = g.end;
                        }
                    }
                    std::vector<uint64_t> rolled = offset;
                    const uint64_t e = end <= capacity ? UINT64_MAX
                                       : roll_through(b, rows, sizes.section_rows, capacity, share, end - 1, rolled, work);
                    if (e < end) {
                        for (size_t k = 0; k < rows.size(); ++k) mine[k] = rolled[rows[k]];
                        end = e;
                    }
                }
            } catch (const PlacementOverflow&) {
                end = before;  // past 2^64-1 somewhere in the attempt: the component keeps its answer
            }
            if (end >= before)
                for (size_t k = 0; k < rows.size(); ++k) mine[k] = offset[rows[k]];
            solved.emplace(std::move(key), mine);
        }
        if (end < before)
            for (size_t k = 0; k < rows.size(); ++k) offset[rows[k]] = mine[k];
    }
    uint64_t end = 0;
    for (uint32_t x = 0; x < b.count(); ++x)
        if (b.searched(x)) end = std::max(end, offset[x] + b.size[x]);
    out.offset = std::move(offset);
    out.end = end;
    out.work = work;
    out.proven_bound = std::min(proven, end);
    out.optimal = end <= proven;
    out.method = "time_sections";
    out.abandoned = false;
    return out;
}

}  // namespace emel::memory
