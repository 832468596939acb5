// A planned graph as the bindings hold it: the validated graph and its plan,
// kept together so the plan can be re-checked after a caller edits it and
// applied to arenas (src/bindings/arenas.cpp).
#pragma once

#include <memory>

#include "emel/memory/core/graph.hpp"
#include "emel/memory/core/plan.hpp"

struct CorePlan {
    std::shared_ptr<const emel::memory::Graph> graph;
    emel::memory::Plan plan;
};
