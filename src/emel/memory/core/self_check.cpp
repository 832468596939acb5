// The final self-check (docs/algorithm.md §6), run on every plan whatever the
// strategy. It trusts nothing the strategy computed except the plan arrays, so
// a corrupted plan is caught: ADDRESS_COLLISION is unreachable otherwise.
#include <algorithm>
#include <map>
#include <queue>

#include "emel/memory/core/errors.hpp"
#include "emel/memory/core/plan.hpp"

namespace emel::memory {

namespace {

[[noreturn]] void collision(const Graph& g, const ArenaPlan& a, uint32_t x, uint32_t y,
                            const Plan& p, const char* why) {
    throw PlanError(ErrorCode::AddressCollision,
                    "tensors '" + g.tensor_id[x] + "' [" + std::to_string(p.offset[x]) + ", " +
                        std::to_string(p.offset[x] + g.size[x]) + ") and '" + g.tensor_id[y] +
                        "' [" + std::to_string(p.offset[y]) + ", " +
                        std::to_string(p.offset[y] + g.size[y]) + ") in arena '" + a.name +
                        "' " + why,
                    g.tensor_id[x], {}, a.name);
}

// A legal in-place pair: t was placed over victim v, which dies as t is born
// at the node that reads v, and v is at least as large.
bool legal_inplace(const Graph& g, const Plan& p, uint32_t t, uint32_t v) {
    if (v == kNone || g.is_view(v) || p.arena_of[v] != p.arena_of[t]) return false;
    if (p.offset[v] != p.offset[t] || g.size[v] < g.size[t]) return false;
    const uint32_t s = g.producer_step[t];
    if (s == kNone || p.live.birth[t] != s || p.live.death[v] != s) return false;
    for (uint32_t k = g.step_inputs_start[s]; k < g.step_inputs_start[s + 1]; ++k)
        if (g.step_inputs[k] == v) return true;
    return false;
}

}  // namespace

void self_check(const Graph& g, const Plan& p) {
    const uint32_t T = g.num_tensors;
    for (uint32_t t = 0; t < T; ++t) {
        const ArenaPlan& a = p.arenas[p.arena_of[t]];
        const uint64_t align = g.is_view(t) ? g.alignment[t] : p.effective_alignment[t];
        if (p.offset[t] % align != 0)
            throw PlanError(ErrorCode::AlignmentViolation,
                            "tensor '" + g.tensor_id[t] + "' at offset " +
                                std::to_string(p.offset[t]) + " of arena '" + a.name +
                                "' is not aligned to " + std::to_string(align),
                            g.tensor_id[t], {}, a.name);
    }
    for (uint32_t t = 0; t < T; ++t) {
        const ArenaPlan& a = p.arenas[p.arena_of[t]];
        if (p.offset[t] > a.size || g.size[t] > a.size - p.offset[t])
            throw PlanError(ErrorCode::AddressCollision,
                            "tensor '" + g.tensor_id[t] + "' at offset " +
                                std::to_string(p.offset[t]) + " (" + std::to_string(g.size[t]) +
                                " bytes) runs past the end of arena '" + a.name + "' (" +
                                std::to_string(a.size) + " bytes)",
                            g.tensor_id[t], {}, a.name);
        if (g.is_view(t)) {  // a view sits where its root puts it
            const uint32_t r = g.root[t];
            if (p.offset[r] > UINT64_MAX - g.root_offset[t] ||
                p.offset[t] != p.offset[r] + g.root_offset[t])
                throw PlanError(ErrorCode::AddressCollision,
                                "view '" + g.tensor_id[t] + "' is at offset " +
                                    std::to_string(p.offset[t]) + " of arena '" + a.name +
                                    "', but its root '" + g.tensor_id[r] + "' puts it at " +
                                    std::to_string(p.offset[r]) + " + " +
                                    std::to_string(g.root_offset[t]),
                                g.tensor_id[t], {}, a.name);
        }
    }

    // Sweep births in order; `live` holds disjoint byte ranges keyed by start.
    // An in-place taker inherits its victim's range when the victim leaves.
    std::vector<std::vector<uint32_t>> members(p.arenas.size());
    for (uint32_t t = 0; t < T; ++t)
        if (!g.is_view(t) && g.size[t] > 0) members[p.arena_of[t]].push_back(t);
    struct Range { uint64_t end; uint32_t owner; };
    for (size_t ai = 0; ai < p.arenas.size(); ++ai) {
        const ArenaPlan& a = p.arenas[ai];
        std::vector<uint32_t>& ts = members[ai];
        // Births in order; at one step, in-place takers after everything else, so
        // a taker's victim (born earlier, or unproduced and born at 0 too) is
        // already in `live` when the taker arrives.
        auto is_taker = [&](uint32_t x) { return !p.inplace_of.empty() && p.inplace_of[x] != kNone; };
        std::sort(ts.begin(), ts.end(), [&](uint32_t x, uint32_t y) {
            if (p.live.birth[x] != p.live.birth[y]) return p.live.birth[x] < p.live.birth[y];
            if (is_taker(x) != is_taker(y)) return !is_taker(x);
            return x < y;
        });
        std::map<uint64_t, Range> live;
        using Exit = std::pair<uint32_t, uint32_t>;  // (death, tensor)
        std::priority_queue<Exit, std::vector<Exit>, std::greater<>> exits;
        std::vector<uint32_t> heir(T, kNone);  // victim -> taker waiting for its range
        for (uint32_t t : ts) {
            const uint32_t birth = p.live.birth[t];
            while (!exits.empty() && exits.top().first < birth) {
                const uint32_t x = exits.top().second;
                exits.pop();
                auto it = live.find(p.offset[x]);
                if (it == live.end() || it->second.owner != x) continue;
                live.erase(it);
                const uint32_t h = heir[x];
                if (h != kNone && p.live.death[h] > p.live.death[x]) {
                    live.emplace(p.offset[h], Range{p.offset[h] + g.size[h], h});
                    exits.emplace(p.live.death[h], h);
                }
            }
            const uint32_t v = p.inplace_of.empty() ? kNone : p.inplace_of[t];
            if (v != kNone && legal_inplace(g, p, t, v)) {
                auto it = live.find(p.offset[v]);
                // One heir per victim: a second claimant is checked like anyone else.
                if (it != live.end() && it->second.owner == v && heir[v] == kNone) {
                    heir[v] = t;  // t lies inside v's range, which is already checked
                    continue;
                }
            }
            const uint64_t lo = p.offset[t], hi = lo + g.size[t];
            auto next = live.lower_bound(lo);
            if (next != live.end() && next->first < hi)
                collision(g, a, t, next->second.owner, p, "overlap while both are live");
            if (next != live.begin()) {
                auto prev = std::prev(next);
                if (prev->second.end > lo)
                    collision(g, a, t, prev->second.owner, p, "overlap while both are live");
            }
            live.emplace(lo, Range{hi, t});
            exits.emplace(p.live.death[t], t);
        }
    }

    for (const auto& [x, y] : g.must_not_alias) {
        if (p.arena_of[x] != p.arena_of[y] || g.size[x] == 0 || g.size[y] == 0) continue;
        if (p.offset[x] < p.offset[y] + g.size[y] && p.offset[y] < p.offset[x] + g.size[x])
            collision(g, p.arenas[p.arena_of[x]], x, y, p, "overlap but must never alias");
    }
}

}  // namespace emel::memory
