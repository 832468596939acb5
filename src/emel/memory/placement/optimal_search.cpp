// optimal (docs/strategies.md §5): the exact search over a whole instance.
// Its parts, one file each: the canonical search deciding one capacity
// (canonical_search.hpp), the race of its preorders (preorder_race.hpp), the
// ladder of capacities (capacity_ladder.hpp/.cpp) and the neighbourhood
// searches (neighbourhood_search.cpp). This file prices an instance, and
// runs the ladder and then the neighbourhoods within a work budget.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "emel/memory/placement/canonical_search.hpp"
#include "emel/memory/placement/capacity_ladder.hpp"
#include "emel/memory/placement/neighbourhood_search.hpp"
#include "emel/memory/placement/preorder_race.hpp"
#include "emel/memory/placement/worker_pool.hpp"

namespace emel::memory {

using namespace exact;

SearchCosts search_costs(const Buffers& b) {
    // The searched buffers: live, holding bytes.
    std::vector<uint64_t> starts, ends;
    for (size_t x = 0; x < b.count(); ++x)
        if (b.searched(static_cast<uint32_t>(x))) {
            starts.push_back(b.lower[x]);
            ends.push_back(b.upper[x]);
        }
    std::sort(starts.begin(), starts.end());
    std::sort(ends.begin(), ends.end());
    SearchCosts c;
    // Pairs live together, each once: a buffer meets every buffer started
    // before it that has not ended by its start.
    for (size_t i = 0, e = 0; i < starts.size(); ++i) {
        while (e < ends.size() && ends[e] <= starts[i]) ++e;
        c.conflict_pairs += i - std::min(i, e);
    }
    // Building: two sorts of every buffer (by start; twins) and each conflict pair twice.
    c.build = 2 * b.count() * (64 - static_cast<uint64_t>(__builtin_clzll(b.count() | 1))) + 2 * c.conflict_pairs;
    // A descent: each of the race's searches places every searched buffer
    // once; each node sorts its partition's buffers and checks its sections
    // (one per distinct end): 4n + sections.
    const uint64_t n = starts.size();
    const uint64_t sections = static_cast<uint64_t>(std::unique(ends.begin(), ends.end()) - ends.begin());
    c.descent = 3 * n * (4 * n + sections);
    return c;
}

Placement place_within(const Buffers& b, uint64_t capacity, uint64_t work_budget) {
    Placement out;
    out.abandoned = true;
    if (b.count() > kSearchUpTo) return out;
    const SearchCosts costs = search_costs(b);
    if (costs.conflict_pairs > kSearchMaxConflicts || costs.build >= work_budget) return out;
    const CanonicalInstance instance(b);
    // Deep searches need a stack of their own (the race's): not this quick try.
    if (instance.active.size() > kCallerStackLevels) return out;
    // The preorders one after another, each with a third of the budget: the
    // first to place the buffers under the capacity answers. (Not the race:
    // any placement under the capacity will do, so the first found ends it.)
    CanonicalSearch search(instance);
    std::vector<uint64_t> offsets;
    const uint64_t share = (work_budget - costs.build) / CanonicalSearch::kHeuristics;
    Outcome r = Outcome::OutOfBudget;
    out.work = costs.build;
    for (int h = 0; h < CanonicalSearch::kHeuristics && r != Outcome::Found; ++h) {
        uint64_t spent = 0;
        r = search.run(capacity, h, share, nullptr, nullptr, offsets, spent);
        out.work += std::min(spent, share);
        if (r == Outcome::Infeasible) return out;  // proven: nothing fits under the capacity
    }
    if (r != Outcome::Found) return out;
    uint64_t end = 0;
    for (size_t x = 0; x < b.count(); ++x)
        if (b.lower[x] < b.upper[x]) end = std::max(end, offsets[x] + b.size[x]);
    if (end > capacity) return out;
    out.offset = std::move(offsets);
    out.end = end;
    out.method = "optimal_search";
    out.abandoned = false;
    return out;
}

Placement place_optimal(const Buffers& b, uint64_t work_budget, uint64_t target, const Placement* incumbent,
                        uint64_t neighbourhood_budget, bool full_packing) {
    // The best quick heuristic, or the caller's better answer: an upper bound and the fallback.
    Placement best = place_greedy(b, order_by_size(b), Fit::Best);
    uint64_t work = best.work;
    const uint64_t greedy_work = best.work;
    // No budget given: the default-budget policy (docs/strategies.md §4).
    if (work_budget == kPolicyBudget)
        work_budget = default_work_budget(b, std::min(best.end, incumbent ? incumbent->end : best.end),
                                          peak_live_bytes(b));
    if (incumbent && incumbent->end < best.end) {
        best.offset = incumbent->offset;
        best.end = incumbent->end;
        best.method = incumbent->method;
    }
    const uint64_t lo = peak_live_bytes(b);
    uint64_t hi = best.end;  // the optimum lies in [lo, hi]
    // Every instant full at the bound, or empty (cut from a full rectangle):
    // the full-packing search first, with most of the budget
    // (full_packing_share; a placement at the bound is optimal). Other
    // instances are refused at once, uncharged.
    if (full_packing && hi > lo && work < work_budget) {
        Placement p = place_full_packing(b, full_packing_share(work_budget - work));
        work += p.work;
        if (!p.abandoned && p.optimal) {
            p.work = work;
            return p;
        }
        if (!p.abandoned && p.end < best.end) {  // its partial tiling, completed: the incumbent
            best.offset = std::move(p.offset);
            best.end = p.end;
            best.method = p.method;
            hi = best.end;
        }
    }
    // The instance's conflict lists take memory, and building them time, in
    // the square of the buffers: larger instances are not searched.
    const SearchCosts costs = b.count() > kSearchUpTo ? SearchCosts{} : search_costs(b);
    const bool too_large = b.count() > kSearchUpTo || costs.conflict_pairs > kSearchMaxConflicts;
    // Too large to search whole: searched by time sections (sections.cpp),
    // aimed at the target or the bound; never larger than the greedy answer.
    if (too_large && hi > lo && work < work_budget) {
        // The greedy start's work: what a pass over b costs.
        Placement p = place_by_sections(b, best, std::max(target, lo), work_budget - work, {}, greedy_work);
        if (!p.abandoned && (p.end < best.end || p.optimal)) {
            if (p.end >= best.end) p.method = best.method;
            p.work += work;
            return p;
        }
        work += p.work;
    }
    // Building the instance is charged first; a budget it would exceed is not spent on it.
    if (too_large || work + costs.build > work_budget || hi <= lo) {
        best.optimal = hi <= lo;
        best.proven_bound = lo;
        if (!best.optimal)
            best.method = too_large ? "greedy_by_size (too many buffers to search)"
                                    : "greedy_by_size (budget too small to search)";
        best.work = work;
        return best;
    }
    const CanonicalInstance instance(b);
    work += costs.build;
    PreorderRace race(instance);
    CapacityLadder ladder(b, race, best, lo, target, 2 * costs.descent, work_budget);
    ladder.climb(work_budget - std::min(work_budget - work, neighbourhood_budget), work);  // the ladder's part
    if (ladder.lo() < ladder.hi() && work < work_budget) {
        // Deep neighbourhoods recurse as deep as the ladder's searches: on a stack as large.
        const size_t levels = instance.active.size();
        auto improve = [&] { improve_peak(instance, best, ladder.lo(), work_budget - work, work); };
        run_with_stack_for(levels, improve);  // no thread: the ladder's answer stands
        ladder.lower_hi(best.end);
        // What a fruitless round of neighbourhoods leaves goes back to the
        // ladder, whose attempts resume where they stopped (kept failures),
        // from a capacity placed again under the best they may have lowered.
        if (ladder.lo() < ladder.hi() && work < work_budget) {
            ladder.resume();
            ladder.climb(work_budget, work);
        }
    }
    best.proven_bound = ladder.lo();
    best.optimal = ladder.lo() >= ladder.hi();
    best.work = work;
    return best;
}

}  // namespace emel::memory
