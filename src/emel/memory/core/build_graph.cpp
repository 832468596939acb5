// build_graph: graph validation and interning, docs/algorithm.md §1 phases
// B–E. One function per phase, named as in the Python reference
// (python/emel/memory/reference.py: validate_document, compute_sizes,
// resolve_views, check_order, _dataflow_has_cycle), so an E0 difference can be
// traced function to function. The error order is the phases' order.
#include <algorithm>
#include <numeric>
#include <string_view>
#include <unordered_map>

#include "emel/memory/core/checked_math.hpp"
#include "emel/memory/core/errors.hpp"
#include "emel/memory/core/graph.hpp"

namespace emel::memory {

namespace {

[[noreturn]] void fail(ErrorCode code, std::string msg, std::string tensor = {},
                       std::string node = {}) {
    throw PlanError(code, std::move(msg), std::move(tensor), std::move(node));
}

// Element size of the fixed-size dtypes; 0 for any other name.
uint64_t element_size(const std::string& dtype) {
    static const std::pair<const char*, uint64_t> kSizes[] = {
        {"float64", 8},       {"int64", 8},       {"float32", 4}, {"int32", 4},
        {"float16", 2},       {"bfloat16", 2},    {"int16", 2},   {"float8_e4m3fn", 1},
        {"float8_e5m2", 1},   {"int8", 1},        {"uint8", 1},   {"bool", 1},
    };
    for (const auto& [name, bytes] : kSizes)
        if (dtype == name) return bytes;
    return 0;
}

std::string q(const std::string& id) { return "'" + id + "'"; }

using IdMap = std::unordered_map<std::string_view, uint32_t>;

// What phase B interns besides the Graph's own arrays: node inputs and
// outputs as tensor indices (document order) and each step's node.
struct Interned {
    std::vector<uint32_t> node_in, node_out;
    std::vector<uint32_t> step_node;  // step -> node (document index)
};

// Phase A, repeated for callers that skip the reader: alignments.
void check_alignments(const GraphInput& in) {
    for (size_t t = 0; t < in.num_tensors(); ++t)
        if (in.alignment[t] != 0 && !is_power_of_two(in.alignment[t]))
            fail(ErrorCode::AlignmentViolation,
                 "tensor " + q(in.tensor_id[t]) + ": alignment must be a power of two, got " +
                     std::to_string(in.alignment[t]),
                 in.tensor_id[t]);
}

// B1, B2: tensor ids and node ids are unique; the second occurrence is named.
void index_ids(const GraphInput& in, IdMap& tensor_index, IdMap& node_index) {
    const size_t T = in.num_tensors(), N = in.num_nodes();
    tensor_index.reserve(T * 2);
    for (size_t t = 0; t < T; ++t)
        if (!tensor_index.emplace(in.tensor_id[t], static_cast<uint32_t>(t)).second)
            fail(ErrorCode::InvalidIrShapes, "duplicate tensor id " + q(in.tensor_id[t]),
                 in.tensor_id[t]);
    node_index.reserve(N * 2);
    for (size_t n = 0; n < N; ++n)
        if (!node_index.emplace(in.node_id[n], static_cast<uint32_t>(n)).second)
            fail(ErrorCode::InvalidIrShapes, "duplicate node id " + q(in.node_id[n]), {},
                 in.node_id[n]);
}

uint32_t lookup(const IdMap& index, const std::string& id) {
    auto it = index.find(id);
    return it == index.end() ? kNone : it->second;
}

// B3: per tensor, view_of.base and must_not_alias name known tensors; no self-base.
void resolve_tensor_references(const GraphInput& in, const IdMap& tensor_index, Graph& g) {
    const size_t T = in.num_tensors();
    g.view_base.assign(T, kNone);
    for (size_t t = 0; t < T; ++t) {
        if (in.is_view[t]) {
            uint32_t b = lookup(tensor_index, in.view_base[t]);
            if (b == kNone)
                fail(ErrorCode::InvalidIrShapes,
                     "tensor " + q(in.tensor_id[t]) + " is a view of unknown tensor " +
                         q(in.view_base[t]),
                     in.tensor_id[t]);
            if (b == t)
                fail(ErrorCode::InvalidIrShapes,
                     "tensor " + q(in.tensor_id[t]) + " is a view of itself", in.tensor_id[t]);
            g.view_base[t] = b;
        }
        for (uint64_t k = in.must_not_alias_start[t]; k < in.must_not_alias_start[t + 1]; ++k) {
            uint32_t other = lookup(tensor_index, in.must_not_alias[k]);
            if (other == kNone)
                fail(ErrorCode::InvalidIrShapes,
                     "tensor " + q(in.tensor_id[t]) + ": must_not_alias names unknown tensor " +
                         q(in.must_not_alias[k]),
                     in.tensor_id[t]);
            g.must_not_alias.emplace_back(static_cast<uint32_t>(t), other);
        }
    }
}

// B4: per node, inputs and outputs are known tensors (the error names both).
void resolve_node_references(const GraphInput& in, const IdMap& tensor_index, Interned& x) {
    x.node_in.reserve(in.node_inputs.size());
    x.node_out.reserve(in.node_outputs.size());
    for (size_t n = 0; n < in.num_nodes(); ++n) {
        for (uint64_t k = in.node_inputs_start[n]; k < in.node_inputs_start[n + 1]; ++k) {
            uint32_t t = lookup(tensor_index, in.node_inputs[k]);
            if (t == kNone)
                fail(ErrorCode::InvalidIrShapes,
                     "node " + q(in.node_id[n]) + " reads unknown tensor " + q(in.node_inputs[k]),
                     in.node_inputs[k], in.node_id[n]);
            x.node_in.push_back(t);
        }
        for (uint64_t k = in.node_outputs_start[n]; k < in.node_outputs_start[n + 1]; ++k) {
            uint32_t t = lookup(tensor_index, in.node_outputs[k]);
            if (t == kNone)
                fail(ErrorCode::InvalidIrShapes,
                     "node " + q(in.node_id[n]) + " writes unknown tensor " +
                         q(in.node_outputs[k]),
                     in.node_outputs[k], in.node_id[n]);
            x.node_out.push_back(t);
        }
    }
}

// B5: no tensor is produced twice (by two nodes, or twice by one node).
void check_single_producers(const GraphInput& in, const Interned& x) {
    std::vector<uint32_t> producer_node(in.num_tensors(), kNone);
    for (size_t n = 0; n < in.num_nodes(); ++n)
        for (uint64_t k = in.node_outputs_start[n]; k < in.node_outputs_start[n + 1]; ++k) {
            uint32_t t = x.node_out[k];
            if (producer_node[t] != kNone)
                fail(ErrorCode::InvalidIrShapes,
                     "tensor " + q(in.tensor_id[t]) + " is produced twice (by " +
                         q(in.node_id[producer_node[t]]) + " and " + q(in.node_id[n]) + ")",
                     in.tensor_id[t], in.node_id[n]);
            producer_node[t] = static_cast<uint32_t>(n);
        }
}

// B6: execution_order names known nodes, none twice, every node once; without
// one, the steps are the document's order.
std::vector<uint32_t> execution_order_steps(const GraphInput& in, const IdMap& node_index) {
    const size_t N = in.num_nodes();
    std::vector<uint32_t> step_node(N);
    if (!in.has_execution_order) {
        std::iota(step_node.begin(), step_node.end(), 0u);
        return step_node;
    }
    std::vector<uint8_t> seen(N, 0);
    // More than N known entries must repeat one, caught before step_node overflows.
    size_t s = 0;
    for (const auto& id : in.execution_order) {
        auto it = node_index.find(id);
        if (it == node_index.end())
            fail(ErrorCode::InvalidIrShapes, "execution_order names unknown node " + q(id), {}, id);
        if (seen[it->second])
            fail(ErrorCode::InvalidIrShapes, "execution_order lists node " + q(id) + " twice", {},
                 id);
        seen[it->second] = 1;
        step_node[s++] = it->second;
    }
    for (size_t n = 0; n < N; ++n)
        if (!seen[n])
            fail(ErrorCode::InvalidIrShapes,
                 "node " + q(in.node_id[n]) + " is missing from execution_order", {},
                 in.node_id[n]);
    return step_node;
}

// B7: top-level outputs are known tensors.
void mark_listed_outputs(const GraphInput& in, const IdMap& tensor_index, Graph& g) {
    g.listed_output.assign(in.num_tensors(), 0);
    for (const auto& id : in.outputs) {
        uint32_t t = lookup(tensor_index, id);
        if (t == kNone) fail(ErrorCode::InvalidIrShapes, "outputs names unknown tensor " + q(id), id);
        g.listed_output[t] = 1;
    }
}

// Phase B — identity (reference.validate_document, B1–B7).
Interned validate_document(const GraphInput& in, Graph& g) {
    IdMap tensor_index, node_index;
    index_ids(in, tensor_index, node_index);
    g.name = in.name;
    g.num_tensors = static_cast<uint32_t>(in.num_tensors());
    g.num_steps = static_cast<uint32_t>(in.num_nodes());
    g.tensor_id = in.tensor_id;
    Interned x;
    resolve_tensor_references(in, tensor_index, g);
    resolve_node_references(in, tensor_index, x);
    check_single_producers(in, x);
    x.step_node = execution_order_steps(in, node_index);
    mark_listed_outputs(in, tensor_index, g);
    return x;
}

// Phase C — sizes (reference.compute_sizes).
void compute_sizes(const GraphInput& in, Graph& g) {
    const size_t T = in.num_tensors();
    g.size.assign(T, 0);
    for (size_t t = 0; t < T; ++t) {
        const std::string& id = in.tensor_id[t];
        const uint64_t elem = element_size(in.dtype[t]);
        if (elem == 0 && !in.has_nbytes[t])
            fail(ErrorCode::InvalidIrShapes,
                 "tensor " + q(id) + ": dtype " + q(in.dtype[t]) +
                     " has no fixed element size, so nbytes is required",
                 id);
        if (elem == 0) {
            g.size[t] = in.nbytes[t];
            continue;
        }
        uint64_t bytes = elem;
        bool zero = false;
        for (uint64_t k = in.dims_start[t]; k < in.dims_start[t + 1]; ++k)
            if (in.dims[k] == 0) zero = true;
        if (zero) {
            bytes = 0;
        } else {
            for (uint64_t k = in.dims_start[t]; k < in.dims_start[t + 1]; ++k) {
                auto m = checked_mul(bytes, in.dims[k]);
                if (!m)
                    fail(ErrorCode::AllocationOverflow,
                         "tensor " + q(id) + ": shape x element size exceeds 2^64-1 bytes", id);
                bytes = *m;
            }
        }
        if (in.has_nbytes[t] && !in.is_view[t] && in.nbytes[t] != bytes)
            fail(ErrorCode::InvalidIrShapes,
                 "tensor " + q(id) + ": nbytes " + std::to_string(in.nbytes[t]) +
                     " disagrees with shape x element size " + std::to_string(bytes),
                 id);
        g.size[t] = in.has_nbytes[t] ? in.nbytes[t] : bytes;
    }
}

// The views, each after its base when the base is a view itself, so a value
// defined along view chains can be filled in by one loop without recursion.
// Needs acyclic chains (phase D pass 1). (reference._views_base_first)
std::vector<uint32_t> views_base_first(const Graph& g) {
    const uint32_t T = static_cast<uint32_t>(g.view_base.size());
    std::vector<uint32_t> order, path;
    std::vector<uint8_t> done(T, 0);
    for (uint32_t v = 0; v < T; ++v) {
        if (g.view_base[v] == kNone || done[v]) continue;
        path.clear();
        for (uint32_t cur = v; g.view_base[cur] != kNone && !done[cur]; cur = g.view_base[cur])
            path.push_back(cur);
        for (size_t k = path.size(); k-- > 0;) {
            done[path[k]] = 1;
            order.push_back(path[k]);
        }
    }
    return order;
}

// Phase D pass 1, per view in document order: its chain reaches a storage root
// (state: 0 new, 1 on the current walk, 2 done), and it lies inside its direct base.
void resolve_view_roots(const GraphInput& in, Graph& g) {
    const size_t T = in.num_tensors();
    g.root.resize(T);
    for (size_t t = 0; t < T; ++t) g.root[t] = static_cast<uint32_t>(t);
    std::vector<uint8_t> state(T, 0);
    std::vector<uint32_t> path;
    for (size_t v = 0; v < T; ++v) {
        if (g.view_base[v] == kNone) continue;
        if (state[v] != 2) {
            path.clear();
            uint32_t cur = static_cast<uint32_t>(v);
            while (g.view_base[cur] != kNone && state[cur] == 0) {
                state[cur] = 1;
                path.push_back(cur);
                cur = g.view_base[cur];
            }
            if (g.view_base[cur] != kNone && state[cur] == 1)
                fail(ErrorCode::InvalidIrShapes,
                     "tensor " + q(in.tensor_id[v]) +
                         ": its chain of view_of bases loops back to " + q(in.tensor_id[cur]),
                     in.tensor_id[v]);
            const uint32_t r = g.view_base[cur] == kNone ? cur : g.root[cur];
            for (uint32_t p : path) {
                g.root[p] = r;
                state[p] = 2;
            }
        }
        const uint32_t b = g.view_base[v];
        auto end = checked_add(in.view_byte_offset[v], g.size[v]);
        if (!end)
            fail(ErrorCode::AllocationOverflow,
                 "view " + q(in.tensor_id[v]) + ": byte_offset + nbytes exceeds 2^64-1",
                 in.tensor_id[v]);
        if (*end > g.size[b])
            fail(ErrorCode::InvalidIrShapes,
                 "view " + q(in.tensor_id[v]) + " covers bytes [" +
                     std::to_string(in.view_byte_offset[v]) + ", " + std::to_string(*end) +
                     ") but its base " + q(in.tensor_id[b]) + " has only " +
                     std::to_string(g.size[b]) + " bytes",
                 in.tensor_id[v]);
    }
}

// Phase D pass 2: root offsets, and each view's offset a multiple of its alignment.
void resolve_root_offsets(const GraphInput& in, Graph& g) {
    const size_t T = in.num_tensors();
    g.root_offset.assign(T, 0);
    for (uint32_t v : views_base_first(g))
        g.root_offset[v] = g.root_offset[g.view_base[v]] + in.view_byte_offset[v];
    for (size_t v = 0; v < T; ++v)
        if (g.view_base[v] != kNone && in.alignment[v] != 0 && g.root_offset[v] % in.alignment[v] != 0)
            fail(ErrorCode::AlignmentViolation,
                 "view " + q(in.tensor_id[v]) + " starts at byte " +
                     std::to_string(g.root_offset[v]) + " of its root " +
                     q(in.tensor_id[g.root[v]]) + ", not a multiple of its alignment " +
                     std::to_string(in.alignment[v]),
                 in.tensor_id[v]);
}

// Phase D pass 3: must_not_alias pairs that share a root and intersect can never be honoured.
void check_must_not_alias(const GraphInput& in, const Graph& g) {
    for (const auto& [a, b] : g.must_not_alias) {
        if (g.root[a] != g.root[b]) continue;
        const uint64_t a0 = g.root_offset[a], a1 = a0 + g.size[a];
        const uint64_t b0 = g.root_offset[b], b1 = b0 + g.size[b];
        if (g.size[a] != 0 && g.size[b] != 0 && a0 < b1 && b0 < a1)
            fail(ErrorCode::InvalidIrShapes,
                 "tensor " + q(in.tensor_id[a]) + " must not alias " + q(in.tensor_id[b]) +
                     ", but both cover the same bytes of " + q(in.tensor_id[g.root[a]]),
                 in.tensor_id[a]);
    }
}

// Phase D — views, three passes (reference.resolve_views).
void resolve_views(const GraphInput& in, Graph& g) {
    resolve_view_roots(in, g);
    resolve_root_offsets(in, g);
    check_must_not_alias(in, g);
}

// Steps: nodes in execution order, with their inputs, outputs and producers.
void build_steps(const GraphInput& in, const Interned& x, Graph& g) {
    const size_t N = in.num_nodes();
    g.step_node_id.reserve(N);
    g.producer_step.assign(in.num_tensors(), kNone);
    for (size_t s = 0; s < N; ++s) {
        const uint32_t n = x.step_node[s];
        g.step_node_id.push_back(in.node_id[n]);
        for (uint64_t k = in.node_inputs_start[n]; k < in.node_inputs_start[n + 1]; ++k)
            g.step_inputs.push_back(x.node_in[k]);
        for (uint64_t k = in.node_outputs_start[n]; k < in.node_outputs_start[n + 1]; ++k) {
            g.step_outputs.push_back(x.node_out[k]);
            g.producer_step[x.node_out[k]] = static_cast<uint32_t>(s);
        }
        g.step_inputs_start.push_back(static_cast<uint32_t>(g.step_inputs.size()));
        g.step_outputs_start.push_back(static_cast<uint32_t>(g.step_outputs.size()));
    }
}

int64_t produced_at(const Graph& g, uint32_t t) {
    return g.producer_step[t] == kNone ? -1 : static_cast<int64_t>(g.producer_step[t]);
}

// Whether no execution order can work: Kahn's algorithm on the dependency
// graph (producer of anything read -> reader), run only when phase E fails.
// anc[v]: the latest producer step among view v's strict ancestors.
// (reference._dataflow_has_cycle)
bool dataflow_has_cycle(const Graph& g, const std::vector<int64_t>& anc) {
    const size_t N = g.num_steps;
    std::vector<uint32_t> indeg(N, 0);
    std::vector<std::vector<uint32_t>> succ(N);
    for (size_t st = 0; st < N; ++st) {
        auto add_dep = [&](int64_t p) {
            if (p >= 0 && static_cast<size_t>(p) != st) {
                succ[p].push_back(static_cast<uint32_t>(st));
                ++indeg[st];
            } else if (p >= 0) {
                ++indeg[st];  // reads its own output: a self-loop
            }
        };
        for (uint32_t k = g.step_inputs_start[st]; k < g.step_inputs_start[st + 1]; ++k) {
            const uint32_t x = g.step_inputs[k];
            add_dep(produced_at(g, x));
            if (g.view_base[x] != kNone) add_dep(anc[x]);
        }
    }
    std::vector<uint32_t> ready;
    for (size_t st = 0; st < N; ++st)
        if (indeg[st] == 0) ready.push_back(static_cast<uint32_t>(st));
    size_t seen = 0;
    while (!ready.empty()) {
        uint32_t st = ready.back();
        ready.pop_back();
        ++seen;
        for (uint32_t nx : succ[st])
            if (--indeg[nx] == 0) ready.push_back(nx);
    }
    return seen < N;
}

// Step s uses t, produced at bad_step, too late (reference._order_error).
[[noreturn]] void order_error(const Graph& g, const std::vector<int64_t>& anc, uint32_t t, size_t s,
                              int64_t bad_step) {
    const std::string& node = g.step_node_id[s];
    std::string msg = "node " + q(node) + " (step " + std::to_string(s) + ") uses " +
                      q(g.tensor_id[t]) + ", which is produced at step " +
                      std::to_string(bad_step) + " by " + q(g.step_node_id[bad_step]);
    if (dataflow_has_cycle(g, anc))
        msg += "; the dataflow has a cycle, so no execution order can work";
    else
        msg += "; the dataflow is acyclic but this execution order is not topological";
    fail(ErrorCode::LivenessCycle, msg, g.tensor_id[t], node);
}

// Phase E — the execution order reads nothing before it is produced
// (reference.check_order).
void check_order(const Graph& g) {
    const size_t N = g.num_steps;
    // anc[v]: latest producer step among the strict ancestors of view v (-1: none).
    std::vector<int64_t> anc(g.num_tensors, -1);
    for (uint32_t v : views_base_first(g)) {
        const uint32_t b = g.view_base[v];
        anc[v] = std::max(produced_at(g, b), g.view_base[b] == kNone ? int64_t{-1} : anc[b]);
    }
    for (size_t s = 0; s < N; ++s) {
        const int64_t si = static_cast<int64_t>(s);
        for (uint32_t k = g.step_inputs_start[s]; k < g.step_inputs_start[s + 1]; ++k) {
            const uint32_t t = g.step_inputs[k];
            if (produced_at(g, t) >= si) order_error(g, anc, t, s, produced_at(g, t));
            if (g.view_base[t] != kNone && anc[t] >= si) order_error(g, anc, t, s, anc[t]);
        }
        for (uint32_t k = g.step_outputs_start[s]; k < g.step_outputs_start[s + 1]; ++k) {
            const uint32_t t = g.step_outputs[k];
            if (g.view_base[t] != kNone && anc[t] > si) order_error(g, anc, t, s, anc[t]);
        }
    }
}

// The per-tensor attributes later stages read, and each tensor's rank in id
// order (the tie-break of every strategy).
void copy_attributes(const GraphInput& in, Graph& g) {
    const size_t T = in.num_tensors();
    g.role = in.role;
    g.arena = in.arena;
    g.alignment.resize(T);
    for (size_t t = 0; t < T; ++t) g.alignment[t] = in.alignment[t] == 0 ? 1 : in.alignment[t];
    g.saved_for_backward = in.saved_for_backward;
    g.can_inplace = in.can_inplace;

    std::vector<uint32_t> by_id(T);
    std::iota(by_id.begin(), by_id.end(), 0u);
    std::sort(by_id.begin(), by_id.end(),
              [&](uint32_t a, uint32_t b) { return g.tensor_id[a] < g.tensor_id[b]; });
    g.id_rank.resize(T);
    for (size_t k = 0; k < T; ++k) g.id_rank[by_id[k]] = static_cast<uint32_t>(k);
}

}  // namespace

Graph build_graph(const GraphInput& in) {
    if (in.num_tensors() >= kNone || in.num_nodes() >= kNone)
        fail(ErrorCode::InvalidIrShapes, "too many tensors or nodes");
    check_alignments(in);                           // phase A (its alignment rule)
    Graph g;
    const Interned interned = validate_document(in, g);  // phase B
    compute_sizes(in, g);                           // phase C
    resolve_views(in, g);                           // phase D
    build_steps(in, interned, g);
    check_order(g);                                 // phase E
    copy_attributes(in, g);
    return g;
}

}  // namespace emel::memory
