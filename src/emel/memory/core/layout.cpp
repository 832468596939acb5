// MapToVirtualAddresses_v1 (docs/algorithm.md §5): slots become aligned
// prefix-sum offsets; views sit inside their root.
#include "emel/memory/core/checked_math.hpp"
#include "emel/memory/core/errors.hpp"
#include "emel/memory/core/plan.hpp"

namespace emel::memory {

namespace {

[[noreturn]] void overflow(const Graph& g, const ArenaPlan& a, uint32_t t) {
    throw PlanError(ErrorCode::AllocationOverflow,
                    "arena '" + a.name + "' would exceed 2^64-1 bytes at the slot of tensor '" +
                        g.tensor_id[t] + "'",
                    g.tensor_id[t], {}, a.name);
}

}  // namespace

void map_to_addresses(const Graph& g, Plan& p) {
    const uint32_t T = g.num_tensors;
    for (ArenaPlan& a : p.arenas) {
        if (!a.has_slots) continue;  // placed by an offset strategy
        const size_t n = a.slot_size.size();
        a.slot_offset.assign(n, 0);
        uint64_t end = 0;
        for (size_t k = 0; k < n; ++k) {
            if (k > 0) {
                auto off = checked_align_up(end, a.slot_alignment[k]);
                if (!off) overflow(g, a, a.slot_first_holder[k]);
                a.slot_offset[k] = *off;
            }
            auto e = checked_add(a.slot_offset[k], a.slot_size[k]);
            if (!e) overflow(g, a, a.slot_first_holder[k]);
            end = *e;
        }
        auto size = checked_align_up(end, a.alignment);
        if (!size) overflow(g, a, a.slot_first_holder[n - 1]);
        a.size = *size;
    }
    for (uint32_t t = 0; t < T; ++t)
        if (!g.is_view(t) && p.slot[t] != kNone) {
            const ArenaPlan& a = p.arenas[p.arena_of[t]];
            p.offset[t] = a.slot_offset[p.slot[t]];
            p.reserved[t] = a.slot_size[p.slot[t]];
        }
    for (uint32_t ai = 0; ai < p.arenas.size(); ++ai) {
        const ArenaPlan& a = p.arenas[ai];
        if (!a.has_capacity || a.size <= a.capacity) continue;
        // Name the tensor that starts lowest among those ending past the capacity
        // (for slots: the first holder of the first such slot).
        uint32_t who = kNone;
        if (a.has_slots) {
            size_t k = 0;
            while (k < a.slot_size.size() && a.slot_offset[k] + a.slot_size[k] <= a.capacity) ++k;
            if (k < a.slot_size.size()) who = a.slot_first_holder[k];
        } else {
            for (uint32_t t = 0; t < T; ++t) {
                if (g.is_view(t) || p.arena_of[t] != ai || p.offset[t] + p.reserved[t] <= a.capacity)
                    continue;
                if (who == kNone || p.offset[t] < p.offset[who] ||
                    (p.offset[t] == p.offset[who] && g.id_rank[t] < g.id_rank[who]))
                    who = t;
            }
        }
        const std::string name = who == kNone ? std::string() : g.tensor_id[who];
        throw PlanError(ErrorCode::ArenaTooSmall,
                        "arena '" + a.name + "' needs " + std::to_string(a.size) +
                            " bytes but its capacity_bytes is " + std::to_string(a.capacity) +
                            (name.empty() ? std::string() : "; tensor '" + name + "' is the first past it"),
                        name, {}, a.name);
    }
    for (uint32_t t = 0; t < T; ++t)  // inside the root, so no overflow is possible
        if (g.is_view(t)) p.offset[t] = p.offset[g.root[t]] + g.root_offset[t];
}

}  // namespace emel::memory
