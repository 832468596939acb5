// The planning pipeline's shared data: configuration in, Plan out (arrays per
// tensor and per arena; dicts and JSON are built on request by the bindings).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "emel/memory/graph.hpp"

namespace emel::memory {

enum class Mode : uint8_t { Inference, Forward, Backward };
const char* mode_name(Mode m);

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
    uint64_t default_alignment = 128;      // every arena's, unless configured
    std::map<std::string, ArenaConfig> arenas;  // ordered: deterministic
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
    // slots (where the strategy has them)
    std::vector<uint64_t> slot_size;
    std::vector<uint64_t> slot_alignment;
    std::vector<uint64_t> slot_offset;
    std::vector<uint32_t> slot_first_holder;
    // metrics (§7)
    uint64_t lower_bound = 0;
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
    Liveness live;
    uint64_t allocation_time_ns = 0;
};

// Stages, one file each, in pipeline order.
Liveness analyze_liveness(const Graph& g, Mode mode);                  // liveness.cpp
void assign_arenas(const Graph& g, const PlanOptions& opt, Plan& p);    // arenas.cpp
void assign_slots_tmmu(const Graph& g, Plan& p);                        // slots.cpp
void map_to_addresses(const Graph& g, Plan& p);                         // layout.cpp
void self_check(const Graph& g, const Plan& p);                         // self_check.cpp
void compute_metrics(const Graph& g, Plan& p);                          // metrics.cpp

// Arena configuration checks, done before the graph is validated (plan.cpp).
void validate_options(const PlanOptions& opt);

// The whole pipeline (plan.cpp). Throws PlanError.
Plan make_plan(const Graph& g, const PlanOptions& opt);

}  // namespace emel::memory
