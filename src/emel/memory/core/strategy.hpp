// The strategy a plan asks for and the work units its budget is counted in:
// what PlanOptions (core/plan.hpp) and the placement strategies
// (placement/placement.hpp) share.
#pragma once

#include <cstdint>

#include "emel/memory/core/tables.hpp"  // Strategy, Fit and their names

namespace emel::memory {

// Work units per millisecond of `time_budget_ms` (fixed, so plans never depend
// on the machine's speed). Calibrated on the 2-core development machine to its
// slowest kind of work: greedy passes run 1.0M units/ms on the densest trace
// (Y_1, where batches rarely run at once) to 2-4M on the synthetic traces (two
// threads), the exact search 1.1M on one thread and 2.0-2.5M on two (its
// racing preorders); 600k before the greedy index and the search's threads. bench/peers.py reports wall time beside every
// budget. Heuristics charge kGreedyUnitsPerStep per buffer placed or conflict
// examined.
constexpr uint64_t kWorkUnitsPerMs = 900000;
// A work budget meaning "none given": auto and optimal then follow the
// default-budget policy (docs/strategies.md §4, default_work_budget in
// placement.hpp). An explicit time_budget_ms never converts to it: the
// bindings cap explicit budgets at 2^40 ms.
constexpr uint64_t kPolicyBudget = UINT64_MAX;
constexpr uint64_t kGreedyUnitsPerStep = 13;

}  // namespace emel::memory
