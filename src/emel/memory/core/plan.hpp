// The planning pipeline's shared data: configuration in, Plan out (arrays per
// tensor and per arena; dicts and JSON are built on request by the bindings).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "emel/memory/core/digest.hpp"
#include "emel/memory/core/graph.hpp"
#include "emel/memory/core/strategy.hpp"

namespace emel::memory {

struct ArenaConfig {
    bool has_alignment = false;
    uint64_t alignment_bytes = 0;
    bool has_capacity = false;
    uint64_t capacity_bytes = 0;
    bool has_page_size = false;
    uint64_t page_size = 0;
    bool has_persistent = false;
    bool persistent = false;
};

struct PlanOptions {
    Mode mode = Mode::Inference;
    Strategy strategy = Strategy::Tmmu;
    Fit fit = Fit::Best;                   // greedy_by_size only
    uint64_t work_budget = 200 * kWorkUnitsPerMs;  // auto / optimal
    uint64_t default_alignment = 128;      // every arena's, unless configured
    std::map<std::string, ArenaConfig> arenas;  // ordered: deterministic
    // Default arena per role (indexed by Role); "" keeps the built-in default.
    std::vector<std::string> role_arenas = std::vector<std::string>(6);
    // Determinism inputs (docs/determinism.md): hashed, never change placement.
    std::vector<uint8_t> replay_token;     // empty = the default derived token; else 32 bytes
    uint64_t rank = 0;
    uint64_t world_size = 1;
    std::map<std::string, uint64_t> shard_spec;  // tensor id -> split axis
};

// The hashes of a plan and of its inputs (docs/determinism.md), SHA-256 each.
struct PlanHashes {
    Digest ir{};
    Digest execution_order{};
    Digest arena_config{};
    Digest shard_spec{};
    Digest plan{};
};

// Per storage tensor after the mode is applied (docs/algorithm.md §2).
struct Liveness {
    std::vector<uint32_t> birth;   // views: their root's
    std::vector<uint32_t> death;
    std::vector<uint8_t> is_output;  // lives to the last step as an output
    std::vector<uint8_t> is_saved;   // saved (itself or a view), mode applied
};

struct ArenaPlan {
    std::string name;
    bool persistent = false;
    uint64_t alignment = 128;
    uint64_t page_size = 4096;
    bool has_capacity = false;
    uint64_t capacity = 0;
    uint64_t size = 0;
    bool has_slots = true;   // false where an offset strategy placed it
    std::string method;      // the heuristic that placed it (offset strategies)
    uint64_t work = 0;       // work units spent placing it
    bool optimal = false;    // proven optimal (optimal strategy)
    uint64_t proven_bound = 0;  // bound on `size` the search proved (auto, optimal; placement/)
    // slots (where the strategy has them)
    std::vector<uint64_t> slot_size;
    std::vector<uint64_t> slot_alignment;
    std::vector<uint64_t> slot_offset;
    std::vector<uint32_t> slot_first_holder;
    // metrics (§7)
    // The arena's lower bound (public name "lower_bound", emel_plan_arena_lower_bound):
    // the peak of live bytes with an in-place group counted once (metrics.cpp).
    uint64_t inplace_aware_bound = 0;
    uint64_t peak_live_bytes = 0;  // peak of live bytes, every tensor counted (in-place pairs twice)
    uint64_t max_live = 0;
    uint64_t storage_tensors = 0;
    double memory_reuse_ratio = 0.0;
    double internal_fragmentation_ratio = 0.0;
};

struct Plan {
    Mode mode = Mode::Inference;
    std::string strategy = "tmmu";
    uint32_t steps = 0;
    std::vector<ArenaPlan> arenas;       // name order
    std::vector<uint32_t> arena_of;      // per tensor
    std::vector<uint32_t> slot;          // per tensor; kNone for views
    std::vector<uint64_t> offset;        // per tensor
    std::vector<uint64_t> effective_alignment;  // per storage tensor, a(t)
    std::vector<uint32_t> inplace_of;    // per tensor; kNone unless it took a slot in place
    std::vector<uint64_t> reserved;      // per storage tensor: bytes its slot/buffer holds
    Liveness live;
    uint64_t allocation_time_ns = 0;
    // Filled by hash_plan() (plan_hash.cpp).
    PlanHashes hashes;
    Digest replay_token{};
    uint64_t rank = 0;
    uint64_t world_size = 1;
};

// Stages, one file each, in pipeline order.
Liveness analyze_liveness(const Graph& g, Mode mode);                  // liveness.cpp
void assign_arenas(const Graph& g, const PlanOptions& opt, Plan& p);    // arenas.cpp
// must_not_alias partners per storage root, within one arena (arenas.cpp).
std::vector<std::vector<uint32_t>> alias_partners(const Graph& g, const Plan& p);
// The largest eligible in-place victim of t (ties: id order), or kNone;
// `still_free(i)` adds the strategy's own condition (inplace.cpp).
uint32_t choose_inplace_victim(const Graph& g, const Plan& p, uint32_t t,
                               const std::function<bool(uint32_t)>& still_free);
void assign_slots_tmmu(const Graph& g, Plan& p, bool persistent_only);  // slots.cpp
// (the offset stage, assign_offsets, is placement/'s: pipeline/pipeline.hpp)
void map_to_addresses(const Graph& g, Plan& p);                         // layout.cpp
void self_check(const Graph& g, const Plan& p);                         // self_check.cpp
void compute_metrics(const Graph& g, Plan& p);                          // metrics.cpp

// Arena configuration checks, done before the graph is validated (plan.cpp).
void validate_options(const PlanOptions& opt);

// The whole pipeline, make_plan() and plan_graph(), is pipeline/pipeline.hpp;
// the hashes are determinism/plan_hash.hpp.

}  // namespace emel::memory
