// The clobber check (docs/arenas.md): execute the graph over the real arena
// bytes. Every storage tensor gets its own position-dependent pattern when it
// is born; every node first checks that each of its inputs still holds the
// pattern (a view: its root's pattern at the view's range), then writes its
// outputs. Inputs are checked before outputs are written, which is exactly
// what makes an in-place output legal. A tensor that another tensor's write
// reached while it was live shows up at the first step that reads it, named
// with the step, the node and the tensor whose bytes were found there.
#include <algorithm>

#include "emel/memory/runtime/arena_engine.hpp"

namespace emel::memory {

namespace {

// The storage tensor of the same arena whose pattern is at `position` of that
// arena, if any (searched only once a mismatch is found; ties: id order).
uint32_t find_writer(const Graph& g, const Plan& p, const std::vector<uint64_t>& key,
                     uint32_t arena, uint32_t victim, uint64_t position, const uint8_t* base) {
    uint32_t found = kNone;
    for (uint32_t u = 0; u < g.num_tensors; ++u) {
        if (u == victim || g.is_view(u) || p.arena_of[u] != arena || g.size[u] == 0) continue;
        if (position < p.offset[u] || position - p.offset[u] >= g.size[u]) continue;
        // Compare up to 8 bytes from `position` so one coincidental byte is not enough.
        const uint64_t rel = position - p.offset[u];
        const uint64_t len = std::min<uint64_t>(8, g.size[u] - rel);
        if (pattern_mismatch(base + position, key[u], rel, len) != len) continue;
        if (found == kNone || g.id_rank[u] < g.id_rank[found]) found = u;
    }
    return found;
}

}  // namespace

ExecutionReport ArenaEngine::verify_execution() {
    check_debug_allowed("verify_execution");
    const Graph& g = *graph_;
    const Plan& p = plan_;
    const uint32_t T = g.num_tensors;
    const uint32_t n = g.num_steps;
    const uint32_t last = n == 0 ? 0 : n - 1;
    ExecutionReport report;
    report.steps = n;
    mark_all_written();

    std::vector<uint64_t> key(T, 0);
    for (uint32_t t = 0; t < T; ++t)
        if (!g.is_view(t) && g.size[t] > 0) key[t] = pattern_key(options_.pattern_seed, g.tensor_id[t]);

    auto write = [&](uint32_t t) {
        if (g.is_view(t) || g.size[t] == 0) return;  // a view's bytes are its root's
        pattern_fill(address(t), key[t], 0, g.size[t]);
        ++report.tensors_written;
        report.bytes_written += g.size[t];
    };
    auto check = [&](uint32_t t, uint32_t step, bool at_end) {
        if (g.size[t] == 0) return;
        const uint32_t r = g.root[t];
        const uint64_t bad = pattern_mismatch(address(t), key[r], g.root_offset[t], g.size[t]);
        ++report.tensors_checked;
        report.bytes_checked += g.size[t];
        if (bad == g.size[t]) return;
        const uint32_t arena = p.arena_of[t];
        const uint64_t position = p.offset[t] + bad;
        const uint32_t writer =
            find_writer(g, p, key, arena, r, position, memory_->arenas[arena].base);
        const std::string& name = g.tensor_id[t];
        std::string where = at_end ? "at the end of the execution (step " + std::to_string(step) + ")"
                                   : "at step " + std::to_string(step) + " (node '" +
                                         g.step_node_id[step] + "')";
        std::string msg = "tensor '" + name + "' of arena '" + p.arenas[arena].name + "' [" +
                          std::to_string(p.offset[t]) + ", " +
                          std::to_string(p.offset[t] + g.size[t]) + ") was clobbered: " + where +
                          " its byte " + std::to_string(bad) + " (arena offset " +
                          std::to_string(position) + ") no longer holds the pattern written when '" +
                          g.tensor_id[r] + "' was born at step " + std::to_string(p.live.birth[r]);
        if (writer != kNone) msg += "; it holds the pattern of '" + g.tensor_id[writer] + "'";
        EngineError e("ADDRESS_COLLISION", msg, name, at_end ? std::string() : g.step_node_id[step],
                      p.arenas[arena].name);
        e.step = step;
        e.byte_offset = bad;
        if (writer != kNone) e.overwritten_by = g.tensor_id[writer];
        throw e;
    };

    // Tensors no node produces hold their bytes from the start.
    for (uint32_t t = 0; t < T; ++t)
        if (g.producer_step[t] == kNone) write(t);
    for (uint32_t s = 0; s < n; ++s) {
        for (uint32_t k = g.step_inputs_start[s]; k < g.step_inputs_start[s + 1]; ++k)
            check(g.step_inputs[k], s, false);
        for (uint32_t k = g.step_outputs_start[s]; k < g.step_outputs_start[s + 1]; ++k)
            write(g.step_outputs[k]);
    }
    // Whatever lives to the end (outputs, saved tensors, parameters) must still
    // be intact, except a tensor taken over in place by the last node.
    std::vector<uint8_t> taken_at_last(T, 0);
    for (uint32_t t = 0; t < T; ++t)
        if (p.inplace_of[t] != kNone && p.live.birth[t] == last) taken_at_last[p.inplace_of[t]] = 1;
    if (n > 0)
        for (uint32_t t = 0; t < T; ++t)
            if (!g.is_view(t) && p.live.death[t] == last && !taken_at_last[t]) check(t, last, true);
    return report;
}

}  // namespace emel::memory
