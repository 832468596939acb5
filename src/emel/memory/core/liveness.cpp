// AnalyzeLiveness_v1 (docs/algorithm.md §2): one pass over the nodes' inputs
// and outputs, O(nodes + edges).
#include <algorithm>

#include "emel/memory/core/plan.hpp"

namespace emel::memory {

Liveness analyze_liveness(const Graph& g, Mode mode) {
    const uint32_t T = g.num_tensors;
    const uint32_t last = g.num_steps == 0 ? 0 : g.num_steps - 1;
    Liveness L;
    L.birth.assign(T, 0);
    L.death.assign(T, 0);
    L.is_output.assign(T, 0);
    L.is_saved.assign(T, 0);

    for (uint32_t t = 0; t < T; ++t)
        if (g.producer_step[t] != kNone) L.birth[t] = g.producer_step[t];

    // Last touch of each root, through the tensor itself or any of its views.
    std::vector<uint32_t> last_touch(L.birth);
    auto touch = [&](uint32_t t, uint32_t s) {
        const uint32_t r = g.root[t];
        last_touch[r] = std::max(last_touch[r], s);
    };
    for (uint32_t s = 0; s < g.num_steps; ++s) {
        for (uint32_t k = g.step_inputs_start[s]; k < g.step_inputs_start[s + 1]; ++k)
            touch(g.step_inputs[k], s);
        for (uint32_t k = g.step_outputs_start[s]; k < g.step_outputs_start[s + 1]; ++k)
            touch(g.step_outputs[k], s);
    }
    // Flags that a view passes on to its root.
    for (uint32_t t = 0; t < T; ++t) {
        const uint32_t r = g.root[t];
        if (g.role[t] == Role::Output || g.listed_output[t]) L.is_output[r] = 1;
        if (mode != Mode::Inference && g.saved_for_backward[t]) L.is_saved[r] = 1;
    }
    for (uint32_t t = 0; t < T; ++t) {
        if (g.is_view(t)) continue;
        L.death[t] = last_touch[t];
        if (is_persistent_role(g.role[t])) {
            L.birth[t] = 0;
            L.death[t] = last;
        }
        if (L.is_output[t]) L.death[t] = last;
        if (mode == Mode::Forward && L.is_saved[t]) L.death[t] = last;
    }
    for (uint32_t t = 0; t < T; ++t)  // views report their root's lifetime
        if (g.is_view(t)) {
            L.birth[t] = L.birth[g.root[t]];
            L.death[t] = L.death[g.root[t]];
        }
    return L;
}

}  // namespace emel::memory
