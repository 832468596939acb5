// Graph validation and interning: docs/algorithm.md §1, phases B–E.
#include "emel/memory/core/graph.hpp"

#include <algorithm>
#include <numeric>
#include <string_view>
#include <unordered_map>

#include "emel/memory/core/checked_math.hpp"
#include "emel/memory/core/errors.hpp"

namespace emel::memory {

void GraphInput::add_tensor(std::string id, const uint64_t* shape, size_t ndim,
                            std::string dtype_name, bool nbytes_given, uint64_t nbytes_value,
                            Role r, std::string arena_name, uint64_t alignment_value, bool saved,
                            bool inplace, bool view, std::string base, uint64_t byte_offset,
                            const std::vector<std::string>& no_alias) {
    tensor_id.push_back(std::move(id));
    dims.insert(dims.end(), shape, shape + ndim);
    dims_start.push_back(dims.size());
    dtype.push_back(std::move(dtype_name));
    has_nbytes.push_back(nbytes_given);
    nbytes.push_back(nbytes_given ? nbytes_value : 0);
    role.push_back(r);
    arena.push_back(std::move(arena_name));
    alignment.push_back(alignment_value);
    saved_for_backward.push_back(saved);
    can_inplace.push_back(inplace);
    is_view.push_back(view);
    view_base.push_back(view ? std::move(base) : std::string());
    view_byte_offset.push_back(view ? byte_offset : 0);
    must_not_alias.insert(must_not_alias.end(), no_alias.begin(), no_alias.end());
    must_not_alias_start.push_back(must_not_alias.size());
}

void GraphInput::add_node(std::string id, Phase phase, const std::vector<std::string>& inputs,
                          const std::vector<std::string>& outputs_) {
    node_id.push_back(std::move(id));
    node_phase.push_back(phase);
    node_inputs.insert(node_inputs.end(), inputs.begin(), inputs.end());
    node_inputs_start.push_back(node_inputs.size());
    node_outputs.insert(node_outputs.end(), outputs_.begin(), outputs_.end());
    node_outputs_start.push_back(node_outputs.size());
}

namespace {

std::string padded(char prefix, size_t i, size_t width) {
    std::string digits = std::to_string(i);
    return prefix + std::string(width > digits.size() ? width - digits.size() : 0, '0') + digits;
}

}  // namespace

GraphInput graph_input_from_arrays(const GraphArrays& a, std::string name) {
    const size_t T = a.num_tensors, N = a.num_nodes;
    auto bad = [](const std::string& msg, const std::string& tensor = {}) {
        throw PlanError(ErrorCode::InvalidIrShapes, msg, tensor);
    };
    const size_t tw = std::to_string(T ? T - 1 : 0).size(), nw = std::to_string(N ? N - 1 : 0).size();
    std::vector<std::string> ids(T);
    for (size_t t = 0; t < T; ++t) ids[t] = padded('t', t, tw);
    GraphInput in;
    in.name = std::move(name);
    in.tensor_id = ids;
    // Each tensor is `size` uint8 elements, as Graph.to_dict() writes it, so
    // both forms of one graph have one ir_hash (docs/determinism.md §2).
    in.dims.assign(a.size, a.size + T);
    in.dims_start.resize(T + 1);
    for (size_t t = 0; t <= T; ++t) in.dims_start[t] = t;
    in.dtype.assign(T, "uint8");
    in.has_nbytes.assign(T, 1);
    in.nbytes.assign(a.size, a.size + T);
    in.role.resize(T);
    for (size_t t = 0; t < T; ++t) {
        const uint8_t r = a.role ? a.role[t] : static_cast<uint8_t>(Role::Activation);
        if (r >= kNumRoles) bad("tensor " + ids[t] + ": unknown role code " + std::to_string(r), ids[t]);
        in.role[t] = static_cast<Role>(r);
    }
    in.arena.assign(T, std::string());
    in.alignment.assign(T, 0);
    if (a.alignment) in.alignment.assign(a.alignment, a.alignment + T);
    in.saved_for_backward.assign(T, 0);
    in.can_inplace.assign(T, 0);
    if (a.can_inplace)
        for (size_t t = 0; t < T; ++t) in.can_inplace[t] = a.can_inplace[t] != 0;
    in.is_view.assign(T, 0);
    in.view_base.assign(T, std::string());
    in.view_byte_offset.assign(T, 0);
    if (a.view_base)
        for (size_t t = 0; t < T; ++t) {
            if (a.view_base[t] == -1) continue;  // a storage tensor; any other negative is an error
            if (a.view_base[t] < -1 || static_cast<uint64_t>(a.view_base[t]) >= T)
                bad("tensor " + ids[t] + ": view base index " + std::to_string(a.view_base[t]) +
                    " out of range (-1 for none, or 0.." + std::to_string(T ? T - 1 : 0) + ")",
                    ids[t]);
            in.is_view[t] = 1;
            in.view_base[t] = ids[a.view_base[t]];
            in.view_byte_offset[t] = a.view_offset ? a.view_offset[t] : 0;
        }
    in.must_not_alias_start.assign(T + 1, 0);
    auto csr = [&](const uint64_t* start, const uint64_t* index, const char* what,
                   std::vector<std::string>& flat, std::vector<uint64_t>& flat_start) {
        if (start[0] != 0) bad(std::string(what) + " offsets must start at 0");
        // All offsets first: callers bound only start[N] by the index array's
        // length, which holds for every start[j] only when none decreases.
        for (size_t j = 0; j < N; ++j)
            if (start[j + 1] < start[j]) bad(std::string(what) + " offsets must not decrease (node " + std::to_string(j) + ")");
        if (index == nullptr && start[N] != 0) bad(std::string(what) + ": no index array but offsets end at " + std::to_string(start[N]));
        flat_start.assign(1, 0);
        for (size_t j = 0; j < N; ++j) {
            for (uint64_t k = start[j]; k < start[j + 1]; ++k) {
                if (index[k] >= T)
                    throw PlanError(ErrorCode::InvalidIrShapes,
                                    "node " + padded('n', j, nw) + ": tensor index " + std::to_string(index[k]) +
                                        " out of range (" + std::to_string(T) + " tensors)",
                                    {}, padded('n', j, nw));
                flat.push_back(ids[index[k]]);
            }
            flat_start.push_back(flat.size());
        }
    };
    in.node_id.resize(N);
    for (size_t j = 0; j < N; ++j) in.node_id[j] = padded('n', j, nw);
    in.node_phase.assign(N, Phase::Unspecified);
    csr(a.in_start, a.in_index, "inputs", in.node_inputs, in.node_inputs_start);
    csr(a.out_start, a.out_index, "outputs", in.node_outputs, in.node_outputs_start);
    for (size_t k = 0; k < a.num_outputs; ++k) {
        if (a.outputs[k] >= T) bad("outputs: tensor index " + std::to_string(a.outputs[k]) + " out of range");
        in.outputs.push_back(ids[a.outputs[k]]);
    }
    return in;
}

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

// The views, each after its base when the base is a view itself, so a value
// defined along view chains can be filled in by one loop without recursion.
// Needs acyclic chains (phase D pass 1).
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

using IdMap = std::unordered_map<std::string_view, uint32_t>;

}  // namespace

Graph build_graph(const GraphInput& in) {
    const size_t T = in.num_tensors();
    const size_t N = in.num_nodes();
    if (T >= kNone || N >= kNone) fail(ErrorCode::InvalidIrShapes, "too many tensors or nodes");

    // Phase A (repeated for callers that skip the reader): alignments.
    for (size_t t = 0; t < T; ++t)
        if (in.alignment[t] != 0 && !is_power_of_two(in.alignment[t]))
            fail(ErrorCode::AlignmentViolation,
                 "tensor " + q(in.tensor_id[t]) + ": alignment must be a power of two, got " +
                     std::to_string(in.alignment[t]),
                 in.tensor_id[t]);

    // Phase B — identity.
    IdMap tensor_index;
    tensor_index.reserve(T * 2);
    for (size_t t = 0; t < T; ++t)
        if (!tensor_index.emplace(in.tensor_id[t], static_cast<uint32_t>(t)).second)
            fail(ErrorCode::InvalidIrShapes, "duplicate tensor id " + q(in.tensor_id[t]),
                 in.tensor_id[t]);
    IdMap node_index;
    node_index.reserve(N * 2);
    for (size_t n = 0; n < N; ++n)
        if (!node_index.emplace(in.node_id[n], static_cast<uint32_t>(n)).second)
            fail(ErrorCode::InvalidIrShapes, "duplicate node id " + q(in.node_id[n]), {},
                 in.node_id[n]);

    auto lookup = [&](const std::string& id) -> uint32_t {
        auto it = tensor_index.find(id);
        return it == tensor_index.end() ? kNone : it->second;
    };

    Graph g;
    g.name = in.name;
    g.num_tensors = static_cast<uint32_t>(T);
    g.num_steps = static_cast<uint32_t>(N);
    g.tensor_id = in.tensor_id;
    g.view_base.assign(T, kNone);
    for (size_t t = 0; t < T; ++t) {
        if (in.is_view[t]) {
            uint32_t b = lookup(in.view_base[t]);
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
            uint32_t other = lookup(in.must_not_alias[k]);
            if (other == kNone)
                fail(ErrorCode::InvalidIrShapes,
                     "tensor " + q(in.tensor_id[t]) + ": must_not_alias names unknown tensor " +
                         q(in.must_not_alias[k]),
                     in.tensor_id[t]);
            g.must_not_alias.emplace_back(static_cast<uint32_t>(t), other);
        }
    }
    std::vector<uint32_t> node_in, node_out;  // interned, document order
    node_in.reserve(in.node_inputs.size());
    node_out.reserve(in.node_outputs.size());
    for (size_t n = 0; n < N; ++n) {
        for (uint64_t k = in.node_inputs_start[n]; k < in.node_inputs_start[n + 1]; ++k) {
            uint32_t t = lookup(in.node_inputs[k]);
            if (t == kNone)
                fail(ErrorCode::InvalidIrShapes,
                     "node " + q(in.node_id[n]) + " reads unknown tensor " + q(in.node_inputs[k]),
                     in.node_inputs[k], in.node_id[n]);
            node_in.push_back(t);
        }
        for (uint64_t k = in.node_outputs_start[n]; k < in.node_outputs_start[n + 1]; ++k) {
            uint32_t t = lookup(in.node_outputs[k]);
            if (t == kNone)
                fail(ErrorCode::InvalidIrShapes,
                     "node " + q(in.node_id[n]) + " writes unknown tensor " +
                         q(in.node_outputs[k]),
                     in.node_outputs[k], in.node_id[n]);
            node_out.push_back(t);
        }
    }
    std::vector<uint32_t> producer_node(T, kNone);
    for (size_t n = 0; n < N; ++n)
        for (uint64_t k = in.node_outputs_start[n]; k < in.node_outputs_start[n + 1]; ++k) {
            uint32_t t = node_out[k];
            if (producer_node[t] != kNone)
                fail(ErrorCode::InvalidIrShapes,
                     "tensor " + q(in.tensor_id[t]) + " is produced twice (by " +
                         q(in.node_id[producer_node[t]]) + " and " + q(in.node_id[n]) + ")",
                     in.tensor_id[t], in.node_id[n]);
            producer_node[t] = static_cast<uint32_t>(n);
        }
    // step -> node (document index)
    std::vector<uint32_t> step_node(N);
    if (in.has_execution_order) {
        std::vector<uint8_t> seen(N, 0);
        // More than N known entries must repeat one, caught before step_node overflows.
        size_t s = 0;
        for (const auto& id : in.execution_order) {
            auto it = node_index.find(id);
            if (it == node_index.end())
                fail(ErrorCode::InvalidIrShapes,
                     "execution_order names unknown node " + q(id), {}, id);
            if (seen[it->second])
                fail(ErrorCode::InvalidIrShapes,
                     "execution_order lists node " + q(id) + " twice", {}, id);
            seen[it->second] = 1;
            step_node[s++] = it->second;
        }
        for (size_t n = 0; n < N; ++n)
            if (!seen[n])
                fail(ErrorCode::InvalidIrShapes,
                     "node " + q(in.node_id[n]) + " is missing from execution_order", {},
                     in.node_id[n]);
    } else {
        std::iota(step_node.begin(), step_node.end(), 0u);
    }
    g.listed_output.assign(T, 0);
    for (const auto& id : in.outputs) {
        uint32_t t = lookup(id);
        if (t == kNone)
            fail(ErrorCode::InvalidIrShapes, "outputs names unknown tensor " + q(id), id);
        g.listed_output[t] = 1;
    }

    // Phase C — sizes.
    g.size.assign(T, 0);
    for (size_t t = 0; t < T; ++t) {
        const std::string& id = in.tensor_id[t];
        const uint64_t elem = element_size(in.dtype[t]);
        if (elem == 0 && !in.has_nbytes[t])
            fail(ErrorCode::InvalidIrShapes,
                 "tensor " + q(id) + ": dtype " + q(in.dtype[t]) +
                     " has no fixed element size, so nbytes is required",
                 id);
        if (elem != 0) {
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
        } else {
            g.size[t] = in.nbytes[t];
        }
    }

    // Phase D — views, four passes.
    g.root.resize(T);
    for (size_t t = 0; t < T; ++t) g.root[t] = static_cast<uint32_t>(t);
    {
        // Pass 1, per view in document order: its chain reaches a storage root
        // (state: 0 new, 1 on the current walk, 2 done), and it lies inside its
        // direct base.
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
    g.root_offset.assign(T, 0);
    {
        // Pass 2: root offsets and view alignment.
        for (uint32_t v : views_base_first(g))
            g.root_offset[v] = g.root_offset[g.view_base[v]] + in.view_byte_offset[v];
        for (size_t v = 0; v < T; ++v)
            if (g.view_base[v] != kNone && in.alignment[v] != 0 &&
                g.root_offset[v] % in.alignment[v] != 0)
                fail(ErrorCode::AlignmentViolation,
                     "view " + q(in.tensor_id[v]) + " starts at byte " +
                         std::to_string(g.root_offset[v]) + " of its root " +
                         q(in.tensor_id[g.root[v]]) + ", not a multiple of its alignment " +
                         std::to_string(in.alignment[v]),
                     in.tensor_id[v]);
    }
    for (const auto& [a, b] : g.must_not_alias) {  // Pass 3.
        if (g.root[a] != g.root[b]) continue;
        const uint64_t a0 = g.root_offset[a], a1 = a0 + g.size[a];
        const uint64_t b0 = g.root_offset[b], b1 = b0 + g.size[b];
        if (g.size[a] != 0 && g.size[b] != 0 && a0 < b1 && b0 < a1)
            fail(ErrorCode::InvalidIrShapes,
                 "tensor " + q(in.tensor_id[a]) + " must not alias " + q(in.tensor_id[b]) +
                     ", but both cover the same bytes of " + q(in.tensor_id[g.root[a]]),
                 in.tensor_id[a]);
    }

    // Steps: nodes in execution order.
    g.step_node_id.reserve(N);
    g.producer_step.assign(T, kNone);
    for (size_t s = 0; s < N; ++s) {
        const uint32_t n = step_node[s];
        g.step_node_id.push_back(in.node_id[n]);
        for (uint64_t k = in.node_inputs_start[n]; k < in.node_inputs_start[n + 1]; ++k)
            g.step_inputs.push_back(node_in[k]);
        for (uint64_t k = in.node_outputs_start[n]; k < in.node_outputs_start[n + 1]; ++k) {
            g.step_outputs.push_back(node_out[k]);
            g.producer_step[node_out[k]] = static_cast<uint32_t>(s);
        }
        g.step_inputs_start.push_back(static_cast<uint32_t>(g.step_inputs.size()));
        g.step_outputs_start.push_back(static_cast<uint32_t>(g.step_outputs.size()));
    }

    // Phase E — the execution order reads nothing before it is produced.
    {
        // anc[v]: latest producer step among the strict ancestors of view v (-1: none).
        std::vector<int64_t> anc(T, -1);
        auto prod = [&](uint32_t t) -> int64_t {
            return g.producer_step[t] == kNone ? -1 : static_cast<int64_t>(g.producer_step[t]);
        };
        for (uint32_t v : views_base_first(g)) {
            const uint32_t b = g.view_base[v];
            anc[v] = std::max(prod(b), g.view_base[b] == kNone ? int64_t{-1} : anc[b]);
        }
        auto order_error = [&](uint32_t t, size_t s, int64_t bad_step) {
            // Tell a real cycle from a wrong order: Kahn's algorithm on the
            // dependency graph (producer of anything read -> reader).
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
                    add_dep(prod(x));
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
            const std::string& node = g.step_node_id[s];
            std::string msg = "node " + q(node) + " (step " + std::to_string(s) + ") uses " +
                              q(g.tensor_id[t]) + ", which is produced at step " +
                              std::to_string(bad_step) + " by " + q(g.step_node_id[bad_step]);
            if (seen < N)
                msg += "; the dataflow has a cycle, so no execution order can work";
            else
                msg += "; the dataflow is acyclic but this execution order is not topological";
            fail(ErrorCode::LivenessCycle, msg, g.tensor_id[t], node);
        };
        for (size_t s = 0; s < N; ++s) {
            const int64_t si = static_cast<int64_t>(s);
            for (uint32_t k = g.step_inputs_start[s]; k < g.step_inputs_start[s + 1]; ++k) {
                const uint32_t t = g.step_inputs[k];
                if (prod(t) >= si) order_error(t, s, prod(t));
                if (g.view_base[t] != kNone && anc[t] >= si) order_error(t, s, anc[t]);
            }
            for (uint32_t k = g.step_outputs_start[s]; k < g.step_outputs_start[s + 1]; ++k) {
                const uint32_t t = g.step_outputs[k];
                if (g.view_base[t] != kNone && anc[t] > si) order_error(t, s, anc[t]);
            }
        }
    }

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
    return g;
}

}  // namespace emel::memory
