// The offset strategies (docs/strategies.md): every reusing arena's buffers
// are placed by greedy_by_size, best_fit, auto or optimal. Persistent arenas
// keep their sequential slots (slots.cpp).
#include "emel/memory/core/checked_math.hpp"
#include "emel/memory/core/errors.hpp"
#include "emel/memory/core/plan.hpp"
#include "emel/memory/placement/buffers.hpp"

namespace emel::memory {

Placement place_by(const Buffers& b, Strategy s, Fit fit, uint64_t work_budget, uint64_t target) {
    switch (s) {
        case Strategy::Tmmu: return place_slots(b);
        case Strategy::GreedyBySize: return place_greedy(b, order_by_size(b), fit);
        case Strategy::BestFit: return place_online_best_fit(b);
        case Strategy::Auto: return place_auto(b, work_budget, target);
        case Strategy::Optimal: return place_optimal(b, work_budget, target, nullptr, 0, /*full_packing=*/true);
    }
    return place_slots(b);
}

RowPlacement place_rows(std::vector<uint64_t> lower, std::vector<uint64_t> upper,
                        std::vector<uint64_t> size, uint64_t alignment, Strategy s, Fit fit,
                        uint64_t work_budget, uint64_t target) {
    if (!is_power_of_two(alignment))
        throw PlanError(ErrorCode::AlignmentViolation,
                        "alignment must be a power of two, got " + std::to_string(alignment));
    const size_t n = size.size();
    // A row with lower == upper is never live (docs/strategies.md §6): it holds
    // no bytes at any instant, so it gets offset 0 and counts toward neither the
    // end nor the lower bound. Only the live rows are placed.
    std::vector<uint32_t> live_rows;
    live_rows.reserve(n);
    for (size_t x = 0; x < n; ++x) {
        if (lower[x] > upper[x])
            throw PlanError(ErrorCode::InvalidIrShapes,
                            "row " + std::to_string(x) + ": lower " + std::to_string(lower[x]) +
                                " > upper " + std::to_string(upper[x]),
                            std::to_string(x));
        if (lower[x] == upper[x]) continue;  // never live: its size is never rounded up
        if (!checked_align_up(size[x], alignment))
            throw PlanError(ErrorCode::AllocationOverflow,
                            "row " + std::to_string(x) + ": size overflows when aligned",
                            std::to_string(x));
        live_rows.push_back(static_cast<uint32_t>(x));
    }
    Buffers b;
    const size_t m = live_rows.size();
    const bool all_live = m == n;  // the rows are the buffers: taken as they are, not copied
    b.alignment.assign(m, alignment);
    b.rank.resize(m);
    if (all_live) {
        b.lower = std::move(lower);
        b.upper = std::move(upper);
        b.size = std::move(size);
        if (alignment > 1)
            for (uint64_t& s : b.size) s = *checked_align_up(s, alignment);
    } else {
        b.lower.resize(m);
        b.upper.resize(m);
        b.size.resize(m);
    }
    for (size_t k = 0; k < m; ++k) {
        b.rank[k] = static_cast<uint32_t>(k);  // row order is id order
        if (all_live) continue;
        const uint32_t x = live_rows[k];
        b.lower[k] = lower[x];
        b.upper[k] = upper[x];
        b.size[k] = *checked_align_up(size[x], alignment);
    }
    RowPlacement out;
    try {
        out.placed = place_by(b, s, fit, work_budget, target);
    } catch (const PlacementOverflow& e) {
        const std::string row = std::to_string(live_rows[e.buffer]);
        throw PlanError(ErrorCode::AllocationOverflow,
                        "row " + row + ": placing it passes 2^64-1 bytes", row);
    }
    if (!all_live) {
        std::vector<uint64_t> offsets(n, 0);
        for (size_t k = 0; k < m; ++k) offsets[live_rows[k]] = out.placed.offset[k];
        out.placed.offset = std::move(offsets);
    }
    auto end = checked_align_up(out.placed.end, alignment);
    if (!end) throw PlanError(ErrorCode::AllocationOverflow, "arena exceeds 2^64-1 bytes");
    out.arena_size = *end;
    out.peak_live_bytes = peak_live_bytes(b);
    return out;
}

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
        const Placement placed = [&] {
            try {
                return place_by(b, opt.strategy, opt.fit, opt.work_budget, 0);
            } catch (const PlacementOverflow& e) {
                // The buffer's first member names it, as everywhere in the strategies.
                const std::string& who = g.tensor_id[ab.first_member[e.buffer]];
                throw PlanError(ErrorCode::AllocationOverflow,
                                "arena '" + arena.name + "' would exceed 2^64-1 bytes placing tensor '" +
                                    who + "'",
                                who, {}, arena.name);
            }
        }();
        auto size = checked_align_up(placed.end, arena.alignment);
        if (!size)
            throw PlanError(ErrorCode::AllocationOverflow,
                            "arena '" + arena.name + "' would exceed 2^64-1 bytes", {}, {},
                            arena.name);
        arena.size = *size;
        arena.method = placed.method;
        arena.work = placed.work;
        arena.optimal = placed.optimal;
        arena.proven_bound = placed.proven_bound;
        for (uint32_t t : members[ai]) {
            const uint32_t k = ab.group_of[t];
            p.offset[t] = placed.offset[k];
            p.reserved[t] = b.size[k];
        }
    }
}

}  // namespace emel::memory
