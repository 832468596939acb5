// The hashes of a plan and of its inputs (docs/determinism.md), SHA-256 over
// canonical CBOR each (plan_hash.cpp).
#pragma once

#include "emel/memory/core/digest.hpp"
#include "emel/memory/core/graph.hpp"
#include "emel/memory/core/plan.hpp"

namespace emel::memory {

// The IR hash reads shapes and dtypes from the input, everything else from the
// validated graph.
Digest ir_hash(const GraphInput& in, const Graph& g);
// Fills p.hashes, p.replay_token (the default one when opt has none), p.rank
// and p.world_size from the finished plan.
void hash_plan(const GraphInput& in, const Graph& g, const PlanOptions& opt, Plan& p);

}  // namespace emel::memory
