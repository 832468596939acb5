// AssignLogicalSlots_v1 (docs/algorithm.md §4): optimal interval-graph colouring
// by a sweep over births, with in-place reuse of dying inputs.
#include <algorithm>
#include <functional>
#include <queue>

#include "emel/memory/core/checked_math.hpp"
#include "emel/memory/core/errors.hpp"
#include "emel/memory/core/plan.hpp"

namespace emel::memory {

namespace {

struct SlotSweep {
    const Graph& g;
    Plan& p;
    ArenaPlan& arena;
    const std::vector<std::vector<uint32_t>>& partners;  // must_not_alias, by root

    std::vector<uint32_t> holder;  // per slot
    std::priority_queue<uint32_t, std::vector<uint32_t>, std::greater<>> free_slots;
    using Active = std::pair<uint32_t, uint32_t>;  // (death, tensor)
    std::priority_queue<Active, std::vector<Active>, std::greater<>> active;

    void grow_slot(uint32_t s, uint32_t t) {
        const uint64_t a = p.effective_alignment[t];
        auto aligned = checked_align_up(g.size[t], a);
        if (!aligned)
            throw PlanError(ErrorCode::AllocationOverflow,
                            "tensor '" + g.tensor_id[t] + "' of " + std::to_string(g.size[t]) +
                                " bytes cannot be rounded up to its alignment " +
                                std::to_string(a) + " within 2^64-1",
                            g.tensor_id[t]);
        arena.slot_size[s] = std::max(arena.slot_size[s], *aligned);
        arena.slot_alignment[s] = std::max(arena.slot_alignment[s], a);
    }

    uint32_t new_slot(uint32_t t) {
        const auto s = static_cast<uint32_t>(arena.slot_size.size());
        arena.slot_size.push_back(0);
        arena.slot_alignment.push_back(1);
        arena.slot_first_holder.push_back(t);
        holder.push_back(t);
        return s;
    }

    void put(uint32_t t, uint32_t s) {
        p.slot[t] = s;
        holder[s] = t;
        grow_slot(s, t);
        active.emplace(p.live.death[t], t);
    }

    bool forbidden(uint32_t t, uint32_t s) const {
        for (uint32_t q : partners[t])
            if (p.slot[q] == s) return true;
        return false;
    }

    // The victim must still hold its slot, and t may not join a slot that
    // held one of its must_not_alias partners.
    uint32_t inplace_victim(uint32_t t) const {
        return choose_inplace_victim(g, p, t, [&](uint32_t i) {
            return p.slot[i] != kNone && holder[p.slot[i]] == i && !forbidden(t, p.slot[i]);
        });
    }

    void place(uint32_t t) {
        const uint32_t birth = p.live.birth[t];
        while (!active.empty() && active.top().first < birth) {
            const uint32_t h = active.top().second;
            active.pop();
            if (holder[p.slot[h]] == h) free_slots.push(p.slot[h]);
        }
        const uint32_t victim = inplace_victim(t);
        if (victim != kNone) {
            p.inplace_of[t] = victim;
            put(t, p.slot[victim]);
            return;
        }
        std::vector<uint32_t> skipped;
        uint32_t chosen = kNone;
        while (!free_slots.empty()) {
            const uint32_t s = free_slots.top();
            free_slots.pop();
            if (forbidden(t, s)) {
                skipped.push_back(s);
                continue;
            }
            chosen = s;
            break;
        }
        for (uint32_t s : skipped) free_slots.push(s);
        put(t, chosen == kNone ? new_slot(t) : chosen);
    }
};

}  // namespace

void assign_slots_tmmu(const Graph& g, Plan& p, bool persistent_only) {
    const uint32_t T = g.num_tensors;
    p.slot.assign(T, kNone);
    p.inplace_of.assign(T, kNone);

    std::vector<std::vector<uint32_t>> members(p.arenas.size());
    for (uint32_t t = 0; t < T; ++t)
        if (!g.is_view(t)) members[p.arena_of[t]].push_back(t);

    const auto partners = alias_partners(g, p);

    for (size_t ai = 0; ai < p.arenas.size(); ++ai) {
        ArenaPlan& arena = p.arenas[ai];
        std::vector<uint32_t>& ts = members[ai];
        SlotSweep sweep{g, p, arena, partners, {}, {}, {}};
        if (arena.persistent) {  // no reuse: one slot each, in id order
            std::sort(ts.begin(), ts.end(),
                      [&](uint32_t a, uint32_t b) { return g.id_rank[a] < g.id_rank[b]; });
            for (uint32_t t : ts) {
                const uint32_t s = sweep.new_slot(t);
                p.slot[t] = s;
                sweep.grow_slot(s, t);
            }
            continue;
        }
        if (persistent_only) continue;
        std::sort(ts.begin(), ts.end(), [&](uint32_t a, uint32_t b) {
            if (p.live.birth[a] != p.live.birth[b]) return p.live.birth[a] < p.live.birth[b];
            if (g.size[a] != g.size[b]) return g.size[a] > g.size[b];
            return g.id_rank[a] < g.id_rank[b];
        });
        for (uint32_t t : ts) sweep.place(t);
    }
}

}  // namespace emel::memory
