// The strategy a plan asks for and the work units its budget is counted in:
// what PlanOptions (core/plan.hpp) and the placement strategies
// (placement/placement.hpp) share.
#pragma once

#include <cstdint>

#include "emel/memory/core/tables.hpp"  // Strategy, Fit and their names

namespace emel::memory {

// Work units per millisecond of `time_budget_ms` (fixed, so plans never depend
// on the machine's speed), calibrated to the slowest kind of work: the rates
// measured are in docs/benchmarks.md ("The work-unit rate"); bench/peers.py
// reports wall time beside every budget. Heuristics charge
// kGreedyUnitsPerStep per buffer placed or conflict examined.
constexpr uint64_t kWorkUnitsPerMs = 900000;
// A work budget meaning "none given": auto and optimal then follow the
// default-budget policy (docs/strategies.md §4, default_work_budget in
// placement.hpp). An explicit time_budget_ms never converts to it: the
// bindings cap explicit budgets at 2^40 ms.
constexpr uint64_t kPolicyBudget = UINT64_MAX;
constexpr uint64_t kGreedyUnitsPerStep = 13;

}  // namespace emel::memory
