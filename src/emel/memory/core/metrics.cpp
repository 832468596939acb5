// Metrics per arena (docs/algorithm.md §7).
#include <algorithm>

#include "emel/memory/core/errors.hpp"
#include "emel/memory/core/plan.hpp"

namespace emel::memory {

namespace {

// 1 - A/B with each exact integer rounded to the nearest double first, the way
// the Python reference computes float(A) / float(B).
double one_minus_ratio(unsigned __int128 a, unsigned __int128 b) {
    if (b == 0) return 0.0;
    return 1.0 - static_cast<double>(a) / static_cast<double>(b);
}

}  // namespace

void compute_metrics(const Graph& g, Plan& p) {
    const uint32_t T = g.num_tensors;
    std::vector<std::vector<uint32_t>> members(p.arenas.size());
    for (uint32_t t = 0; t < T; ++t)
        if (!g.is_view(t)) members[p.arena_of[t]].push_back(t);

    for (size_t ai = 0; ai < p.arenas.size(); ++ai) {
        ArenaPlan& a = p.arenas[ai];
        const std::vector<uint32_t>& ts = members[ai];
        a.storage_tensors = ts.size();
        const uint64_t slots = a.slot_size.size();
        a.memory_reuse_ratio = ts.empty() || !a.has_slots
                                   ? 0.0
                                   : 1.0 - static_cast<double>(slots) / static_cast<double>(ts.size());

        // Live bytes and live count at every birth step (the maxima are there).
        // An in-place taker shares its victim's bytes while both are live, so
        // the bound counts the pair's smaller size once less over those steps
        // (shared_from/shared_to); the peak of live bytes counts both.
        std::vector<std::pair<uint64_t, uint32_t>> births, ends, pairs;
        std::vector<std::pair<uint64_t, uint64_t>> shared_from, shared_to;  // (step, bytes)
        unsigned __int128 used = 0, reserved = 0;
        for (uint32_t t : ts) {
            const uint32_t b = p.live.birth[t], d = p.live.death[t];
            births.emplace_back(b, t);
            ends.emplace_back(uint64_t{d} + 1, t);
            if (!p.inplace_of.empty() && p.inplace_of[t] != kNone) {
                pairs.emplace_back(b, t);
                const uint32_t v = p.inplace_of[t];
                const uint64_t from = std::max(b, p.live.birth[v]);
                const uint64_t to = uint64_t{std::min(d, p.live.death[v])} + 1;
                if (from < to) {
                    const uint64_t bytes = std::min(g.size[t], g.size[v]);
                    shared_from.emplace_back(from, bytes);
                    shared_to.emplace_back(to, bytes);
                }
            }
            const unsigned __int128 len = d - b + 1;
            used += static_cast<unsigned __int128>(g.size[t]) * len;
            reserved += static_cast<unsigned __int128>(p.reserved[t]) * len;
        }
        a.internal_fragmentation_ratio = one_minus_ratio(used, reserved);
        std::sort(births.begin(), births.end());
        std::sort(ends.begin(), ends.end());
        std::sort(pairs.begin(), pairs.end());
        std::sort(shared_from.begin(), shared_from.end());
        std::sort(shared_to.begin(), shared_to.end());
        unsigned __int128 live_bytes = 0, best_bytes = 0, shared = 0, best_group_bytes = 0;
        uint64_t live_count = 0, best_count = 0;
        size_t bi = 0, ei = 0, pi = 0, si = 0, sj = 0;
        while (bi < births.size()) {
            const uint64_t s = births[bi].first;
            for (; bi < births.size() && births[bi].first == s; ++bi) {
                live_bytes += g.size[births[bi].second];
                ++live_count;
            }
            for (; ei < ends.size() && ends[ei].first <= s; ++ei) {
                live_bytes -= g.size[ends[ei].second];
                --live_count;
            }
            uint64_t pairs_here = 0;
            for (; pi < pairs.size() && pairs[pi].first <= s; ++pi)
                if (pairs[pi].first == s) ++pairs_here;
            for (; si < shared_from.size() && shared_from[si].first <= s; ++si) shared += shared_from[si].second;
            for (; sj < shared_to.size() && shared_to[sj].first <= s; ++sj) shared -= shared_to[sj].second;
            best_bytes = std::max(best_bytes, live_bytes);
            best_group_bytes = std::max(best_group_bytes, live_bytes - shared);
            best_count = std::max(best_count, live_count - pairs_here);
        }
        // In-place pairs count twice, so the peak can pass the arena size; like
        // every reported size it must still fit in 64 bits.
        if (best_bytes > UINT64_MAX)
            throw PlanError(ErrorCode::AllocationOverflow,
                            "arena '" + a.name + "': live bytes at the peak exceed 2^64-1", {}, {},
                            a.name);
        a.peak_live_bytes = static_cast<uint64_t>(best_bytes);
        a.inplace_aware_bound = static_cast<uint64_t>(best_group_bytes);
        a.max_live = best_count;
    }
    unsigned __int128 total = 0, total_bound = 0;
    for (const ArenaPlan& a : p.arenas) {
        total += a.size;
        total_bound += a.inplace_aware_bound;
    }
    if (total > UINT64_MAX)
        throw PlanError(ErrorCode::AllocationOverflow,
                        "total_bytes (the sum of the arena sizes) exceeds 2^64-1");
    if (total_bound > UINT64_MAX)
        throw PlanError(ErrorCode::AllocationOverflow,
                        "total_lower_bound (the sum of the lower bounds) exceeds 2^64-1");
}

}  // namespace emel::memory
