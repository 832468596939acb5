// Arena classes (docs/algorithm.md §3): which arena each tensor lives in, each
// arena's configuration, and every storage tensor's effective alignment.
#include <algorithm>
#include <set>

#include "emel/memory/core/checked_math.hpp"
#include "emel/memory/core/errors.hpp"
#include "emel/memory/core/plan.hpp"

namespace emel::memory {

void assign_arenas(const Graph& g, const PlanOptions& opt, Plan& p) {
    const uint32_t T = g.num_tensors;
    std::vector<std::string> by_role(6);
    for (int r = 0; r < 6; ++r) {
        const std::string& mapped = opt.role_arenas[r];
        by_role[r] = mapped.empty() ? default_arena_for(static_cast<Role>(r)) : mapped;
    }
    auto arena_name = [&](uint32_t t) -> const std::string& {
        if (!g.arena[t].empty()) return g.arena[t];
        return by_role[static_cast<int>(g.role[t])];
    };
    std::set<std::string> names;
    for (uint32_t t = 0; t < T; ++t)
        if (!g.is_view(t)) names.insert(arena_name(t));
    for (const auto& [name, cfg] : opt.arenas) names.insert(name);

    std::map<std::string, uint32_t> index;
    for (const auto& name : names) {
        ArenaPlan a;
        a.name = name;
        a.persistent = (name == "parameters");
        a.alignment = opt.default_alignment;
        auto it = opt.arenas.find(name);
        if (it != opt.arenas.end()) {
            const ArenaConfig& c = it->second;
            if (c.has_alignment) a.alignment = c.alignment_bytes;
            if (c.has_page_size) a.page_size = c.page_size;
            if (c.has_persistent) a.persistent = c.persistent;
            a.has_capacity = c.has_capacity;
            a.capacity = c.capacity_bytes;
        }
        index.emplace(name, static_cast<uint32_t>(p.arenas.size()));
        p.arenas.push_back(std::move(a));
    }
    p.arena_of.assign(T, kNone);
    for (uint32_t t = 0; t < T; ++t)
        if (!g.is_view(t)) p.arena_of[t] = index.at(arena_name(t));
    for (uint32_t t = 0; t < T; ++t)
        if (g.is_view(t)) p.arena_of[t] = p.arena_of[g.root[t]];

    // a(t) = max(arena alignment, own alignment, alignment of its views).
    p.effective_alignment.assign(T, 1);
    for (uint32_t t = 0; t < T; ++t) {
        const uint32_t r = g.root[t];
        uint64_t& a = p.effective_alignment[r];
        a = std::max<uint64_t>({a, g.alignment[t], p.arenas[p.arena_of[r]].alignment});
    }
    // Every aligned size must fit in 64 bits: checked here, in document order,
    // so the tensor named does not depend on the strategy's placement order.
    for (uint32_t t = 0; t < T; ++t)
        if (!g.is_view(t) && !checked_align_up(g.size[t], p.effective_alignment[t]))
            throw PlanError(ErrorCode::AllocationOverflow,
                            "tensor '" + g.tensor_id[t] + "' of " + std::to_string(g.size[t]) +
                                " bytes cannot be rounded up to its alignment " +
                                std::to_string(p.effective_alignment[t]) + " within 2^64-1",
                            g.tensor_id[t]);
}

std::vector<std::vector<uint32_t>> alias_partners(const Graph& g, const Plan& p) {
    std::vector<std::vector<uint32_t>> partners(g.num_tensors);
    for (const auto& [a, b] : g.must_not_alias) {
        const uint32_t ra = g.root[a], rb = g.root[b];
        if (ra == rb || p.arena_of[ra] != p.arena_of[rb]) continue;
        partners[ra].push_back(rb);
        partners[rb].push_back(ra);
    }
    return partners;
}

}  // namespace emel::memory
