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
// on the machine's speed). Calibrated on the 2-core development machine, where
// the exact search runs 700k-1M units/ms and greedy passes 600-700k units/ms
// (bench/peers.py reports wall time beside every budget); heuristics charge
// kGreedyUnitsPerStep per buffer placed or conflict examined.
constexpr uint64_t kWorkUnitsPerMs = 600000;
constexpr uint64_t kGreedyUnitsPerStep = 13;

}  // namespace emel::memory
