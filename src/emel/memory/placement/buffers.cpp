// Buffers for the offset strategies (docs/strategies.md §1): an arena's storage
// tensors merged into in-place groups, each group one buffer.
#include <algorithm>
#include <numeric>

#include "emel/memory/core/checked_math.hpp"
#include "emel/memory/core/errors.hpp"
#include "emel/memory/core/plan.hpp"
#include "emel/memory/placement/buffers.hpp"

namespace emel::memory {

ArenaBuffers build_buffers(const Graph& g, Plan& p, const std::vector<uint32_t>& members,
                           const std::vector<std::vector<uint32_t>>& partners) {
    // The tmmu sweep order.
    std::vector<uint32_t> ts = members;
    std::sort(ts.begin(), ts.end(), [&](uint32_t a, uint32_t b) {
        if (p.live.birth[a] != p.live.birth[b]) return p.live.birth[a] < p.live.birth[b];
        if (g.size[a] != g.size[b]) return g.size[a] > g.size[b];
        return g.id_rank[a] < g.id_rank[b];
    });
    ArenaBuffers out;
    std::vector<uint32_t>& group = out.group_of;  // per tensor (global index)
    group.assign(g.num_tensors, kNone);
    std::vector<uint32_t> last_member;             // per group
    std::vector<std::vector<uint32_t>> group_members;
    std::vector<uint8_t> seen(g.num_tensors, 0);
    for (uint32_t t : ts) {
        // The victim must already be placed and still end its group, and no
        // member of that group may be a must_not_alias partner of t.
        const uint32_t victim = choose_inplace_victim(g, p, t, [&](uint32_t i) {
            if (!seen[i] || last_member[group[i]] != i) return false;
            for (uint32_t q : partners[t])
                if (group[q] == group[i]) return false;
            return true;
        });
        seen[t] = 1;
        if (victim != kNone) {
            group[t] = group[victim];
            last_member[group[t]] = t;
            group_members[group[t]].push_back(t);
            p.inplace_of[t] = victim;
        } else {
            group[t] = static_cast<uint32_t>(group_members.size());
            last_member.push_back(t);
            group_members.push_back({t});
        }
    }
    // One buffer per group.
    Buffers& b = out.buffers;
    const size_t n = group_members.size();
    b.lower.resize(n);
    b.upper.resize(n);
    b.size.assign(n, 0);
    b.alignment.assign(n, 1);
    out.first_member.resize(n);
    for (size_t k = 0; k < n; ++k) {
        const auto& ms = group_members[k];
        out.first_member[k] = ms.front();
        b.lower[k] = p.live.birth[ms.front()];
        b.upper[k] = uint64_t{p.live.death[ms.back()]} + 1;
        for (uint32_t t : ms) {
            const uint64_t a = p.effective_alignment[t];
            auto aligned = checked_align_up(g.size[t], a);
            if (!aligned)
                throw PlanError(ErrorCode::AllocationOverflow,
                                "tensor '" + g.tensor_id[t] + "' of " + std::to_string(g.size[t]) +
                                    " bytes cannot be rounded up to its alignment within 2^64-1",
                                g.tensor_id[t]);
            b.size[k] = std::max(b.size[k], *aligned);
            b.alignment[k] = std::max(b.alignment[k], a);
        }
    }
    // Id order of the groups: their first members' ids.
    std::vector<uint32_t> by_id(n);
    std::iota(by_id.begin(), by_id.end(), 0u);
    std::sort(by_id.begin(), by_id.end(), [&](uint32_t x, uint32_t y) {
        return g.id_rank[out.first_member[x]] < g.id_rank[out.first_member[y]];
    });
    b.rank.resize(n);
    for (size_t k = 0; k < n; ++k) b.rank[by_id[k]] = static_cast<uint32_t>(k);
    bool any_partner = false;
    for (uint32_t t : members) any_partner = any_partner || !partners[t].empty();
    if (any_partner) {
        b.partners.assign(n, {});
        for (uint32_t t : members)
            for (uint32_t q : partners[t])
                if (group[q] != kNone && group[q] != group[t]) b.partners[group[t]].push_back(group[q]);
        for (auto& list : b.partners) {
            std::sort(list.begin(), list.end());
            list.erase(std::unique(list.begin(), list.end()), list.end());
        }
    }
    return out;
}

}  // namespace emel::memory
