// The offset strategies (docs/strategies.md): every reusing arena's buffers
// are placed by greedy_by_size, best_fit, auto or optimal. Persistent arenas
// keep their sequential slots (slots.cpp).
#include "emel/memory/checked_math.hpp"
#include "emel/memory/errors.hpp"
#include "emel/memory/plan.hpp"

namespace emel::memory {

void assign_offsets(const Graph& g, const PlanOptions& opt, Plan& p) {
    const uint32_t T = g.num_tensors;
    std::vector<std::vector<uint32_t>> members(p.arenas.size());
    for (uint32_t t = 0; t < T; ++t)
        if (!g.is_view(t)) members[p.arena_of[t]].push_back(t);
    const auto partners = alias_partners(g, p);
    for (uint32_t ai = 0; ai < p.arenas.size(); ++ai) {
        ArenaPlan& arena = p.arenas[ai];
        if (arena.persistent) continue;
        arena.has_slots = false;
        const ArenaBuffers ab = build_buffers(g, p, members[ai], partners);
        const Buffers& b = ab.buffers;
        Placement placed;
        switch (opt.strategy) {
            case Strategy::GreedyBySize: placed = place_greedy(b, order_by_size(b), opt.fit); break;
            case Strategy::BestFit: placed = place_best_fit(b); break;
            case Strategy::Auto: placed = place_auto(b, opt.work_budget); break;
            case Strategy::Optimal: placed = place_optimal(b, opt.work_budget); break;
            case Strategy::Tmmu: placed = place_slots(b); break;  // not reached: tmmu uses slots
        }
        auto size = checked_align_up(placed.end, arena.alignment);
        if (!size)
            throw PlanError(ErrorCode::AllocationOverflow,
                            "arena '" + arena.name + "' would exceed 2^64-1 bytes", {}, {},
                            arena.name);
        arena.size = *size;
        arena.method = placed.method;
        arena.work = placed.work;
        arena.optimal = placed.optimal;
        arena.proven_bound = placed.lower_bound;
        for (uint32_t t : members[ai]) {
            const uint32_t k = ab.group_of[t];
            p.offset[t] = placed.offset[k];
            p.reserved[t] = b.size[k];
        }
    }
}

}  // namespace emel::memory
