// A planned graph as the bindings hold it: the validated graph and its plan,
// kept together so the plan can be re-checked after a caller edits it and
// applied to arenas (src/bindings/arenas.cpp).
#pragma once

#include "emel/memory/pipeline/pipeline.hpp"

// What _core.plan() returns (Python: _core.CorePlan): pipeline's PlannedGraph.
using CorePlan = emel::memory::PlannedGraph;
