// The planning pipeline end to end (pipeline.hpp): the stages are one file
// each in core/ and placement/; this file only runs them in order.
#include "emel/memory/pipeline/pipeline.hpp"

#include <chrono>

#include "emel/memory/determinism/plan_hash.hpp"

namespace emel::memory {

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
    // Persistent arenas always take slots; tmmu takes them everywhere.
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

PlannedGraph plan_graph(const GraphInput& in, const PlanOptions& opt) {
    validate_options(opt);  // configuration errors come before graph errors
    PlannedGraph out;
    out.graph = std::make_shared<const Graph>(build_graph(in));
    out.plan = make_plan(*out.graph, opt);
    hash_plan(in, *out.graph, opt, out.plan);
    return out;
}

}  // namespace emel::memory
