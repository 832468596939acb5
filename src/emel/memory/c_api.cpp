// The C API (include/emel/memory.h) over the C++ core. Like the pybind11
// module (src/bindings/module.cpp), it only converts arguments to the core's
// plain data and back; no planning logic lives here. Every entry point runs
// inside guarded(), which turns every exception into a status.
#define EMEL_MEMORY_C_BUILD
#include "emel/memory.h"

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

#include "emel/memory/checked_math.hpp"
#include "emel/memory/errors.hpp"
#include "emel/memory/ggml_alloc.hpp"
#include "emel/memory/graph.hpp"
#include "emel/memory/graph_allocator.hpp"
#include "emel/memory/placement.hpp"
#include "emel/memory/plan.hpp"

using namespace emel::memory;

struct emel_graph {
    GraphInput in;
    bool read_only = false;  // made by emel_graph_from_arrays
    bool broken = false;     // a mutation failed half-way (out of memory)
    std::unordered_map<std::string, uint32_t> tensor_pos;  // first tensor with the id
    std::unordered_map<std::string, uint32_t> node_pos;
    // must_not_alias per tensor, kept aside (GraphInput holds it as CSR in
    // tensor order) and merged in when planned; empty until first used.
    std::vector<std::vector<std::string>> no_alias;
};

struct emel_plan {
    std::unique_ptr<const Graph> graph;  // owned: index below views its ids
    Plan plan;
    std::unordered_map<std::string_view, uint32_t> index;
};

namespace {

// Python's plan()/place() clamp the budget to 2^40 ms before the core sees it.
constexpr uint64_t kMaxBudgetMs = uint64_t{1} << 40;

// A failure found by this file (not by the core): a status plus details.
struct ApiError {
    emel_status status;
    std::string message;
    std::string tensor;
    std::string node;
    std::string arena;
};

struct LastError {
    emel_status status = EMEL_OK;
    bool lost = false;  // recording the details itself ran out of memory
    std::string message, tensor, node, arena;
};
thread_local LastError t_last;

const char* status_name(emel_status s) noexcept {
    switch (s) {
        case EMEL_OK: return "OK";
        case EMEL_INVALID_IR_SHAPES: return "INVALID_IR_SHAPES";
        case EMEL_LIVENESS_CYCLE: return "LIVENESS_CYCLE";
        case EMEL_ALLOCATION_OVERFLOW: return "ALLOCATION_OVERFLOW";
        case EMEL_ARENA_TOO_SMALL: return "ARENA_TOO_SMALL";
        case EMEL_ALIGNMENT_VIOLATION: return "ALIGNMENT_VIOLATION";
        case EMEL_ADDRESS_COLLISION: return "ADDRESS_COLLISION";
        case EMEL_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
        case EMEL_OUT_OF_MEMORY: return "OUT_OF_MEMORY";
        case EMEL_INTERNAL: return "INTERNAL";
        default: return "UNKNOWN";
    }
}

emel_status to_status(ErrorCode c) noexcept {
    switch (c) {
        case ErrorCode::InvalidIrShapes: return EMEL_INVALID_IR_SHAPES;
        case ErrorCode::LivenessCycle: return EMEL_LIVENESS_CYCLE;
        case ErrorCode::AllocationOverflow: return EMEL_ALLOCATION_OVERFLOW;
        case ErrorCode::ArenaTooSmall: return EMEL_ARENA_TOO_SMALL;
        case ErrorCode::AlignmentViolation: return EMEL_ALIGNMENT_VIOLATION;
        case ErrorCode::AddressCollision: return EMEL_ADDRESS_COLLISION;
    }
    return EMEL_INTERNAL;
}

emel_status record(emel_status status, const std::string& text, const std::string& tensor,
                   const std::string& node, const std::string& arena) noexcept {
    LastError& e = t_last;
    e.status = status;
    try {
        e.lost = false;
        e.message = std::string("[") + status_name(status) + "] " + text;
        e.tensor = tensor;
        e.node = node;
        e.arena = arena;
    } catch (...) {
        e.lost = true;
        e.message.clear();
        e.tensor.clear();
        e.node.clear();
        e.arena.clear();
    }
    return status;
}

emel_status record(emel_status status, const char* text) noexcept {
    LastError& e = t_last;
    e.status = status;
    e.tensor.clear();
    e.node.clear();
    e.arena.clear();
    try {
        e.lost = false;
        e.message = std::string("[") + status_name(status) + "] " + text;
    } catch (...) {
        e.lost = true;
        e.message.clear();
    }
    return status;
}

// Runs one entry point: nothing thrown inside leaves it.
template <typename F>
emel_status guarded(F&& body) noexcept {
    try {
        body();
        return EMEL_OK;
    } catch (const ApiError& e) {
        return record(e.status, e.message, e.tensor, e.node, e.arena);
    } catch (const PlanError& e) {
        return record(to_status(e.code), e.message, e.tensor, e.node, e.arena);
    } catch (const std::bad_alloc&) {
        return record(EMEL_OUT_OF_MEMORY, "out of memory");
    } catch (const std::length_error& e) {
        return record(EMEL_OUT_OF_MEMORY, e.what());
    } catch (const std::exception& e) {
        return record(EMEL_INTERNAL, e.what());
    } catch (...) {
        return record(EMEL_INTERNAL, "unknown exception");
    }
}

[[noreturn]] void bad_arg(const char* fn, const std::string& what, std::string tensor = {},
                          std::string node = {}, std::string arena = {}) {
    throw ApiError{EMEL_INVALID_ARGUMENT, std::string(fn) + ": " + what, std::move(tensor),
                   std::move(node), std::move(arena)};
}

template <typename T>
void need(const T* p, const char* fn, const char* name) {
    if (p == nullptr) bad_arg(fn, std::string(name) + " is NULL");
}

std::string q(const std::string& s) { return "'" + s + "'"; }

void check_graph(const emel_graph* g, const char* fn) {
    need(g, fn, "graph");
    if (g->broken)
        throw ApiError{EMEL_INTERNAL,
                       std::string(fn) +
                           ": the graph was left incomplete by an earlier failed call (out of "
                           "memory); destroy it",
                       {}, {}, {}};
}

// The graph must be editable; then body() changes it. A body that throws
// part-way (out of memory) leaves the graph marked broken.
template <typename F>
void mutate(emel_graph* g, const char* fn, F&& body) {
    if (g->read_only) bad_arg(fn, "a graph made by emel_graph_from_arrays is read-only");
    g->broken = true;
    body();
    g->broken = false;
}

uint32_t tensor_position(const emel_graph* g, const char* fn, const char* id) {
    need(id, fn, "tensor_id");
    auto it = g->tensor_pos.find(id);
    if (it == g->tensor_pos.end()) bad_arg(fn, "no tensor " + q(id) + " has been added", id);
    return it->second;
}

std::vector<std::string> id_list(const char* const* ids, size_t n, const char* fn,
                                 const char* what) {
    if (n > 0 && ids == nullptr) bad_arg(fn, std::string(what) + " is NULL but its count is " + std::to_string(n));
    std::vector<std::string> out;
    out.reserve(n);
    for (size_t k = 0; k < n; ++k) {
        if (ids[k] == nullptr) bad_arg(fn, std::string(what) + "[" + std::to_string(k) + "] is NULL");
        out.emplace_back(ids[k]);
    }
    return out;
}

// The GraphInput to validate: the builder's, with must_not_alias merged in
// (a copy only when some tensor has must_not_alias partners).
const GraphInput& input_of(const emel_graph& g, GraphInput& scratch) {
    if (g.no_alias.empty()) return g.in;
    scratch = g.in;
    scratch.must_not_alias.clear();
    scratch.must_not_alias_start.assign(1, 0);
    for (size_t t = 0; t < scratch.num_tensors(); ++t) {
        if (t < g.no_alias.size())
            scratch.must_not_alias.insert(scratch.must_not_alias.end(), g.no_alias[t].begin(),
                                          g.no_alias[t].end());
        scratch.must_not_alias_start.push_back(scratch.must_not_alias.size());
    }
    return scratch;
}

uint64_t budget_units(uint64_t time_budget_ms) {
    return std::min(time_budget_ms, kMaxBudgetMs) * kWorkUnitsPerMs;
}

void check_strategy_fit(int strategy, int fit, const char* fn) {
    if (strategy < EMEL_STRATEGY_TMMU || strategy > EMEL_STRATEGY_OPTIMAL)
        bad_arg(fn, "unknown strategy " + std::to_string(strategy));
    if (fit != EMEL_FIT_BEST && fit != EMEL_FIT_FIRST)
        bad_arg(fn, "fit must be EMEL_FIT_BEST or EMEL_FIT_FIRST, got " + std::to_string(fit));
}

const emel_plan& check_plan(const emel_plan* p, const char* fn) {
    need(p, fn, "plan");
    return *p;
}

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

// ---------------------------------------------------------------- errors

EMEL_API const char* emel_status_name(emel_status status) { return status_name(status); }

EMEL_API emel_status emel_last_error_status(void) { return t_last.status; }

EMEL_API const char* emel_last_error_message(void) {
    const LastError& e = t_last;
    if (e.lost) return e.status == EMEL_OUT_OF_MEMORY
                           ? "[OUT_OF_MEMORY] out of memory"
                           : "(out of memory while recording the error's details)";
    return e.message.c_str();
}

EMEL_API const char* emel_last_error_tensor(void) { return t_last.tensor.c_str(); }
EMEL_API const char* emel_last_error_node(void) { return t_last.node.c_str(); }
EMEL_API const char* emel_last_error_arena(void) { return t_last.arena.c_str(); }

// ---------------------------------------------------------------- graphs

EMEL_API emel_status emel_graph_create(const char* name, emel_graph** out) {
    return guarded([&] {
        need(out, "emel_graph_create", "out");
        *out = nullptr;
        auto g = std::make_unique<emel_graph>();
        if (name) g->in.name = name;
        *out = g.release();
    });
}

EMEL_API void emel_graph_destroy(emel_graph* graph) { delete graph; }

namespace {

// Both add_tensor entry points: `shape` / `dtype` as the document states them.
void add_graph_tensor(emel_graph* graph, const char* fn, const char* id, const char* dtype,
                const uint64_t* shape, size_t ndim, bool has_nbytes, uint64_t nbytes,
                emel_role role, uint64_t alignment, int can_inplace, const char* view_base_id,
                uint64_t view_offset) {
    check_graph(graph, fn);
    need(id, fn, "id");
    need(dtype, fn, "dtype");
    if (ndim > 0) need(shape, fn, "shape");
    const int r = static_cast<int>(role);
    if (r < EMEL_ROLE_INPUT || r > EMEL_ROLE_OUTPUT)
        bad_arg(fn, "tensor " + q(id) + ": unknown role " + std::to_string(r), id);
    if (graph->read_only) bad_arg(fn, "a graph made by emel_graph_from_arrays is read-only");
    // Phase A, as the Python reader does it (graph.py normalize_tensor).
    const size_t index = graph->in.num_tensors();
    if (*id == '\0')
        throw PlanError(ErrorCode::InvalidIrShapes,
                        "tensor #" + std::to_string(index) +
                            ": 'id' must be a non-empty string, got ''");
    if (*dtype == '\0')
        throw PlanError(ErrorCode::InvalidIrShapes,
                        "tensor " + q(id) + ": 'dtype' must be a non-empty string, got ''", id);
    if (alignment != 0 && !is_power_of_two(alignment))
        throw PlanError(ErrorCode::AlignmentViolation,
                        "tensor " + q(id) + ": alignment must be a power of two below 2^64, got " +
                            std::to_string(alignment),
                        id);
    std::string tid(id);
    std::string base = view_base_id ? std::string(view_base_id) : std::string();
    mutate(graph, fn, [&] {
        graph->tensor_pos.emplace(tid, static_cast<uint32_t>(index));
        graph->in.add_tensor(tid, shape, ndim, dtype, has_nbytes, nbytes, static_cast<Role>(r), "",
                             alignment, false, can_inplace != 0, view_base_id != nullptr,
                             std::move(base), view_offset, {});
        if (!graph->no_alias.empty()) graph->no_alias.emplace_back();
    });
}

}  // namespace

EMEL_API emel_status emel_graph_add_tensor(emel_graph* graph, const char* id, uint64_t nbytes,
                                           emel_role role, uint64_t alignment, int can_inplace,
                                           const char* view_base_id, uint64_t view_offset) {
    return guarded([&] {
        // Sizes come as nbytes with no shape (dtype "bytes"), as in from_arrays.
        add_graph_tensor(graph, "emel_graph_add_tensor", id, "bytes", nullptr, 0, true, nbytes, role,
                   alignment, can_inplace, view_base_id, view_offset);
    });
}

EMEL_API emel_status emel_graph_add_tensor_shaped(emel_graph* graph, const char* id,
                                                  const char* dtype, const uint64_t* shape,
                                                  size_t ndim, int has_nbytes, uint64_t nbytes,
                                                  emel_role role, uint64_t alignment,
                                                  int can_inplace, const char* view_base_id,
                                                  uint64_t view_offset) {
    return guarded([&] {
        add_graph_tensor(graph, "emel_graph_add_tensor_shaped", id, dtype, shape, ndim, has_nbytes != 0,
                   nbytes, role, alignment, can_inplace, view_base_id, view_offset);
    });
}

EMEL_API emel_status emel_graph_add_node(emel_graph* graph, const char* id,
                                         const char* const* inputs, size_t n_in,
                                         const char* const* outputs, size_t n_out) {
    static const char* fn = "emel_graph_add_node";
    return guarded([&] {
        check_graph(graph, fn);
        need(id, fn, "id");
        std::vector<std::string> ins = id_list(inputs, n_in, fn, "inputs");
        std::vector<std::string> outs = id_list(outputs, n_out, fn, "outputs");
        if (graph->read_only) bad_arg(fn, "a graph made by emel_graph_from_arrays is read-only");
        const size_t index = graph->in.num_nodes();
        if (*id == '\0')
            throw PlanError(ErrorCode::InvalidIrShapes,
                            "node #" + std::to_string(index) +
                                ": 'id' must be a non-empty string, got ''");
        std::string nid(id);
        mutate(graph, fn, [&] {
            graph->node_pos.emplace(nid, static_cast<uint32_t>(index));
            graph->in.add_node(nid, Phase::Unspecified, ins, outs);
        });
    });
}

EMEL_API emel_status emel_graph_add_output(emel_graph* graph, const char* id) {
    static const char* fn = "emel_graph_add_output";
    return guarded([&] {
        check_graph(graph, fn);
        need(id, fn, "id");
        mutate(graph, fn, [&] { graph->in.outputs.emplace_back(id); });
    });
}

EMEL_API emel_status emel_graph_set_tensor_arena(emel_graph* graph, const char* tensor_id,
                                                 const char* arena) {
    static const char* fn = "emel_graph_set_tensor_arena";
    return guarded([&] {
        check_graph(graph, fn);
        need(arena, fn, "arena");
        if (graph->read_only) bad_arg(fn, "a graph made by emel_graph_from_arrays is read-only");
        const uint32_t t = tensor_position(graph, fn, tensor_id);
        if (*arena == '\0')
            throw PlanError(ErrorCode::InvalidIrShapes,
                            "tensor " + q(tensor_id) + ": 'arena' must be a non-empty string",
                            tensor_id);
        mutate(graph, fn, [&] { graph->in.arena[t] = arena; });
    });
}

EMEL_API emel_status emel_graph_set_saved_for_backward(emel_graph* graph, const char* tensor_id,
                                                       int saved) {
    static const char* fn = "emel_graph_set_saved_for_backward";
    return guarded([&] {
        check_graph(graph, fn);
        if (graph->read_only) bad_arg(fn, "a graph made by emel_graph_from_arrays is read-only");
        const uint32_t t = tensor_position(graph, fn, tensor_id);
        mutate(graph, fn, [&] { graph->in.saved_for_backward[t] = saved != 0; });
    });
}

EMEL_API emel_status emel_graph_add_must_not_alias(emel_graph* graph, const char* tensor_id,
                                                   const char* other_id) {
    static const char* fn = "emel_graph_add_must_not_alias";
    return guarded([&] {
        check_graph(graph, fn);
        need(other_id, fn, "other_id");
        if (graph->read_only) bad_arg(fn, "a graph made by emel_graph_from_arrays is read-only");
        const uint32_t t = tensor_position(graph, fn, tensor_id);
        mutate(graph, fn, [&] {
            graph->no_alias.resize(graph->in.num_tensors());
            graph->no_alias[t].emplace_back(other_id);
        });
    });
}

EMEL_API emel_status emel_graph_set_node_phase(emel_graph* graph, const char* node_id,
                                               emel_phase phase) {
    static const char* fn = "emel_graph_set_node_phase";
    return guarded([&] {
        check_graph(graph, fn);
        need(node_id, fn, "node_id");
        const int ph = static_cast<int>(phase);
        if (ph < EMEL_PHASE_UNSPECIFIED || ph > EMEL_PHASE_BACKWARD)
            bad_arg(fn, "unknown phase " + std::to_string(ph), {}, node_id);
        if (graph->read_only) bad_arg(fn, "a graph made by emel_graph_from_arrays is read-only");
        auto it = graph->node_pos.find(node_id);
        if (it == graph->node_pos.end())
            bad_arg(fn, "no node " + q(node_id) + " has been added", {}, node_id);
        mutate(graph, fn, [&] { graph->in.node_phase[it->second] = static_cast<Phase>(ph); });
    });
}

EMEL_API emel_status emel_graph_set_execution_order(emel_graph* graph,
                                                    const char* const* node_ids, size_t n) {
    static const char* fn = "emel_graph_set_execution_order";
    return guarded([&] {
        check_graph(graph, fn);
        std::vector<std::string> order = id_list(node_ids, n, fn, "node_ids");
        mutate(graph, fn, [&] {
            graph->in.execution_order = std::move(order);
            graph->in.has_execution_order = true;
        });
    });
}

EMEL_API emel_status emel_graph_validate(const emel_graph* graph) {
    return guarded([&] {
        check_graph(graph, "emel_graph_validate");
        GraphInput scratch;
        build_graph(input_of(*graph, scratch));
    });
}

EMEL_API emel_status emel_graph_from_arrays(const emel_graph_arrays* arrays, const char* name,
                                            emel_graph** out) {
    static const char* fn = "emel_graph_from_arrays";
    return guarded([&] {
        need(out, fn, "out");
        *out = nullptr;
        need(arrays, fn, "arrays");
        const emel_graph_arrays& a = *arrays;
        if (a.num_tensors > 0) need(a.size, fn, "arrays->size");
        need(a.in_start, fn, "arrays->in_start");
        need(a.out_start, fn, "arrays->out_start");
        if (a.in_index == nullptr && a.in_start[a.num_nodes] != 0)
            bad_arg(fn, "arrays->in_index is NULL but in_start[num_nodes] is " +
                            std::to_string(a.in_start[a.num_nodes]));
        if (a.out_index == nullptr && a.out_start[a.num_nodes] != 0)
            bad_arg(fn, "arrays->out_index is NULL but out_start[num_nodes] is " +
                            std::to_string(a.out_start[a.num_nodes]));
        if (a.num_outputs > 0) need(a.outputs, fn, "arrays->outputs");
        GraphArrays ga;
        ga.num_tensors = a.num_tensors;
        ga.num_nodes = a.num_nodes;
        ga.size = a.size;
        ga.in_start = a.in_start;
        ga.in_index = a.in_index;
        ga.out_start = a.out_start;
        ga.out_index = a.out_index;
        ga.role = a.role;
        ga.can_inplace = a.can_inplace;
        ga.alignment = a.alignment;
        ga.view_base = a.view_base;
        ga.view_offset = a.view_offset;
        ga.outputs = a.outputs;
        ga.num_outputs = a.num_outputs;
        auto g = std::make_unique<emel_graph>();
        g->in = graph_input_from_arrays(ga, name ? std::string(name) : std::string());
        g->read_only = true;
        *out = g.release();
    });
}

EMEL_API emel_status emel_graph_num_tensors(const emel_graph* graph, size_t* out) {
    return guarded([&] {
        check_graph(graph, "emel_graph_num_tensors");
        need(out, "emel_graph_num_tensors", "out");
        *out = graph->in.num_tensors();
    });
}

EMEL_API emel_status emel_graph_num_nodes(const emel_graph* graph, size_t* out) {
    return guarded([&] {
        check_graph(graph, "emel_graph_num_nodes");
        need(out, "emel_graph_num_nodes", "out");
        *out = graph->in.num_nodes();
    });
}

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
        const int mode = static_cast<int>(o.mode);
        if (mode < EMEL_MODE_INFERENCE || mode > EMEL_MODE_BACKWARD)
            bad_arg(fn, "unknown mode " + std::to_string(mode));
        check_strategy_fit(static_cast<int>(o.strategy), static_cast<int>(o.fit), fn);
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
        opt.strategy = static_cast<Strategy>(o.strategy);
        opt.fit = o.fit == EMEL_FIT_FIRST ? Fit::First : Fit::Best;
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
        p->graph = std::make_unique<const Graph>(build_graph(in));
        p->plan = make_plan(*p->graph, opt);
        hash_plan(in, *p->graph, opt, p->plan);
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

// ----------------------------------------------------------- determinism

namespace {

const Digest& hash_of(const emel_plan& c, emel_hash_kind kind, const char* fn) {
    const PlanHashes& h = c.plan.hashes;
    switch (kind) {
        case EMEL_HASH_IR: return h.ir;
        case EMEL_HASH_EXECUTION_ORDER: return h.execution_order;
        case EMEL_HASH_ARENA_CONFIG: return h.arena_config;
        case EMEL_HASH_SHARD_SPEC: return h.shard_spec;
        case EMEL_HASH_PLAN: return h.plan;
        default: break;
    }
    bad_arg(fn, "unknown hash kind " + std::to_string(static_cast<int>(kind)));
}

void write_hex(const Digest& d, char* buf, size_t size, const char* fn) {
    need(buf, fn, "buf");
    if (size < EMEL_HASH_HEX_SIZE)
        bad_arg(fn, "buf holds " + std::to_string(size) + " chars; a hash needs " +
                        std::to_string(EMEL_HASH_HEX_SIZE) + " (64 hex digits and a NUL)");
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < d.size(); ++i) {
        buf[2 * i] = digits[d[i] >> 4];
        buf[2 * i + 1] = digits[d[i] & 15];
    }
    buf[2 * d.size()] = '\0';
}

void write_raw(const Digest& d, uint8_t* out, const char* fn) {
    need(out, fn, "out");
    std::memcpy(out, d.data(), d.size());
}

}  // namespace

EMEL_API emel_status emel_plan_hash(const emel_plan* plan, emel_hash_kind kind, uint8_t* out) {
    static const char* fn = "emel_plan_hash";
    return guarded([&] { write_raw(hash_of(check_plan(plan, fn), kind, fn), out, fn); });
}

EMEL_API emel_status emel_plan_hash_hex(const emel_plan* plan, emel_hash_kind kind, char* buf,
                                        size_t size) {
    static const char* fn = "emel_plan_hash_hex";
    return guarded([&] { write_hex(hash_of(check_plan(plan, fn), kind, fn), buf, size, fn); });
}

EMEL_API emel_status emel_plan_replay_token(const emel_plan* plan, uint8_t* out) {
    static const char* fn = "emel_plan_replay_token";
    return guarded([&] { write_raw(check_plan(plan, fn).plan.replay_token, out, fn); });
}

EMEL_API emel_status emel_plan_replay_token_hex(const emel_plan* plan, char* buf, size_t size) {
    static const char* fn = "emel_plan_replay_token_hex";
    return guarded([&] { write_hex(check_plan(plan, fn).plan.replay_token, buf, size, fn); });
}

EMEL_API emel_status emel_plan_rank(const emel_plan* plan, uint64_t* out) {
    return guarded([&] {
        const emel_plan& c = check_plan(plan, "emel_plan_rank");
        need(out, "emel_plan_rank", "out");
        *out = c.plan.rank;
    });
}

EMEL_API emel_status emel_plan_world_size(const emel_plan* plan, uint64_t* out) {
    return guarded([&] {
        const emel_plan& c = check_plan(plan, "emel_plan_world_size");
        need(out, "emel_plan_world_size", "out");
        *out = c.plan.world_size;
    });
}


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
        *out = plan->plan.arenas[a].lower_bound;
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

// ------------------------------------------------------------- placement

EMEL_API emel_status emel_place_ex(const uint64_t* lower, const uint64_t* upper,
                                   const uint64_t* size, size_t n, emel_strategy strategy,
                                   emel_fit fit, uint64_t alignment, uint64_t time_budget_ms,
                                   uint64_t capacity, uint64_t* offsets_out,
                                   uint64_t* arena_size_out) {
    static const char* fn = "emel_place";
    return guarded([&] {
        // The argument checks of emel.memory.place(), then the core's place_rows().
        check_strategy_fit(static_cast<int>(strategy), static_cast<int>(fit), fn);
        if (n > 0) {
            need(lower, fn, "lower");
            need(upper, fn, "upper");
            need(size, fn, "size");
            need(offsets_out, fn, "offsets_out");
        }
        if (n >= kNone) bad_arg(fn, "too many buffers (" + std::to_string(n) + ")");
        const Fit f = fit == EMEL_FIT_FIRST ? Fit::First : Fit::Best;
        const RowPlacement r = place_rows(std::vector<uint64_t>(lower, lower + n),
                                          std::vector<uint64_t>(upper, upper + n),
                                          std::vector<uint64_t>(size, size + n), alignment,
                                          static_cast<Strategy>(strategy), f,
                                          budget_units(time_budget_ms), capacity);
        const Placement& placed = r.placed;
        if (placed.offset.size() != n)
            throw ApiError{EMEL_INTERNAL, "placement returned a wrong number of offsets", {}, {}, {}};
        std::copy(placed.offset.begin(), placed.offset.end(), offsets_out);
        if (arena_size_out) *arena_size_out = r.arena_size;
    });
}

EMEL_API emel_status emel_place(const uint64_t* lower, const uint64_t* upper,
                                const uint64_t* size, size_t n, emel_strategy strategy,
                                uint64_t alignment, uint64_t time_budget_ms,
                                uint64_t* offsets_out, uint64_t* arena_size_out) {
    return emel_place_ex(lower, upper, size, n, strategy, EMEL_FIT_BEST, alignment,
                         time_budget_ms, 0, offsets_out, arena_size_out);
}

}  // extern "C"

// ------------------------------------------------ ggml-style allocators

struct emel_ggml_graph {
    ggml::Graph graph;
    std::vector<ggml::Address> bound;  // per tensor: tensor->buffer / data once allocated
    // Layout ids: (explicit?, value) -> the dense id the core compares.
    std::map<std::pair<bool, uint64_t>, uint64_t> layouts;
};

struct emel_ggml_buffer_type {
    ggml::BufferType type;
};

struct emel_ggml_gallocr {
    ggml::GraphAllocator alloc;
};

struct emel_ggml_tallocr {
    ggml::TensorAllocator alloc;
};

namespace {

uint64_t layout_id(emel_ggml_graph& g, bool explicit_layout, uint64_t value) {
    auto it = g.layouts.emplace(std::make_pair(explicit_layout, value), g.layouts.size()).first;
    return it->second;
}

int32_t index32(size_t index, const char* fn, const char* what) {
    if (index == EMEL_NO_INDEX) return -1;
    if (index >= static_cast<size_t>(INT32_MAX))
        bad_arg(fn, std::string(what) + " " + std::to_string(index) + " is not a tensor index");
    return static_cast<int32_t>(index);
}

emel_ggml_graph& ggml_graph(emel_ggml_graph* g, const char* fn) {
    need(g, fn, "graph");
    return *g;
}

const emel_ggml_graph& ggml_graph(const emel_ggml_graph* g, const char* fn) {
    need(g, fn, "graph");
    return *g;
}

size_t ggml_tensor_at(const emel_ggml_graph& g, size_t tensor, const char* fn) {
    if (tensor >= g.graph.tensors.size())
        bad_arg(fn, "tensor index " + std::to_string(tensor) + " out of range (" +
                        std::to_string(g.graph.tensors.size()) + " tensors)");
    return tensor;
}

void fill_address(const ggml::Address& a, emel_ggml_address* out) {
    emel_ggml_address r;
    std::memset(&r, 0, sizeof r);
    r.buffer_id = a.buffer_id;
    r.chunk = a.buffer_id < 0 ? -1 : a.chunk;
    r.offset = a.buffer_id < 0 ? 0 : a.offset;
    std::memcpy(out, &r, sizeof r);
}

const ggml::BufferType& buffer_type(const emel_ggml_buffer_type* t, const char* fn) {
    need(t, fn, "type");
    return t->type;
}

// Buffer ids per node / leaf: NULL = all 0 (the core's empty list).
std::vector<int32_t> buffer_ids(const int32_t* ids, size_t n) {
    return ids ? std::vector<int32_t>(ids, ids + n) : std::vector<int32_t>();
}

std::vector<int32_t> ctx_tensors(const emel_ggml_graph& g, const size_t* tensors, size_t n,
                                 const char* fn) {
    std::vector<int32_t> out;
    if (tensors == nullptr) {
        if (n != 0 && n != g.graph.tensors.size())
            bad_arg(fn, "tensors is NULL but n is " + std::to_string(n));
        for (size_t t = 0; t < g.graph.tensors.size(); ++t) out.push_back(static_cast<int32_t>(t));
        return out;
    }
    for (size_t i = 0; i < n; ++i)
        out.push_back(static_cast<int32_t>(ggml_tensor_at(g, tensors[i], fn)));
    return out;
}

const ggml::GraphAllocator& gallocr(const emel_ggml_gallocr* a, const char* fn) {
    need(a, fn, "galloc");
    return a->alloc;
}

int32_t buffer_id_at(const ggml::GraphAllocator& a, int32_t buffer_id, const char* fn) {
    if (buffer_id < 0 || static_cast<size_t>(buffer_id) >= a.num_buffer_ids())
        bad_arg(fn, "buffer id " + std::to_string(buffer_id) + " out of range (" +
                        std::to_string(a.num_buffer_ids()) + " buffer ids)");
    return buffer_id;
}

// The chunks of a buffer id's buffer; none for an id sharing an earlier id's.
std::vector<uint64_t> chunks_of(const ggml::GraphAllocator& a, int32_t buffer_id) {
    const int32_t k = a.type_of(static_cast<size_t>(buffer_id));
    for (int32_t b = 0; b < buffer_id; ++b)
        if (a.type_of(static_cast<size_t>(b)) == k) return {};
    const auto& chunks = a.buffer_chunks(static_cast<size_t>(k));
    return chunks ? *chunks : std::vector<uint64_t>();
}

size_t planned_tensor(const ggml::GraphAllocator& a, size_t tensor, const char* fn) {
    if (!a.has_plan()) bad_arg(fn, "nothing has been reserved yet");
    if (tensor >= a.addresses().size())
        bad_arg(fn, "tensor index " + std::to_string(tensor) + " out of range (the graph planned has " +
                        std::to_string(a.addresses().size()) + " tensors)");
    return tensor;
}

}  // namespace

extern "C" {

EMEL_API emel_status emel_ggml_graph_create(emel_ggml_graph** out) {
    return guarded([&] {
        need(out, "emel_ggml_graph_create", "out");
        *out = nullptr;
        *out = std::make_unique<emel_ggml_graph>().release();
    });
}

EMEL_API void emel_ggml_graph_destroy(emel_ggml_graph* graph) { delete graph; }

EMEL_API emel_status emel_ggml_graph_add_tensor(emel_ggml_graph* graph, const char* name,
                                                uint64_t nbytes, emel_ggml_op op, uint32_t flags,
                                                const size_t* srcs, size_t n_srcs,
                                                size_t view_src, uint64_t view_offs,
                                                size_t* index_out) {
    static const char* fn = "emel_ggml_graph_add_tensor";
    return guarded([&] {
        emel_ggml_graph& g = ggml_graph(graph, fn);
        const size_t index = g.graph.tensors.size();
        if (index >= static_cast<size_t>(INT32_MAX)) bad_arg(fn, "too many tensors");
        const int o = static_cast<int>(op);
        if (o < EMEL_GGML_OP_NONE || o > EMEL_GGML_OP_INPLACE)
            bad_arg(fn, "unknown op " + std::to_string(o));
        if (flags & ~uint32_t{EMEL_GGML_FLAG_INPUT | EMEL_GGML_FLAG_OUTPUT | EMEL_GGML_FLAG_HAS_DATA})
            bad_arg(fn, "unknown flags " + std::to_string(flags));
        if (n_srcs > EMEL_GGML_MAX_SRC)
            bad_arg(fn, std::to_string(n_srcs) + " sources (at most " +
                            std::to_string(EMEL_GGML_MAX_SRC) + ")");
        if (n_srcs > 0) need(srcs, fn, "srcs");
        ggml::Tensor t;
        t.name = name ? std::string(name) : "#" + std::to_string(index);
        t.size = nbytes;
        t.view_src = index32(view_src, fn, "view_src");
        t.view_offs = t.view_src >= 0 ? view_offs : 0;
        t.flags = static_cast<uint8_t>(flags);
        t.op_none = o == EMEL_GGML_OP_NONE;
        t.op_inplace = o == EMEL_GGML_OP_INPLACE;
        for (size_t s = 0; s < n_srcs; ++s) t.src[s] = index32(srcs[s], fn, "src");
        // Everything that can fail (allocation) before anything changes.
        g.graph.tensors.reserve(index + 1);
        g.bound.reserve(index + 1);
        t.layout = layout_id(g, false, nbytes);
        g.graph.tensors.push_back(std::move(t));
        g.bound.emplace_back();
        if (index_out) *index_out = index;
    });
}

EMEL_API emel_status emel_ggml_graph_set_layout(emel_ggml_graph* graph, size_t tensor,
                                                uint64_t layout) {
    static const char* fn = "emel_ggml_graph_set_layout";
    return guarded([&] {
        emel_ggml_graph& g = ggml_graph(graph, fn);
        const size_t t = ggml_tensor_at(g, tensor, fn);
        g.graph.tensors[t].layout = layout_id(g, true, layout);
    });
}

EMEL_API emel_status emel_ggml_graph_set_flags(emel_ggml_graph* graph, size_t tensor,
                                               uint32_t flags) {
    static const char* fn = "emel_ggml_graph_set_flags";
    return guarded([&] {
        emel_ggml_graph& g = ggml_graph(graph, fn);
        const size_t t = ggml_tensor_at(g, tensor, fn);
        if (flags & ~uint32_t{EMEL_GGML_FLAG_INPUT | EMEL_GGML_FLAG_OUTPUT | EMEL_GGML_FLAG_HAS_DATA})
            bad_arg(fn, "unknown flags " + std::to_string(flags));
        g.graph.tensors[t].flags = static_cast<uint8_t>(flags);
    });
}

EMEL_API emel_status emel_ggml_graph_flags(const emel_ggml_graph* graph, size_t tensor,
                                           uint32_t* out) {
    static const char* fn = "emel_ggml_graph_flags";
    return guarded([&] {
        const emel_ggml_graph& g = ggml_graph(graph, fn);
        const size_t t = ggml_tensor_at(g, tensor, fn);
        need(out, fn, "out");
        *out = g.graph.tensors[t].flags;
    });
}

EMEL_API emel_status emel_ggml_graph_add_node(emel_ggml_graph* graph, size_t tensor) {
    static const char* fn = "emel_ggml_graph_add_node";
    return guarded([&] {
        emel_ggml_graph& g = ggml_graph(graph, fn);
        g.graph.nodes.push_back(static_cast<int32_t>(ggml_tensor_at(g, tensor, fn)));
    });
}

EMEL_API emel_status emel_ggml_graph_add_leaf(emel_ggml_graph* graph, size_t tensor) {
    static const char* fn = "emel_ggml_graph_add_leaf";
    return guarded([&] {
        emel_ggml_graph& g = ggml_graph(graph, fn);
        g.graph.leafs.push_back(static_cast<int32_t>(ggml_tensor_at(g, tensor, fn)));
    });
}

EMEL_API emel_status emel_ggml_graph_build_forward_expand(emel_ggml_graph* graph, size_t tensor) {
    static const char* fn = "emel_ggml_graph_build_forward_expand";
    return guarded([&] {
        emel_ggml_graph& g = ggml_graph(graph, fn);
        ggml_tensor_at(g, tensor, fn);
        ggml::Graph expanded = g.graph;  // unchanged if a source index is bad
        ggml::build_forward_expand(expanded, static_cast<int32_t>(tensor));
        g.graph = std::move(expanded);
    });
}

EMEL_API emel_status emel_ggml_graph_num_tensors(const emel_ggml_graph* graph, size_t* out) {
    return guarded([&] {
        const emel_ggml_graph& g = ggml_graph(graph, "emel_ggml_graph_num_tensors");
        need(out, "emel_ggml_graph_num_tensors", "out");
        *out = g.graph.tensors.size();
    });
}

EMEL_API emel_status emel_ggml_graph_num_nodes(const emel_ggml_graph* graph, size_t* out) {
    return guarded([&] {
        const emel_ggml_graph& g = ggml_graph(graph, "emel_ggml_graph_num_nodes");
        need(out, "emel_ggml_graph_num_nodes", "out");
        *out = g.graph.nodes.size();
    });
}

EMEL_API emel_status emel_ggml_graph_num_leafs(const emel_ggml_graph* graph, size_t* out) {
    return guarded([&] {
        const emel_ggml_graph& g = ggml_graph(graph, "emel_ggml_graph_num_leafs");
        need(out, "emel_ggml_graph_num_leafs", "out");
        *out = g.graph.leafs.size();
    });
}

EMEL_API emel_status emel_ggml_graph_node(const emel_ggml_graph* graph, size_t i, size_t* out) {
    static const char* fn = "emel_ggml_graph_node";
    return guarded([&] {
        const emel_ggml_graph& g = ggml_graph(graph, fn);
        need(out, fn, "out");
        if (i >= g.graph.nodes.size())
            bad_arg(fn, "node " + std::to_string(i) + " out of range (" +
                            std::to_string(g.graph.nodes.size()) + " nodes)");
        *out = static_cast<size_t>(g.graph.nodes[i]);
    });
}

EMEL_API emel_status emel_ggml_graph_leaf(const emel_ggml_graph* graph, size_t i, size_t* out) {
    static const char* fn = "emel_ggml_graph_leaf";
    return guarded([&] {
        const emel_ggml_graph& g = ggml_graph(graph, fn);
        need(out, fn, "out");
        if (i >= g.graph.leafs.size())
            bad_arg(fn, "leaf " + std::to_string(i) + " out of range (" +
                            std::to_string(g.graph.leafs.size()) + " leafs)");
        *out = static_cast<size_t>(g.graph.leafs[i]);
    });
}

EMEL_API emel_status emel_ggml_graph_tensor_address(const emel_ggml_graph* graph, size_t tensor,
                                                    emel_ggml_address* out) {
    static const char* fn = "emel_ggml_graph_tensor_address";
    return guarded([&] {
        const emel_ggml_graph& g = ggml_graph(graph, fn);
        const size_t t = ggml_tensor_at(g, tensor, fn);
        need(out, fn, "out");
        fill_address(g.bound[t], out);
    });
}

EMEL_API emel_status emel_ggml_buffer_type_create(uint64_t alignment, uint64_t max_size,
                                                  emel_ggml_buffer_type** out) {
    static const char* fn = "emel_ggml_buffer_type_create";
    return guarded([&] {
        need(out, fn, "out");
        *out = nullptr;
        if (!is_power_of_two(alignment))
            throw PlanError(ErrorCode::AlignmentViolation,
                            "buffer type alignment must be a power of two, got " + std::to_string(alignment));
        if (max_size == 0) bad_arg(fn, "max_size must be at least 1");
        auto t = std::make_unique<emel_ggml_buffer_type>();
        t->type = ggml::BufferType{alignment, max_size};
        *out = t.release();
    });
}

EMEL_API void emel_ggml_buffer_type_destroy(emel_ggml_buffer_type* type) { delete type; }

EMEL_API emel_status emel_ggml_gallocr_create(const emel_ggml_buffer_type* const* types, size_t n,
                                              const char* strategy, uint64_t time_budget_ms,
                                              emel_ggml_gallocr** out) {
    static const char* fn = "emel_ggml_gallocr_create";
    return guarded([&] {
        need(out, fn, "out");
        *out = nullptr;
        if (n == 0) bad_arg(fn, "at least one buffer type is needed");
        if (n >= static_cast<size_t>(INT32_MAX)) bad_arg(fn, "too many buffer types");
        need(types, fn, "types");
        const std::string name = strategy ? strategy : "ggml";
        std::optional<Strategy> s;
        if (!ggml::strategy_from_name(name, s))
            bad_arg(fn, "strategy must be 'ggml', 'tmmu', 'greedy_by_size', 'best_fit', 'auto' or "
                        "'optimal', got " + q(name));
        // The same handle twice is one shared buffer type, as in ggml.
        std::vector<const emel_ggml_buffer_type*> distinct;
        std::vector<ggml::BufferType> unique_types;
        std::vector<int32_t> type_of;
        for (size_t i = 0; i < n; ++i) {
            if (types[i] == nullptr) bad_arg(fn, "types[" + std::to_string(i) + "] is NULL");
            auto it = std::find(distinct.begin(), distinct.end(), types[i]);
            if (it == distinct.end()) {
                distinct.push_back(types[i]);
                unique_types.push_back(types[i]->type);
                it = distinct.end() - 1;
            }
            type_of.push_back(static_cast<int32_t>(it - distinct.begin()));
        }
        auto a = std::make_unique<emel_ggml_gallocr>(emel_ggml_gallocr{ggml::GraphAllocator(
            std::move(unique_types), std::move(type_of), s, budget_units(time_budget_ms))});
        *out = a.release();
    });
}

EMEL_API void emel_ggml_gallocr_destroy(emel_ggml_gallocr* galloc) { delete galloc; }

EMEL_API emel_status emel_ggml_gallocr_reserve(emel_ggml_gallocr* galloc,
                                               const emel_ggml_graph* graph) {
    return emel_ggml_gallocr_reserve_n(galloc, graph, nullptr, nullptr);
}

EMEL_API emel_status emel_ggml_gallocr_reserve_n(emel_ggml_gallocr* galloc,
                                                 const emel_ggml_graph* graph,
                                                 const int32_t* node_buffer_ids,
                                                 const int32_t* leaf_buffer_ids) {
    static const char* fn = "emel_ggml_gallocr_reserve_n";
    return guarded([&] {
        need(galloc, fn, "galloc");
        const emel_ggml_graph& g = ggml_graph(graph, fn);
        galloc->alloc.reserve_n(g.graph, buffer_ids(node_buffer_ids, g.graph.nodes.size()),
                                buffer_ids(leaf_buffer_ids, g.graph.leafs.size()));
    });
}

EMEL_API emel_status emel_ggml_gallocr_reserve_n_size(emel_ggml_gallocr* galloc,
                                                      const emel_ggml_graph* graph,
                                                      const int32_t* node_buffer_ids,
                                                      const int32_t* leaf_buffer_ids,
                                                      uint64_t* sizes_out) {
    static const char* fn = "emel_ggml_gallocr_reserve_n_size";
    return guarded([&] {
        need(galloc, fn, "galloc");
        const emel_ggml_graph& g = ggml_graph(graph, fn);
        need(sizes_out, fn, "sizes_out");
        const auto sizes = galloc->alloc.reserve_n_size(
            g.graph, buffer_ids(node_buffer_ids, g.graph.nodes.size()),
            buffer_ids(leaf_buffer_ids, g.graph.leafs.size()));
        std::copy(sizes.begin(), sizes.end(), sizes_out);
    });
}

EMEL_API emel_status emel_ggml_gallocr_needs_realloc(const emel_ggml_gallocr* galloc,
                                                     const emel_ggml_graph* graph, int* out) {
    static const char* fn = "emel_ggml_gallocr_needs_realloc";
    return guarded([&] {
        const ggml::GraphAllocator& a = gallocr(galloc, fn);
        const emel_ggml_graph& g = ggml_graph(graph, fn);
        need(out, fn, "out");
        *out = a.needs_realloc(g.graph) ? 1 : 0;
    });
}

EMEL_API emel_status emel_ggml_gallocr_alloc_graph(emel_ggml_gallocr* galloc,
                                                   emel_ggml_graph* graph, int* allocated) {
    static const char* fn = "emel_ggml_gallocr_alloc_graph";
    return guarded([&] {
        need(galloc, fn, "galloc");
        emel_ggml_graph& g = ggml_graph(graph, fn);
        need(allocated, fn, "allocated");
        std::vector<ggml::Address> bound = g.bound;  // the graph changes only on success
        const bool ok = galloc->alloc.alloc_graph(g.graph, bound);
        g.bound = std::move(bound);
        *allocated = ok ? 1 : 0;
    });
}

EMEL_API emel_status emel_ggml_gallocr_get_buffer_size(const emel_ggml_gallocr* galloc,
                                                       int32_t buffer_id, uint64_t* out) {
    static const char* fn = "emel_ggml_gallocr_get_buffer_size";
    return guarded([&] {
        const ggml::GraphAllocator& a = gallocr(galloc, fn);
        need(out, fn, "out");
        *out = a.buffer_size(buffer_id_at(a, buffer_id, fn));
    });
}

EMEL_API emel_status emel_ggml_gallocr_num_chunks(const emel_ggml_gallocr* galloc,
                                                  int32_t buffer_id, size_t* out) {
    static const char* fn = "emel_ggml_gallocr_num_chunks";
    return guarded([&] {
        const ggml::GraphAllocator& a = gallocr(galloc, fn);
        need(out, fn, "out");
        *out = chunks_of(a, buffer_id_at(a, buffer_id, fn)).size();
    });
}

EMEL_API emel_status emel_ggml_gallocr_chunk_size(const emel_ggml_gallocr* galloc,
                                                  int32_t buffer_id, size_t chunk, uint64_t* out) {
    static const char* fn = "emel_ggml_gallocr_chunk_size";
    return guarded([&] {
        const ggml::GraphAllocator& a = gallocr(galloc, fn);
        need(out, fn, "out");
        const auto chunks = chunks_of(a, buffer_id_at(a, buffer_id, fn));
        if (chunk >= chunks.size())
            bad_arg(fn, "chunk " + std::to_string(chunk) + " out of range (" +
                            std::to_string(chunks.size()) + " chunks)");
        *out = chunks[chunk];
    });
}

EMEL_API emel_status emel_ggml_gallocr_tensor_address(const emel_ggml_gallocr* galloc,
                                                      size_t tensor, emel_ggml_address* out) {
    static const char* fn = "emel_ggml_gallocr_tensor_address";
    return guarded([&] {
        const ggml::GraphAllocator& a = gallocr(galloc, fn);
        const size_t t = planned_tensor(a, tensor, fn);
        need(out, fn, "out");
        fill_address(a.addresses()[t], out);
    });
}

EMEL_API emel_status emel_ggml_gallocr_tensor_inplace_of(const emel_ggml_gallocr* galloc,
                                                         size_t tensor, size_t* out) {
    static const char* fn = "emel_ggml_gallocr_tensor_inplace_of";
    return guarded([&] {
        const ggml::GraphAllocator& a = gallocr(galloc, fn);
        const size_t t = planned_tensor(a, tensor, fn);
        need(out, fn, "out");
        const int32_t p = a.inplace_of()[t];
        *out = p < 0 ? EMEL_NO_INDEX : static_cast<size_t>(p);
    });
}

EMEL_API emel_status emel_ggml_tallocr_create(uint64_t buffer_size,
                                              const emel_ggml_buffer_type* type,
                                              emel_ggml_tallocr** out) {
    static const char* fn = "emel_ggml_tallocr_create";
    return guarded([&] {
        need(out, fn, "out");
        *out = nullptr;
        const ggml::BufferType& t = buffer_type(type, fn);
        auto a = std::make_unique<emel_ggml_tallocr>(
            emel_ggml_tallocr{ggml::TensorAllocator(buffer_size, t.alignment)});
        *out = a.release();
    });
}

EMEL_API void emel_ggml_tallocr_destroy(emel_ggml_tallocr* talloc) { delete talloc; }

EMEL_API emel_status emel_ggml_tallocr_alloc(emel_ggml_tallocr* talloc, uint64_t nbytes,
                                             const char* name, uint64_t* offset_out) {
    static const char* fn = "emel_ggml_tallocr_alloc";
    return guarded([&] {
        need(talloc, fn, "talloc");
        need(offset_out, fn, "offset_out");
        *offset_out = talloc->alloc.alloc(nbytes, name ? std::string(name) : std::string());
    });
}

EMEL_API emel_status emel_ggml_tallocr_offset(const emel_ggml_tallocr* talloc, uint64_t* out) {
    static const char* fn = "emel_ggml_tallocr_offset";
    return guarded([&] {
        need(talloc, fn, "talloc");
        need(out, fn, "out");
        *out = talloc->alloc.offset();
    });
}

EMEL_API emel_status emel_ggml_alloc_ctx_tensors(emel_ggml_graph* graph, const size_t* tensors,
                                                 size_t n, const emel_ggml_buffer_type* type,
                                                 uint64_t* sizes_out, size_t capacity,
                                                 size_t* num_buffers_out) {
    static const char* fn = "emel_ggml_alloc_ctx_tensors";
    return guarded([&] {
        emel_ggml_graph& g = ggml_graph(graph, fn);
        const ggml::BufferType& t = buffer_type(type, fn);
        need(num_buffers_out, fn, "num_buffers_out");
        if (capacity > 0) need(sizes_out, fn, "sizes_out");
        const std::vector<int32_t> list = ctx_tensors(g, tensors, n, fn);
        // Work on copies: the graph changes only on success.
        ggml::Graph placed = g.graph;
        std::vector<ggml::Address> bound = g.bound;
        const ggml::CtxPlacement r = ggml::alloc_ctx_tensors(placed, list, t, bound);
        g.graph = std::move(placed);
        g.bound = std::move(bound);
        std::copy_n(r.buffer_sizes.begin(), std::min(capacity, r.buffer_sizes.size()), sizes_out);
        *num_buffers_out = r.buffer_sizes.size();
    });
}

EMEL_API emel_status emel_ggml_alloc_ctx_tensors_size(const emel_ggml_graph* graph,
                                                      const size_t* tensors, size_t n,
                                                      const emel_ggml_buffer_type* type,
                                                      uint64_t* out) {
    static const char* fn = "emel_ggml_alloc_ctx_tensors_size";
    return guarded([&] {
        const emel_ggml_graph& g = ggml_graph(graph, fn);
        const ggml::BufferType& t = buffer_type(type, fn);
        need(out, fn, "out");
        const std::vector<int32_t> list = ctx_tensors(g, tensors, n, fn);
        ggml::Graph placed = g.graph;
        std::vector<ggml::Address> bound = g.bound;
        const ggml::CtxPlacement r = ggml::alloc_ctx_tensors(placed, list, t, bound);
        uint64_t total = 0;
        for (uint64_t size : r.buffer_sizes) {
            auto sum = checked_add(total, size);
            if (!sum) throw PlanError(ErrorCode::AllocationOverflow, "total bytes exceed 2^64-1");
            total = *sum;
        }
        *out = total;
    });
}

}  // extern "C"
