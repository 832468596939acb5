// The one entry to planning that the bindings (src/bindings/) and the C API
// (c_api/plan.cpp) both call: options -> graph -> plan -> hashes, with one
// error order (configuration before graph, graph before plan). It sits above
// every stage, so the core never calls up into placement/ or determinism/.
#pragma once

#include <memory>

#include "emel/memory/core/graph.hpp"
#include "emel/memory/core/plan.hpp"

namespace emel::memory {

// The offset stage, defined in placement/offsets.cpp: every arena that is not
// persistent placed at byte offsets by opt.strategy (all but tmmu).
void assign_offsets(const Graph& g, const PlanOptions& opt, Plan& p);

// The stages from liveness to metrics, in order (docs/architecture.md, "The
// pipeline"): analyze_liveness, assign_arenas, the strategy (slots or
// offsets), map_to_addresses, self_check, compute_metrics. Throws PlanError.
Plan make_plan(const Graph& g, const PlanOptions& opt);

// A validated graph and its hashed plan, kept together: the bindings re-check
// and apply a plan against its graph, the C API reads tensors through it.
struct PlannedGraph {
    std::shared_ptr<const Graph> graph;
    Plan plan;
};

// validate_options (configuration errors first), build_graph (graph errors),
// make_plan, hash_plan. Throws PlanError.
PlannedGraph plan_graph(const GraphInput& in, const PlanOptions& opt);

}  // namespace emel::memory
