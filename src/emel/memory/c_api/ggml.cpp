// The C API (include/emel/memory.h): the ggml-style allocators (emel_ggml_*,
// docs/ggml.md). Helpers shared with the other areas, and guarded(), are in
// status.hpp.
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
#include "emel/memory/ggml/ggml_alloc.hpp"
#include "emel/memory/ggml/graph_allocator.hpp"
#include "emel/memory/placement/placement.hpp"

using namespace emel::memory;
using namespace emel::memory::c_api;

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
        const int o = enum_arg(op);
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
            bad_arg(fn, "strategy must be " + quoted_names(kStrategies, "ggml") + ", got " + q(name));
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
                                buffer_ids(leaf_buffer_ids, g.graph.leafs.size()), &g.bound);
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
            buffer_ids(leaf_buffer_ids, g.graph.leafs.size()), &g.bound);
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
        *out = a.needs_realloc(g.graph, &g.bound) ? 1 : 0;
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
        *out = a.chunk_sizes(buffer_id_at(a, buffer_id, fn)).size();
    });
}

EMEL_API emel_status emel_ggml_gallocr_chunk_size(const emel_ggml_gallocr* galloc,
                                                  int32_t buffer_id, size_t chunk, uint64_t* out) {
    static const char* fn = "emel_ggml_gallocr_chunk_size";
    return guarded([&] {
        const ggml::GraphAllocator& a = gallocr(galloc, fn);
        need(out, fn, "out");
        const auto chunks = a.chunk_sizes(buffer_id_at(a, buffer_id, fn));
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
