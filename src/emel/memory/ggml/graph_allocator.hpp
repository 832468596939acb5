// ggml_gallocr's bookkeeping around the planning pass of ggml_alloc.hpp:
// buffers that only grow, buffer ids sharing one buffer type, what
// alloc_graph reuses and needs_realloc compares against, and the strategy
// hook (place ggml's lifetimes with one of the planner's offset strategies).
// docs/ggml.md describes the behaviour; the shared ggml-alloc behaviour
// document is the specification.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "emel/memory/ggml/ggml_alloc.hpp"
#include "emel/memory/placement/placement.hpp"

namespace emel::memory::ggml {

struct BufferType {
    uint64_t alignment = 32;     // power of two
    uint64_t max_size = kSizeMax;  // bytes per chunk
};

// Every index in range, and every view_src a root (not itself a view, as
// ggml flattens views). Throws PlanError(INVALID_IR_SHAPES) naming the tensor.
void check_graph(const Graph& g);

// ggml_build_forward_expand(tensor): depth-first over sources in slot order,
// appending tensors not yet in the graph; GGML_OP_NONE tensors become leafs.
void build_forward_expand(Graph& g, int32_t tensor);

// ggml_backend_alloc_ctx_tensors_from_buft over tensors of a graph, in the
// order given: each placed tensor gets HAS_DATA and its address (buffer =
// index into the returned buffer sizes, chunk 0); views among `tensors`
// whose root is bound are bound too. `bound` holds one address per tensor.
CtxPlacement alloc_ctx_tensors(Graph& g, const std::vector<int32_t>& tensors,
                               const BufferType& type, std::vector<Address>& bound);

// "ggml" (nullopt) or one of the planner's strategies (kStrategies), by name;
// false when unknown.
bool strategy_from_name(const std::string& name, std::optional<Strategy>& out);

class GraphAllocator {
  public:
    // `types`: one per distinct buffer type; `type_of[b]`: the type of buffer
    // id b (ids with the same type share one allocator and one buffer).
    // `strategy`: nullopt = ggml's own placement; else ggml's lifetimes and
    // in-place decisions placed by that strategy within `work_budget` units.
    GraphAllocator(std::vector<BufferType> types, std::vector<int32_t> type_of,
                   std::optional<Strategy> strategy, uint64_t work_budget);

    // `bound` (optional, one per tensor of g): where each tensor is bound
    // already. As ggml's `data != NULL`, a bound tensor that is not a view
    // counts as pre-allocated (HAS_DATA): it is not planned, not rebound,
    // and needs_realloc does not look at it.

    // ggml_gallocr_reserve_n: plan `g` (empty id lists = all 0) and grow
    // every buffer some chunk of which the plan outgrows. Always true: the
    // model allocates no real memory.
    bool reserve_n(const Graph& g, const std::vector<int32_t>& node_buffer_ids,
                   const std::vector<int32_t>& leaf_buffer_ids,
                   const std::vector<Address>* bound = nullptr);
    // ggml_gallocr_reserve_n_size: plan without allocating; a buffer the plan
    // outgrows is freed; returns the new plan's bytes per buffer id (an id
    // sharing another's buffer repeats its size).
    std::vector<uint64_t> reserve_n_size(const Graph& g,
                                         const std::vector<int32_t>& node_buffer_ids,
                                         const std::vector<int32_t>& leaf_buffer_ids,
                                         const std::vector<Address>* bound = nullptr);
    // Counts differ from the last plan, or a node (or one of its sources)
    // without data was not placed, has grown since, or points into a buffer
    // that reserve_n_size freed (ggml would crash there; we re-reserve).
    bool needs_realloc(const Graph& g, const std::vector<Address>* bound = nullptr) const;
    // ggml_gallocr_alloc_graph: re-reserve when needed (only with one buffer
    // id; false with several), then bind every leaf, and per node its
    // sources and itself: views to their root's address plus their offset
    // (unless already bound), others without data to the planned address.
    // `bound`: one address per tensor of g (buffer_id -1 = unbound); what it
    // binds is stamped with this allocator, its plan and the bytes reserved.
    // PlanError(ARENA_TOO_SMALL) naming the tensor, before anything changes,
    // when a tensor would be bound to or left at a place that does not hold
    // it: a leaf that grew since the reserve or lost its data, a tensor this
    // allocator bound that grew since, or that was bound under an earlier
    // plan or under the plan this call must replace (the new plan may give
    // its bytes to other tensors, or free its buffer). ggml checks none of
    // these and writes over other tensors or into freed memory.
    bool alloc_graph(const Graph& g, std::vector<Address>& bound);

    // ggml_gallocr_get_buffer_size: 0 before any reserve and for an id that
    // shares an earlier id's buffer.
    uint64_t buffer_size(int32_t buffer_id) const;
    // The chunk sizes of buffer id `buffer_id`'s buffer, in chunk order (they
    // add up to buffer_size): none before any reserve and for an id that
    // shares an earlier id's buffer.
    std::vector<uint64_t> chunk_sizes(int32_t buffer_id) const;

    size_t num_buffer_ids() const { return type_of_.size(); }
    size_t num_types() const { return types_.size(); }
    int32_t type_of(size_t buffer_id) const { return type_of_.at(buffer_id); }
    bool has_plan() const { return planned_; }
    // Of the last plan, per tensor of its graph.
    const std::vector<Address>& addresses() const { return addr_; }
    const std::vector<int32_t>& inplace_of() const { return inplace_of_; }

  private:
    struct Slot {  // what the last plan put at one position of the graph
        bool present = false;
        Address addr;
        uint64_t size = 0;
    };
    // Plans g; returns each buffer type's chunk sizes.
    std::vector<std::vector<uint64_t>> plan(const Graph& g,
                                            const std::vector<int32_t>& node_buffer_ids,
                                            const std::vector<int32_t>& leaf_buffer_ids);
    void replace_placement(const Graph& g, PlanResult& r,
                           std::vector<std::vector<uint64_t>>& chunks);

    // g with HAS_DATA on its bound non-view tensors (in `copy` when any).
    static const Graph& with_bound(const Graph& g, const std::vector<Address>* bound, Graph& copy);

    uint64_t id_;         // unique per allocator: the owner in its stamps
    uint64_t plan_id_ = 0;  // counts plans: the plan in its stamps
    std::vector<BufferType> types_;
    std::vector<int32_t> type_of_;
    std::optional<Strategy> strategy_;
    uint64_t work_budget_;
    std::vector<std::optional<std::vector<uint64_t>>> buffers_;  // per type: chunk sizes

    bool planned_ = false;
    std::vector<Address> addr_;
    std::vector<int32_t> inplace_of_;
    std::vector<std::array<Slot, 1 + kMaxSrc>> node_slots_;  // [0] the node, [1 + s] src s
    std::vector<Slot> leaf_slots_;
};

}  // namespace emel::memory::ggml
