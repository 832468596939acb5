// The graph's two inputs: GraphInput's builder (add_tensor, add_node) and
// graph_input_from_arrays. Validation, build_graph, is build_graph.cpp.
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

}  // namespace emel::memory
