// MapToVirtualAddresses_v1 (docs/algorithm.md §5): slots become aligned
// prefix-sum offsets; views sit inside their root.
#include "emel/memory/checked_math.hpp"
#include "emel/memory/errors.hpp"
#include "emel/memory/plan.hpp"

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
    for (ArenaPlan& a : p.arenas) {
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
        if (a.has_capacity && a.size > a.capacity) {
            size_t k = 0;
            while (k < n && a.slot_offset[k] + a.slot_size[k] <= a.capacity) ++k;
            const std::string who = k < n ? g.tensor_id[a.slot_first_holder[k]] : std::string();
            throw PlanError(ErrorCode::ArenaTooSmall,
                            "arena '" + a.name + "' needs " + std::to_string(a.size) +
                                " bytes but its capacity_bytes is " + std::to_string(a.capacity) +
                                (who.empty() ? std::string()
                                             : "; tensor '" + who + "' is the first past it"),
                            who, {}, a.name);
        }
    }
    const uint32_t T = g.num_tensors;
    p.offset.assign(T, 0);
    for (uint32_t t = 0; t < T; ++t)
        if (!g.is_view(t)) p.offset[t] = p.arenas[p.arena_of[t]].slot_offset[p.slot[t]];
    for (uint32_t t = 0; t < T; ++t)  // inside the root, so no overflow is possible
        if (g.is_view(t)) p.offset[t] = p.offset[g.root[t]] + g.root_offset[t];
}

}  // namespace emel::memory
