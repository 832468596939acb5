// The pipeline (docs/algorithm.md): liveness -> arenas -> slots -> layout ->
// self-check -> metrics. Each stage is a function over plain arrays.
#include <chrono>

#include "emel/memory/core/checked_math.hpp"
#include "emel/memory/core/errors.hpp"
#include "emel/memory/core/plan.hpp"

namespace emel::memory {

void validate_options(const PlanOptions& opt) {
    if (!is_power_of_two(opt.default_alignment))
        throw PlanError(ErrorCode::AlignmentViolation,
                        "default arena alignment must be a power of two, got " +
                            std::to_string(opt.default_alignment));
    for (const auto& [name, c] : opt.arenas)
        if (c.has_alignment && !is_power_of_two(c.alignment_bytes))
            throw PlanError(ErrorCode::AlignmentViolation,
                            "arena '" + name + "': alignment_bytes must be a power of two, got " +
                                std::to_string(c.alignment_bytes),
                            {}, {}, name);
    if (!opt.replay_token.empty() && opt.replay_token.size() != 32)
        throw PlanError(ErrorCode::InvalidIrShapes,
                        "replay_token must be exactly 32 bytes, got " +
                            std::to_string(opt.replay_token.size()));
    if (opt.world_size < 1)
        throw PlanError(ErrorCode::InvalidIrShapes, "world_size must be at least 1, got 0");
    if (opt.rank >= opt.world_size)
        throw PlanError(ErrorCode::InvalidIrShapes,
                        "rank must be in [0, world_size) = [0, " + std::to_string(opt.world_size) +
                            "), got " + std::to_string(opt.rank));
}

Plan make_plan(const Graph& g, const PlanOptions& opt) {
    const auto start = std::chrono::steady_clock::now();
    validate_options(opt);
    Plan p;
    p.mode = opt.mode;
    p.steps = g.num_steps;
    p.strategy = strategy_name(opt.strategy);
    p.live = analyze_liveness(g, opt.mode);
    assign_arenas(g, opt, p);
    p.offset.assign(g.num_tensors, 0);
    p.reserved.assign(g.num_tensors, 0);
    const bool slots_everywhere = opt.strategy == Strategy::Tmmu;
    assign_slots_tmmu(g, p, /*persistent_only=*/!slots_everywhere);
    if (!slots_everywhere) assign_offsets(g, opt, p);
    map_to_addresses(g, p);
    self_check(g, p);
    compute_metrics(g, p);
    p.allocation_time_ns = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                             start)
            .count());
    return p;
}

}  // namespace emel::memory
