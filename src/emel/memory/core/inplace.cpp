// The in-place rule shared by every strategy (docs/algorithm.md §4 step 2):
// which dying input of its producing node a `can_inplace` output may take over.
#include "emel/memory/core/plan.hpp"

namespace emel::memory {

uint32_t choose_inplace_victim(const Graph& g, const Plan& p, uint32_t t,
                               const std::function<bool(uint32_t)>& still_free) {
    if (!g.can_inplace[t] || g.producer_step[t] == kNone || is_persistent_role(g.role[t]))
        return kNone;
    const uint32_t s = g.producer_step[t];
    const uint32_t in0 = g.step_inputs_start[s], in1 = g.step_inputs_start[s + 1];
    const uint32_t out0 = g.step_outputs_start[s], out1 = g.step_outputs_start[s + 1];
    // "No other live alias": no view of i is read or written by this node.
    auto aliased_here = [&](uint32_t i) {
        for (uint32_t k = in0; k < in1; ++k)
            if (g.is_view(g.step_inputs[k]) && g.root[g.step_inputs[k]] == i) return true;
        for (uint32_t k = out0; k < out1; ++k)
            if (g.is_view(g.step_outputs[k]) && g.root[g.step_outputs[k]] == i) return true;
        return false;
    };
    uint32_t best = kNone;
    for (uint32_t k = in0; k < in1; ++k) {
        const uint32_t i = g.step_inputs[k];
        if (i == t || g.is_view(i) || p.arena_of[i] != p.arena_of[t]) continue;
        if (p.live.death[i] != s) continue;
        const Role r = g.role[i];
        if (role_info(r).never_inplace_victim) continue;
        if (p.live.is_output[i] || p.live.is_saved[i]) continue;
        if (g.size[i] < g.size[t] || aliased_here(i) || !still_free(i)) continue;
        if (best == kNone || g.size[i] > g.size[best] ||
            (g.size[i] == g.size[best] && g.id_rank[i] < g.id_rank[best]))
            best = i;
    }
    return best;
}

}  // namespace emel::memory
