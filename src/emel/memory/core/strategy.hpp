// The strategy a plan asks for and the work units its budget is counted in:
// what PlanOptions (core/plan.hpp) and the placement strategies
// (placement/placement.hpp) share.
#pragma once

#include <cstdint>

namespace emel::memory {

enum class Fit : uint8_t { Best, First };

// docs/strategies.md
enum class Strategy : uint8_t { Tmmu, GreedyBySize, BestFit, Auto, Optimal };

// Work units per millisecond of `time_budget_ms` (fixed, so plans never depend
// on the machine's speed). Calibrated on the 2-core development machine to its
// slowest kind of work: the exact search runs 1.0-1.5M units/ms, greedy passes
// 1.0M units/ms on the densest trace (Y_1, where batches rarely run at once)
// to 2-4M on the synthetic traces (two threads); 600k before the greedy index
// and the search's threads. bench/peers.py reports wall time beside every
// budget. Heuristics charge kGreedyUnitsPerStep per buffer placed or conflict
// examined.
constexpr uint64_t kWorkUnitsPerMs = 900000;
constexpr uint64_t kGreedyUnitsPerStep = 13;

}  // namespace emel::memory
