// The C API (include/emel/memory.h): graphs (emel_graph_*). Helpers shared
// with the other areas, and guarded(), are in status.hpp.
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

using namespace emel::memory;
using namespace emel::memory::c_api;

namespace {

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

}  // namespace

extern "C" {

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
                int r, uint64_t alignment, int can_inplace, const char* view_base_id,
                uint64_t view_offset) {
    check_graph(graph, fn);
    need(id, fn, "id");
    need(dtype, fn, "dtype");
    if (ndim > 0) need(shape, fn, "shape");
    if (!is_role_code(r))
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
        add_graph_tensor(graph, "emel_graph_add_tensor", id, "bytes", nullptr, 0, true, nbytes,
                         enum_arg(role), alignment, can_inplace, view_base_id, view_offset);
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
                         nbytes, enum_arg(role), alignment, can_inplace, view_base_id, view_offset);
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
        const int ph = enum_arg(phase);
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

}  // extern "C"
