// The C API (include/emel/memory.h): planning (emel_plan_create*, the
// options) and reading a plan (emel_plan_*). Helpers shared with the other
// areas, and guarded(), are in status.hpp.
#include "emel/memory/c_api/status.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "emel/memory/core/checked_math.hpp"
#include "emel/memory/core/errors.hpp"
#include "emel/memory/core/graph.hpp"
#include "emel/memory/core/plan.hpp"
#include "emel/memory/pipeline/pipeline.hpp"

using namespace emel::memory;
using namespace emel::memory::c_api;

namespace {

uint32_t arena_at(const emel_plan* p, size_t arena, const char* fn) {
    const emel_plan& c = check_plan(p, fn);
    if (arena >= c.plan.arenas.size())
        bad_arg(fn, "arena index " + std::to_string(arena) + " out of range (" +
                        std::to_string(c.plan.arenas.size()) + " arenas)");
    return static_cast<uint32_t>(arena);
}

uint32_t tensor_at(const emel_plan* p, size_t tensor, const char* fn) {
    const emel_plan& c = check_plan(p, fn);
    if (tensor >= c.graph->num_tensors)
        bad_arg(fn, "tensor index " + std::to_string(tensor) + " out of range (" +
                        std::to_string(c.graph->num_tensors) + " tensors)");
    return static_cast<uint32_t>(tensor);
}

uint32_t tensor_named(const emel_plan* p, const char* id, const char* fn) {
    const emel_plan& c = check_plan(p, fn);
    need(id, fn, "id");
    auto it = c.index.find(std::string_view(id));
    if (it == c.index.end()) bad_arg(fn, "no tensor " + q(id) + " in the plan", id);
    return it->second;
}

void fill_placement(const emel_plan& c, uint32_t t, emel_tensor_placement* out) {
    const Graph& g = *c.graph;
    emel_tensor_placement r;
    std::memset(&r, 0, sizeof r);  // padding too: callers may memcmp results
    r.offset = c.plan.offset[t];
    r.size = g.size[t];
    r.arena = c.plan.arena_of[t];
    r.birth = c.plan.live.birth[t];
    r.death = c.plan.live.death[t];
    r.is_view = g.is_view(t) ? 1 : 0;
    r.view_of = g.is_view(t) ? static_cast<size_t>(g.root[t]) : EMEL_NO_INDEX;
    r.inplace_of = c.plan.inplace_of[t] == kNone ? EMEL_NO_INDEX : c.plan.inplace_of[t];
    std::memcpy(out, &r, sizeof r);
}

}  // namespace

extern "C" {

// -------------------------------------------------------------- planning

EMEL_API emel_status emel_plan_options_default(emel_plan_options* options) {
    return guarded([&] {
        need(options, "emel_plan_options_default", "options");
        std::memset(options, 0, sizeof *options);
        options->mode = EMEL_MODE_INFERENCE;
        options->strategy = EMEL_STRATEGY_TMMU;
        options->fit = EMEL_FIT_BEST;
        options->time_budget_ms = 200;
        options->default_alignment = 128;
        options->arenas = nullptr;
        options->num_arenas = 0;
        for (auto& r : options->role_arenas) r = nullptr;
    });
}

namespace {

// The determinism inputs into opt, checked in the order of Python's
// check_determinism_args (token: fixed length by type; world_size, rank,
// then the spec's ids in id order).
void set_determinism(const emel_determinism_options* d, const char* fn, PlanOptions& opt) {
    if (d == nullptr) return;  // defaults: derived token, rank 0 of 1, no spec
    if (d->has_replay_token)
        opt.replay_token.assign(d->replay_token, d->replay_token + EMEL_HASH_SIZE);
    opt.rank = d->rank;
    opt.world_size = d->world_size;
    if (d->num_shard_entries > 0) need(d->shard_spec, fn, "determinism->shard_spec");
    for (size_t k = 0; k < d->num_shard_entries; ++k) {
        const emel_shard_entry& e = d->shard_spec[k];
        if (e.tensor_id == nullptr)
            bad_arg(fn, "determinism->shard_spec[" + std::to_string(k) + "].tensor_id is NULL");
        if (!opt.shard_spec.emplace(e.tensor_id, e.axis).second)
            bad_arg(fn, "tensor " + q(e.tensor_id) + " is in the shard spec twice", e.tensor_id);
    }
    validate_options(opt);  // world_size, then rank
    if (opt.shard_spec.count(std::string()) != 0)
        throw PlanError(ErrorCode::InvalidIrShapes, "shard_spec keys must be tensor ids, got ''");
}

}  // namespace

namespace {

void create_plan(const emel_graph* graph, const emel_plan_options* options,
                 const emel_determinism_options* determinism, emel_plan** out, const char* fn) {
    {
        need(out, fn, "out");
        *out = nullptr;
        check_graph(graph, fn);
        emel_plan_options defaults;
        if (options == nullptr) {
            emel_plan_options_default(&defaults);
            options = &defaults;
        }
        const emel_plan_options& o = *options;
        // The order of emel.memory.plan(): mode, strategy / fit, default
        // alignment, arena names, arena configs, role arenas, the determinism
        // inputs, then the graph.
        const int mode = enum_arg(o.mode);
        const int strategy = enum_arg(o.strategy), fit = enum_arg(o.fit);
        if (!is_mode_code(mode))
            bad_arg(fn, "unknown mode " + std::to_string(mode));
        check_strategy_fit(strategy, fit, fn);
        if (o.num_arenas > 0) need(o.arenas, fn, "options->arenas");
        for (size_t k = 0; k < o.num_arenas; ++k) {
            if (o.arenas[k].name == nullptr)
                bad_arg(fn, "options->arenas[" + std::to_string(k) + "].name is NULL");
            for (size_t j = 0; j < k; ++j)
                if (std::strcmp(o.arenas[j].name, o.arenas[k].name) == 0)
                    bad_arg(fn, "arena " + q(o.arenas[k].name) + " is configured twice", {}, {},
                            o.arenas[k].name);
        }
        if (!is_power_of_two(o.default_alignment))
            throw PlanError(ErrorCode::AlignmentViolation,
                            "alignment must be a power of two, got " +
                                std::to_string(o.default_alignment));
        PlanOptions opt;
        opt.mode = static_cast<Mode>(mode);
        opt.strategy = static_cast<Strategy>(strategy);
        opt.fit = static_cast<Fit>(fit);
        opt.work_budget = budget_units(o.time_budget_ms);
        opt.default_alignment = o.default_alignment;
        for (size_t k = 0; k < o.num_arenas; ++k) {
            const emel_arena_config& a = o.arenas[k];
            if (*a.name == '\0')
                throw PlanError(ErrorCode::InvalidIrShapes,
                                "arena names must be non-empty strings, got ''");
            ArenaConfig c;
            if (a.alignment_bytes != 0) {
                c.has_alignment = true;
                c.alignment_bytes = a.alignment_bytes;
            }
            if (a.has_capacity) {
                c.has_capacity = true;
                c.capacity_bytes = a.capacity_bytes;
            }
            if (a.has_page_size) {
                c.has_page_size = true;
                c.page_size = a.page_size;
            }
            if (a.has_persistent) {
                c.has_persistent = true;
                c.persistent = a.persistent != 0;
            }
            opt.arenas[a.name] = c;
        }
        validate_options(opt);  // configuration errors come before graph errors
        for (int r = 0; r < EMEL_NUM_ROLES; ++r) {
            const char* name = o.role_arenas[r];
            if (name == nullptr) continue;
            if (*name == '\0')
                throw PlanError(ErrorCode::InvalidIrShapes,
                                std::string("role_arenas['") + role_name(static_cast<Role>(r)) +
                                    "'] must be a non-empty arena name, got ''");
            opt.role_arenas.at(r) = name;
        }
        set_determinism(determinism, fn, opt);
        GraphInput scratch;
        const GraphInput& in = input_of(*graph, scratch);
        auto p = std::make_unique<emel_plan>();
        PlannedGraph planned = plan_graph(in, opt);  // pipeline/pipeline.cpp
        p->graph = std::move(planned.graph);
        p->plan = std::move(planned.plan);
        p->index.reserve(p->graph->num_tensors);
        for (uint32_t t = 0; t < p->graph->num_tensors; ++t)
            p->index.emplace(p->graph->tensor_id[t], t);
        *out = p.release();
    }
}

}  // namespace

EMEL_API emel_status emel_plan_create(const emel_graph* graph, const emel_plan_options* options,
                                      emel_plan** out) {
    return guarded([&] { create_plan(graph, options, nullptr, out, "emel_plan_create"); });
}

EMEL_API emel_status emel_determinism_options_default(emel_determinism_options* options) {
    return guarded([&] {
        need(options, "emel_determinism_options_default", "options");
        std::memset(options, 0, sizeof *options);
        options->world_size = 1;
        options->shard_spec = nullptr;
    });
}

EMEL_API emel_status emel_plan_create_ex(const emel_graph* graph,
                                         const emel_plan_options* options,
                                         const emel_determinism_options* determinism,
                                         emel_plan** out) {
    return guarded([&] { create_plan(graph, options, determinism, out, "emel_plan_create_ex"); });
}

EMEL_API void emel_plan_destroy(emel_plan* plan) { delete plan; }

EMEL_API emel_status emel_plan_num_steps(const emel_plan* plan, size_t* out) {
    return guarded([&] {
        const emel_plan& c = check_plan(plan, "emel_plan_num_steps");
        need(out, "emel_plan_num_steps", "out");
        *out = c.plan.steps;
    });
}

EMEL_API emel_status emel_plan_num_arenas(const emel_plan* plan, size_t* out) {
    return guarded([&] {
        const emel_plan& c = check_plan(plan, "emel_plan_num_arenas");
        need(out, "emel_plan_num_arenas", "out");
        *out = c.plan.arenas.size();
    });
}

EMEL_API emel_status emel_plan_arena_index(const emel_plan* plan, const char* name, size_t* out) {
    static const char* fn = "emel_plan_arena_index";
    return guarded([&] {
        const emel_plan& c = check_plan(plan, fn);
        need(name, fn, "name");
        need(out, fn, "out");
        for (size_t k = 0; k < c.plan.arenas.size(); ++k)
            if (c.plan.arenas[k].name == name) {
                *out = k;
                return;
            }
        bad_arg(fn, "no arena " + q(name) + " in the plan", {}, {}, name);
    });
}

EMEL_API emel_status emel_plan_arena_name(const emel_plan* plan, size_t arena, const char** out) {
    return guarded([&] {
        const uint32_t a = arena_at(plan, arena, "emel_plan_arena_name");
        need(out, "emel_plan_arena_name", "out");
        *out = plan->plan.arenas[a].name.c_str();
    });
}

EMEL_API emel_status emel_plan_arena_size(const emel_plan* plan, size_t arena, uint64_t* out) {
    return guarded([&] {
        const uint32_t a = arena_at(plan, arena, "emel_plan_arena_size");
        need(out, "emel_plan_arena_size", "out");
        *out = plan->plan.arenas[a].size;
    });
}

EMEL_API emel_status emel_plan_arena_lower_bound(const emel_plan* plan, size_t arena,
                                                 uint64_t* out) {
    return guarded([&] {
        const uint32_t a = arena_at(plan, arena, "emel_plan_arena_lower_bound");
        need(out, "emel_plan_arena_lower_bound", "out");
        *out = plan->plan.arenas[a].inplace_aware_bound;  // the public "lower bound"
    });
}

EMEL_API emel_status emel_plan_arena_alignment(const emel_plan* plan, size_t arena,
                                               uint64_t* out) {
    return guarded([&] {
        const uint32_t a = arena_at(plan, arena, "emel_plan_arena_alignment");
        need(out, "emel_plan_arena_alignment", "out");
        *out = plan->plan.arenas[a].alignment;
    });
}

EMEL_API emel_status emel_plan_total_bytes(const emel_plan* plan, uint64_t* out) {
    return guarded([&] {
        const emel_plan& c = check_plan(plan, "emel_plan_total_bytes");
        need(out, "emel_plan_total_bytes", "out");
        uint64_t total = 0;
        for (const auto& a : c.plan.arenas) {
            auto sum = checked_add(total, a.size);
            if (!sum) throw PlanError(ErrorCode::AllocationOverflow, "total bytes exceed 2^64-1");
            total = *sum;
        }
        *out = total;
    });
}

EMEL_API emel_status emel_plan_num_tensors(const emel_plan* plan, size_t* out) {
    return guarded([&] {
        const emel_plan& c = check_plan(plan, "emel_plan_num_tensors");
        need(out, "emel_plan_num_tensors", "out");
        *out = c.graph->num_tensors;
    });
}

EMEL_API emel_status emel_plan_tensor_index(const emel_plan* plan, const char* id, size_t* out) {
    return guarded([&] {
        const uint32_t t = tensor_named(plan, id, "emel_plan_tensor_index");
        need(out, "emel_plan_tensor_index", "out");
        *out = t;
    });
}

EMEL_API emel_status emel_plan_tensor_id(const emel_plan* plan, size_t tensor, const char** out) {
    return guarded([&] {
        const uint32_t t = tensor_at(plan, tensor, "emel_plan_tensor_id");
        need(out, "emel_plan_tensor_id", "out");
        *out = plan->graph->tensor_id[t].c_str();
    });
}

EMEL_API emel_status emel_plan_tensor(const emel_plan* plan, size_t tensor,
                                      emel_tensor_placement* out) {
    return guarded([&] {
        const uint32_t t = tensor_at(plan, tensor, "emel_plan_tensor");
        need(out, "emel_plan_tensor", "out");
        fill_placement(*plan, t, out);
    });
}

EMEL_API emel_status emel_plan_tensor_by_id(const emel_plan* plan, const char* id,
                                            emel_tensor_placement* out) {
    return guarded([&] {
        const uint32_t t = tensor_named(plan, id, "emel_plan_tensor_by_id");
        need(out, "emel_plan_tensor_by_id", "out");
        fill_placement(*plan, t, out);
    });
}

// One field of a tensor, by index and by id.
#define EMEL_TENSOR_FIELD(NAME, TYPE, EXPR)                                                  \
    EMEL_API emel_status emel_plan_tensor_##NAME(const emel_plan* plan, size_t tensor,       \
                                                 TYPE* out) {                                \
        return guarded([&] {                                                                 \
            const uint32_t t = tensor_at(plan, tensor, "emel_plan_tensor_" #NAME);           \
            need(out, "emel_plan_tensor_" #NAME, "out");                                     \
            const emel_plan& c = *plan;                                                      \
            *out = (EXPR);                                                                   \
        });                                                                                  \
    }                                                                                        \
    EMEL_API emel_status emel_plan_tensor_##NAME##_by_id(const emel_plan* plan,              \
                                                         const char* id, TYPE* out) {        \
        return guarded([&] {                                                                 \
            const uint32_t t = tensor_named(plan, id, "emel_plan_tensor_" #NAME "_by_id");   \
            need(out, "emel_plan_tensor_" #NAME "_by_id", "out");                            \
            const emel_plan& c = *plan;                                                      \
            *out = (EXPR);                                                                   \
        });                                                                                  \
    }

EMEL_TENSOR_FIELD(offset, uint64_t, c.plan.offset[t])
EMEL_TENSOR_FIELD(arena, size_t, static_cast<size_t>(c.plan.arena_of[t]))
EMEL_TENSOR_FIELD(size, uint64_t, c.graph->size[t])
EMEL_TENSOR_FIELD(birth, uint32_t, c.plan.live.birth[t])
EMEL_TENSOR_FIELD(death, uint32_t, c.plan.live.death[t])

#undef EMEL_TENSOR_FIELD

}  // extern "C"
