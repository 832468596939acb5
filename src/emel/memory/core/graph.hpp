// The graph data model: what a document or a builder supplies (GraphInput, ids
// as strings), and the validated, interned form every later stage reads
// (Graph, a struct of arrays indexed by dense uint32 tensor indices and steps).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "emel/memory/core/tables.hpp"  // Role, its names and default arenas

namespace emel::memory {

constexpr uint32_t kNone = UINT32_MAX;

enum class Phase : uint8_t { Unspecified, Forward, Backward };

// Parameters and optimizer state live for the whole program (kRoles).
inline bool is_persistent_role(Role r) { return role_info(r).persistent; }
inline const char* default_arena_for(Role r) { return role_info(r).default_arena; }

// One graph as supplied: ids are strings, lists are flattened with start
// offsets (entry i spans [start[i], start[i+1])). Document order is kept.
struct GraphInput {
    std::string name;

    // tensors
    std::vector<std::string> tensor_id;
    std::vector<uint64_t> dims;
    std::vector<uint64_t> dims_start{0};
    std::vector<std::string> dtype;
    std::vector<uint8_t> has_nbytes;
    std::vector<uint64_t> nbytes;
    std::vector<Role> role;
    std::vector<std::string> arena;      // "" = the role's default arena
    std::vector<uint64_t> alignment;     // 0 = none given
    std::vector<uint8_t> saved_for_backward;
    std::vector<uint8_t> can_inplace;
    std::vector<uint8_t> is_view;
    std::vector<std::string> view_base;  // meaningful when is_view
    std::vector<uint64_t> view_byte_offset;
    std::vector<std::string> must_not_alias;
    std::vector<uint64_t> must_not_alias_start{0};

    // nodes, in document order
    std::vector<std::string> node_id;
    std::vector<Phase> node_phase;
    std::vector<std::string> node_inputs;
    std::vector<uint64_t> node_inputs_start{0};
    std::vector<std::string> node_outputs;
    std::vector<uint64_t> node_outputs_start{0};

    bool has_execution_order = false;
    std::vector<std::string> execution_order;
    std::vector<std::string> outputs;

    size_t num_tensors() const { return tensor_id.size(); }
    size_t num_nodes() const { return node_id.size(); }

    // Appends one tensor; dims/must_not_alias are copied.
    void add_tensor(std::string id, const uint64_t* shape, size_t ndim, std::string dtype_name,
                    bool nbytes_given, uint64_t nbytes_value, Role r, std::string arena_name,
                    uint64_t alignment_value, bool saved, bool inplace, bool view,
                    std::string base, uint64_t byte_offset,
                    const std::vector<std::string>& no_alias);
    void add_node(std::string id, Phase phase, const std::vector<std::string>& inputs,
                  const std::vector<std::string>& outputs_);
};

// A validated graph. Tensor index = document order; nodes are stored by step
// (execution order). Views have root != self.
struct Graph {
    std::string name;
    uint32_t num_tensors = 0;
    uint32_t num_steps = 0;

    std::vector<std::string> tensor_id;
    std::vector<uint64_t> size;           // bytes (a view: its span)
    std::vector<Role> role;
    std::vector<std::string> arena;       // as given ("" = by role)
    std::vector<uint64_t> alignment;      // >= 1
    std::vector<uint8_t> saved_for_backward;
    std::vector<uint8_t> can_inplace;
    std::vector<uint8_t> listed_output;   // in the top-level `outputs`
    std::vector<uint32_t> view_base;      // kNone for storage tensors
    std::vector<uint32_t> root;           // self for storage tensors
    std::vector<uint64_t> root_offset;    // 0 for storage tensors
    std::vector<uint32_t> id_rank;        // position in id (code point) order
    std::vector<std::pair<uint32_t, uint32_t>> must_not_alias;  // as listed

    std::vector<std::string> step_node_id;      // node id per step
    std::vector<uint32_t> step_inputs_start{0}; // CSR over steps
    std::vector<uint32_t> step_inputs;
    std::vector<uint32_t> step_outputs_start{0};
    std::vector<uint32_t> step_outputs;
    std::vector<uint32_t> producer_step;  // kNone when no node produces it

    bool is_view(uint32_t t) const { return view_base[t] != kNone; }
};

// Bulk input: tensors and nodes as arrays of indices (no Python object per
// tensor). Ids are generated ("t" / "n" + zero-padded index, so id order is
// index order). Node inputs/outputs are CSR: node j reads
// in_index[in_start[j] .. in_start[j+1]). Optional arrays may be empty.
struct GraphArrays {
    size_t num_tensors = 0, num_nodes = 0;
    const uint64_t* size = nullptr;            // bytes per tensor
    const uint64_t* in_start = nullptr;        // num_nodes + 1
    const uint64_t* in_index = nullptr;
    const uint64_t* out_start = nullptr;       // num_nodes + 1
    const uint64_t* out_index = nullptr;
    const uint8_t* role = nullptr;             // Role per tensor (default activation)
    const uint8_t* can_inplace = nullptr;
    const uint64_t* alignment = nullptr;       // 0 = none
    const int64_t* view_base = nullptr;        // -1 = storage tensor
    const uint64_t* view_offset = nullptr;
    const uint64_t* outputs = nullptr;         // tensor indices
    size_t num_outputs = 0;
};
GraphInput graph_input_from_arrays(const GraphArrays& a, std::string name);

// Phases B–E of docs/algorithm.md §1 (phase A — document types — is done by
// the reader; the power-of-two check of tensor alignments is repeated here).
Graph build_graph(const GraphInput& in);

}  // namespace emel::memory
