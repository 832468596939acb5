// ggml_gallocr's state around plan_graph (see graph_allocator.hpp).
#include "emel/memory/ggml/graph_allocator.hpp"

#include <algorithm>
#include <atomic>
#include <map>

#include "emel/memory/core/checked_math.hpp"
#include "emel/memory/core/errors.hpp"

namespace emel::memory::ggml {

namespace {

std::string label(const Graph& g, int32_t t) {
    const std::string& name = g.tensors[static_cast<size_t>(t)].name;
    return name.empty() ? "#" + std::to_string(t) : name;
}

// ggml's "same layout" implies the same size; a tag shared by tensors of
// different sizes would let a big node take a small parent's place.
void check_layouts(const Graph& g) {
    std::map<uint64_t, int32_t> first;  // layout -> first tensor with it
    for (int32_t t = 0; t < static_cast<int32_t>(g.tensors.size()); ++t) {
        const Tensor& x = g.tensors[static_cast<size_t>(t)];
        const int32_t f = first.emplace(x.layout, t).first->second;
        const Tensor& y = g.tensors[static_cast<size_t>(f)];
        if (y.size != x.size)
            throw PlanError(ErrorCode::InvalidIrShapes,
                            "tensor '" + label(g, t) + "': same layout as '" + label(g, f) + "' but " +
                                std::to_string(x.size) + " bytes, not " + std::to_string(y.size),
                            label(g, t));
    }
}

// No tensor may reach itself through src / view_src: in-place chains follow
// src edges, and a cycle there never ends (iterative DFS, graphs can be deep).
void check_acyclic(const Graph& g) {
    const size_t T = g.tensors.size();
    std::vector<uint8_t> state(T, 0);  // 0 new, 1 on the stack, 2 done
    std::vector<std::pair<int32_t, int>> stack;  // (tensor, next edge: src 0..9, then view_src)
    for (size_t root = 0; root < T; ++root) {
        if (state[root]) continue;
        state[root] = 1;
        stack.emplace_back(static_cast<int32_t>(root), 0);
        while (!stack.empty()) {
            auto& [t, e] = stack.back();
            const Tensor& x = g.tensors[static_cast<size_t>(t)];
            if (e > kMaxSrc) {
                state[static_cast<size_t>(t)] = 2;
                stack.pop_back();
                continue;
            }
            const int32_t next = e < kMaxSrc ? x.src[e] : x.view_src;
            ++e;
            if (next < 0) continue;
            if (state[static_cast<size_t>(next)] == 1)
                throw PlanError(ErrorCode::LivenessCycle,
                                "tensor '" + label(g, next) + "' depends on itself (through '" +
                                    label(g, t) + "')",
                                label(g, next));
            if (state[static_cast<size_t>(next)] == 0) {
                state[static_cast<size_t>(next)] = 1;
                stack.emplace_back(next, 0);
            }
        }
    }
}

std::atomic<uint64_t> next_allocator_id{1};

// alloc_graph's one rule for a place it binds `t` to or leaves it at: the
// place must still be there (`gone`, when set, says why it is not) and hold
// the tensor's bytes. `who` names the record, `fix` what the caller can do.
void require_place(const Graph& g, int32_t t, const std::string& who, const char* gone,
                   uint64_t reserved, const char* fix) {
    if (gone) throw PlanError(ErrorCode::ArenaTooSmall, who + " " + gone + ": " + fix, label(g, t));
    const uint64_t size = g.tensors[static_cast<size_t>(t)].size;
    if (size > reserved)
        throw PlanError(ErrorCode::ArenaTooSmall,
                        who + " needs " + std::to_string(size) + " bytes, " + std::to_string(reserved) +
                            " were reserved for it: " + fix,
                        label(g, t));
}

}  // namespace

void check_graph(const Graph& g) {
    const auto T = static_cast<int64_t>(g.tensors.size());
    auto bad = [&](int32_t t, const std::string& what) {
        throw PlanError(ErrorCode::InvalidIrShapes, "tensor '" + label(g, t) + "': " + what, label(g, t));
    };
    for (int32_t t = 0; t < T; ++t) {
        const Tensor& x = g.tensors[static_cast<size_t>(t)];
        if (x.view_src != -1) {
            if (x.view_src < 0 || x.view_src >= T)
                bad(t, "view_src " + std::to_string(x.view_src) + " is not a tensor index (0.." +
                           std::to_string(T - 1) + ")");
            if (x.view_src == t) bad(t, "is a view of itself");
            if (g.tensors[static_cast<size_t>(x.view_src)].view_src != -1)
                bad(t, "view_src '" + label(g, x.view_src) +
                           "' is itself a view (ggml's view_src is always the root)");
        }
        for (int s = 0; s < kMaxSrc; ++s)
            if (x.src[s] != -1 && (x.src[s] < 0 || x.src[s] >= T))
                bad(t, "src[" + std::to_string(s) + "] = " + std::to_string(x.src[s]) +
                           " is not a tensor index (0.." + std::to_string(T - 1) + ")");
    }
    auto check_list = [&](const std::vector<int32_t>& list, const char* what) {
        for (size_t i = 0; i < list.size(); ++i)
            if (list[i] < 0 || list[i] >= T)
                throw PlanError(ErrorCode::InvalidIrShapes,
                                std::string(what) + "[" + std::to_string(i) + "] = " +
                                    std::to_string(list[i]) + " is not a tensor index");
    };
    check_list(g.nodes, "nodes");
    check_list(g.leafs, "leafs");
    check_layouts(g);
    check_acyclic(g);
}

void build_forward_expand(Graph& g, int32_t tensor) {
    const auto T = static_cast<int32_t>(g.tensors.size());
    if (tensor < 0 || tensor >= T)
        throw PlanError(ErrorCode::InvalidIrShapes,
                        "build_forward_expand: " + std::to_string(tensor) + " is not a tensor index");
    std::vector<uint8_t> seen(static_cast<size_t>(T), 0);
    for (int32_t t : g.nodes) seen.at(static_cast<size_t>(t)) = 1;
    for (int32_t t : g.leafs) seen.at(static_cast<size_t>(t)) = 1;
    // Explicit stack of (tensor, next src slot): graphs can be deep.
    std::vector<std::pair<int32_t, int>> stack;
    if (!seen[static_cast<size_t>(tensor)]) {
        seen[static_cast<size_t>(tensor)] = 1;
        stack.emplace_back(tensor, 0);
    }
    while (!stack.empty()) {
        auto& [t, slot] = stack.back();
        const Tensor& x = g.tensors[static_cast<size_t>(t)];
        if (slot < kMaxSrc) {
            const int32_t s = x.src[slot++];
            if (s < -1 || s >= T)
                throw PlanError(ErrorCode::InvalidIrShapes,
                                "tensor '" + label(g, t) + "': a src is not a tensor index", label(g, t));
            if (s >= 0 && !seen[static_cast<size_t>(s)]) {
                seen[static_cast<size_t>(s)] = 1;
                stack.emplace_back(s, 0);
            }
            continue;
        }
        (x.op_none ? g.leafs : g.nodes).push_back(t);
        stack.pop_back();
    }
}

CtxPlacement alloc_ctx_tensors(Graph& g, const std::vector<int32_t>& tensors,
                               const BufferType& type, std::vector<Address>& bound) {
    if (!is_power_of_two(type.alignment))
        throw PlanError(ErrorCode::AlignmentViolation, "buffer type alignment must be a power of two, got " +
                                                           std::to_string(type.alignment));
    const auto T = static_cast<int32_t>(g.tensors.size());
    if (bound.size() != g.tensors.size())
        throw PlanError(ErrorCode::InvalidIrShapes, "one bound address per tensor expected");
    std::vector<uint64_t> sizes;
    std::vector<uint8_t> skip;
    for (int32_t t : tensors) {
        if (t < 0 || t >= T)
            throw PlanError(ErrorCode::InvalidIrShapes, std::to_string(t) + " is not a tensor index");
        const Tensor& x = g.tensors[static_cast<size_t>(t)];
        sizes.push_back(x.size);
        skip.push_back((x.flags & kHasData) || x.view_src >= 0 ? 1 : 0);
    }
    CtxPlacement r = alloc_ctx_tensors(sizes, skip, type.alignment, type.max_size);
    for (size_t i = 0; i < tensors.size(); ++i) {
        if (r.buffer_of[i] < 0) continue;
        Tensor& x = g.tensors[static_cast<size_t>(tensors[i])];
        x.flags |= kHasData;
        bound[static_cast<size_t>(tensors[i])] = Address{r.buffer_of[i], 0, r.offset[i]};
    }
    for (int32_t t : tensors) {  // views of allocated tensors are initialised too
        const Tensor& x = g.tensors[static_cast<size_t>(t)];
        if (x.view_src < 0 || x.view_src >= T) continue;
        const Address& root = bound[static_cast<size_t>(x.view_src)];
        if (root.buffer_id >= 0) bound[static_cast<size_t>(t)] = {root.buffer_id, root.chunk, root.offset + x.view_offs};
    }
    return r;
}

bool strategy_from_name(const std::string& name, std::optional<Strategy>& out) {
    if (name == "ggml") {
        out = std::nullopt;
        return true;
    }
    out = value_named(kStrategies, name);  // the core's table (core/tables.hpp)
    return out.has_value();
}

GraphAllocator::GraphAllocator(std::vector<BufferType> types, std::vector<int32_t> type_of,
                               std::optional<Strategy> strategy, uint64_t work_budget)
    : id_(next_allocator_id.fetch_add(1)),
      types_(std::move(types)),
      type_of_(std::move(type_of)),
      strategy_(strategy),
      work_budget_(work_budget) {
    if (type_of_.empty())
        throw PlanError(ErrorCode::InvalidIrShapes, "a graph allocator needs at least one buffer type");
    for (const auto& t : types_)
        if (!is_power_of_two(t.alignment))
            throw PlanError(ErrorCode::AlignmentViolation,
                            "buffer type alignment must be a power of two, got " + std::to_string(t.alignment));
    for (int32_t k : type_of_)
        if (k < 0 || static_cast<size_t>(k) >= types_.size())
            throw PlanError(ErrorCode::InvalidIrShapes, "buffer type index " + std::to_string(k) + " out of range");
    buffers_.resize(types_.size());
}

std::vector<std::vector<uint64_t>> GraphAllocator::plan(const Graph& g,
                                                        const std::vector<int32_t>& node_buffer_ids,
                                                        const std::vector<int32_t>& leaf_buffer_ids) {
    check_graph(g);
    if (!node_buffer_ids.empty() && node_buffer_ids.size() != g.nodes.size())
        throw PlanError(ErrorCode::InvalidIrShapes,
                        "node_buffer_ids has " + std::to_string(node_buffer_ids.size()) +
                            " entries for " + std::to_string(g.nodes.size()) + " nodes");
    if (!leaf_buffer_ids.empty() && leaf_buffer_ids.size() != g.leafs.size())
        throw PlanError(ErrorCode::InvalidIrShapes,
                        "leaf_buffer_ids has " + std::to_string(leaf_buffer_ids.size()) +
                            " entries for " + std::to_string(g.leafs.size()) + " leafs");
    // Every id, used or not (an in-place node never allocates with its own).
    for (const auto* ids : {&node_buffer_ids, &leaf_buffer_ids})
        for (size_t i = 0; i < ids->size(); ++i)
            if ((*ids)[i] < 0 || static_cast<size_t>((*ids)[i]) >= type_of_.size())
                throw PlanError(ErrorCode::InvalidIrShapes,
                                std::string(ids == &node_buffer_ids ? "node" : "leaf") + "_buffer_ids[" +
                                    std::to_string(i) + "]: buffer id " + std::to_string((*ids)[i]) +
                                    " out of range (" + std::to_string(type_of_.size()) + " buffer ids)");
    std::vector<DynAllocator> dyn;
    dyn.reserve(types_.size());
    for (const auto& t : types_) dyn.emplace_back(t.alignment, t.max_size);
    PlanResult r = plan_graph(g, node_buffer_ids, leaf_buffer_ids, dyn, type_of_);
    std::vector<std::vector<uint64_t>> chunks = r.chunk_sizes;
    if (strategy_) replace_placement(g, r, chunks);

    addr_ = std::move(r.addr);
    inplace_of_ = std::move(r.inplace_of);
    // What alloc_graph reuses and needs_realloc compares against, by position.
    auto slot = [&](int32_t t) { return Slot{true, addr_[static_cast<size_t>(t)], g.tensors[static_cast<size_t>(t)].size}; };
    node_slots_.assign(g.nodes.size(), {});
    for (size_t i = 0; i < g.nodes.size(); ++i) {
        const Tensor& n = g.tensors[static_cast<size_t>(g.nodes[i])];
        node_slots_[i][0] = slot(g.nodes[i]);
        for (int s = 0; s < kMaxSrc; ++s)
            if (n.src[s] >= 0) node_slots_[i][1 + s] = slot(n.src[s]);
    }
    leaf_slots_.clear();
    for (int32_t t : g.leafs) leaf_slots_.push_back(slot(t));
    planned_ = true;
    ++plan_id_;  // what alloc_graph bound under the previous plan is no longer vouched for
    return chunks;
}

const Graph& GraphAllocator::with_bound(const Graph& g, const std::vector<Address>* bound, Graph& copy) {
    if (bound == nullptr) return g;
    if (bound->size() != g.tensors.size())
        throw PlanError(ErrorCode::InvalidIrShapes, "one bound address per tensor expected");
    auto has_data = [&](size_t t) {
        const Tensor& x = g.tensors[t];
        return (*bound)[t].buffer_id >= 0 && x.view_src < 0 && !(x.flags & kHasData);
    };
    size_t t = 0;
    while (t < g.tensors.size() && !has_data(t)) ++t;
    if (t == g.tensors.size()) return g;  // fresh tensors: no copy
    copy = g;
    for (; t < g.tensors.size(); ++t)
        if (has_data(t)) copy.tensors[t].flags |= kHasData;
    return copy;
}

// Keeps ggml's lifetimes (alloc and free steps) and in-place groups, and
// places each group with the strategy, one chunk per buffer type. A buffer
// type whose single chunk would exceed its max_size keeps ggml's placement.
void GraphAllocator::replace_placement(const Graph& g, PlanResult& r,
                                       std::vector<std::vector<uint64_t>>& chunks) {
    const size_t T = g.tensors.size();
    // In-place chains share their first member's place. A link counts only
    // when the taker was first placed where the parent's last placement
    // ended: a tensor ggml placed twice (PlanResult) gets a place of its own.
    auto linked = [&](int32_t x) {
        const int32_t p = r.inplace_of[static_cast<size_t>(x)];
        return p >= 0 && r.free_step[static_cast<size_t>(p)] == r.alloc_step[static_cast<size_t>(x)];
    };
    std::vector<int32_t> group(T);
    for (size_t t = 0; t < T; ++t) {
        auto x = static_cast<int32_t>(t);
        while (linked(x)) x = r.inplace_of[static_cast<size_t>(x)];
        group[t] = x;
    }
    const uint64_t end = g.nodes.size() + 2;  // past every step: never freed
    struct Span {
        bool used = false;
        uint64_t lower = 0, upper = 0, size = 0;
        int32_t buffer_id = -1;
    };
    std::vector<Span> spans(T);  // indexed by group root
    for (size_t t = 0; t < T; ++t) {
        if (r.alloc_step[t] < 0 || r.addr[t].buffer_id < 0) continue;
        // From its first placement to where its last one ended (never: graph
        // outputs, unconsumed tensors); one place for all of it.
        const uint64_t lower = static_cast<uint64_t>(r.alloc_step[t]);
        const uint64_t upper = r.free_step[t] < 0 ? end : static_cast<uint64_t>(r.free_step[t]) + 1;
        Span& sp = spans[static_cast<size_t>(group[t])];
        if (!sp.used) {
            sp = Span{true, lower, upper, 0, r.addr[static_cast<size_t>(group[t])].buffer_id};
        }
        sp.lower = std::min(sp.lower, lower);
        sp.upper = std::max(sp.upper, upper);
        sp.size = std::max(sp.size, g.tensors[t].size);
    }
    for (size_t k = 0; k < types_.size(); ++k) {
        std::vector<int32_t> members;  // group roots, ascending: the row order breaks ties
        std::vector<uint64_t> lower, upper, size;
        for (size_t root = 0; root < T; ++root) {
            const Span& sp = spans[root];
            if (!sp.used || sp.buffer_id < 0 || static_cast<size_t>(type_of_[static_cast<size_t>(sp.buffer_id)]) != k)
                continue;
            members.push_back(static_cast<int32_t>(root));
            lower.push_back(sp.lower);
            upper.push_back(sp.upper);
            size.push_back(sp.size);
        }
        if (members.empty()) continue;
        RowPlacement p = place_rows(std::move(lower), std::move(upper), std::move(size),
                                    types_[k].alignment, *strategy_, Fit::Best, work_budget_, 0);
        if (p.arena_size > types_[k].max_size) continue;  // one chunk would be too big
        std::vector<int64_t> where(T, -1);
        for (size_t m = 0; m < members.size(); ++m)
            where[static_cast<size_t>(members[m])] = static_cast<int64_t>(m);
        for (size_t t = 0; t < T; ++t) {
            Address& a = r.addr[t];
            const int64_t m = where[static_cast<size_t>(group[t])];
            if (a.buffer_id >= 0 && m >= 0) a = Address{a.buffer_id, 0, p.placed.offset[static_cast<size_t>(m)]};
        }
        chunks[k] = {p.arena_size};
    }
}

bool GraphAllocator::reserve_n(const Graph& g, const std::vector<int32_t>& node_buffer_ids,
                               const std::vector<int32_t>& leaf_buffer_ids,
                               const std::vector<Address>* bound) {
    Graph copy;
    const auto chunks = plan(with_bound(g, bound, copy), node_buffer_ids, leaf_buffer_ids);
    for (size_t k = 0; k < chunks.size(); ++k) {
        const auto& old = buffers_[k];
        bool grow = !old.has_value();
        for (size_t c = 0; c < chunks[k].size() && !grow; ++c)
            grow = chunks[k][c] > (c < old->size() ? (*old)[c] : 0);
        // Reallocate: one backend buffer per chunk, of exactly its size.
        if (grow) buffers_[k] = chunks[k];
    }
    return true;
}

std::vector<uint64_t> GraphAllocator::reserve_n_size(const Graph& g,
                                                     const std::vector<int32_t>& node_buffer_ids,
                                                     const std::vector<int32_t>& leaf_buffer_ids,
                                                     const std::vector<Address>* bound) {
    Graph copy;
    const auto chunks = plan(with_bound(g, bound, copy), node_buffer_ids, leaf_buffer_ids);
    // As ggml: a buffer the new plan outgrows is freed (not reallocated),
    // and every id reports its type's new total, shared ids included.
    for (size_t k = 0; k < chunks.size(); ++k) {
        const auto& old = buffers_[k];
        if (!old) continue;
        for (size_t c = 0; c < chunks[k].size(); ++c)
            if (chunks[k][c] > (c < old->size() ? (*old)[c] : 0)) {
                buffers_[k].reset();
                break;
            }
    }
    std::vector<uint64_t> out;
    for (int32_t k : type_of_) {
        uint64_t total = 0;
        for (uint64_t c : chunks[static_cast<size_t>(k)]) {
            auto sum = checked_add(total, c);
            if (!sum) throw PlanError(ErrorCode::AllocationOverflow, "buffer size exceeds 2^64-1");
            total = *sum;
        }
        out.push_back(total);
    }
    return out;
}

bool GraphAllocator::needs_realloc(const Graph& graph, const std::vector<Address>* bound) const {
    Graph copy;
    const Graph& g = with_bound(graph, bound, copy);
    if (!planned_ || node_slots_.size() != g.nodes.size() || leaf_slots_.size() != g.leafs.size())
        return true;
    check_graph(g);
    auto stale = [&](int32_t t, const Slot& s) {
        const Tensor& x = g.tensors[static_cast<size_t>(t)];
        if ((x.flags & kHasData) || x.view_src >= 0) return false;
        if (!s.present || s.addr.buffer_id < 0 || s.size < x.size) return true;
        // reserve_n_size may have freed the buffer the plan points into.
        return !buffers_[static_cast<size_t>(type_of_[static_cast<size_t>(s.addr.buffer_id)])].has_value();
    };
    for (size_t i = 0; i < g.nodes.size(); ++i) {
        const Tensor& n = g.tensors[static_cast<size_t>(g.nodes[i])];
        if (stale(g.nodes[i], node_slots_[i][0])) return true;
        for (int s = 0; s < kMaxSrc; ++s)
            if (n.src[s] >= 0 && stale(n.src[s], node_slots_[i][1 + s])) return true;
    }
    return false;
}

bool GraphAllocator::alloc_graph(const Graph& graph, std::vector<Address>& bound) {
    if (bound.size() != graph.tensors.size())
        throw PlanError(ErrorCode::InvalidIrShapes, "one bound address per tensor expected");
    // A tensor bound already has data, as in ggml: not planned, not rebound.
    Graph copy;
    const Graph& g = with_bound(graph, &bound, copy);
    const bool replan = needs_realloc(g);
    if (replan && type_of_.size() != 1) return false;  // the caller must reserve_n again

    // Every check before anything changes (ggml makes none of them).
    static const char* const kUnbind =
        "unbind the graph's tensors (or build them afresh) so that alloc_graph places them again";
    for (int32_t t = 0; t < static_cast<int32_t>(g.tensors.size()); ++t) {
        const Address& a = bound[static_cast<size_t>(t)];
        if (a.buffer_id < 0 || a.owner != id_) continue;  // bound elsewhere: pre-allocated
        const std::string who = "tensor '" + label(g, t) + "' (bound by an earlier alloc_graph)";
        const Tensor& x = g.tensors[static_cast<size_t>(t)];
        // A replan may give its bytes to other tensors or free its buffer.
        const char* gone =
            a.plan != plan_id_ ? "is where a plan since replaced put it (the new plan may have given "
                                 "those bytes to other tensors, or freed its buffer)"
            : replan ? "is where the current plan put it, and the graph has changed so that alloc_graph "
                       "has to plan again (the new plan may give those bytes to other tensors)"
                     : nullptr;
        require_place(g, t, who, gone, x.view_src >= 0 ? x.size : a.reserved, kUnbind);
    }
    // needs_realloc does not look at the leafs' own records (nor does
    // ggml's): a leaf that grew since the reserve, or had data then and has
    // none now, has no place. ggml binds the grown leaf over the tensors
    // after it (aborting past its chunk), or reads buffer id -1.
    if (!replan)
        for (size_t i = 0; i < g.leafs.size(); ++i) {
            const int32_t t = g.leafs[i];
            const Tensor& x = g.tensors[static_cast<size_t>(t)];
            const Slot& s = leaf_slots_[i];
            if ((x.flags & kHasData) || x.view_src >= 0) continue;
            require_place(g, t, "leaf " + std::to_string(i) + " ('" + label(g, t) + "')",
                          !s.present || s.addr.buffer_id < 0
                              ? "had data when the graph was reserved and has none now"
                              : nullptr,
                          s.size, "reserve again");
        }
    if (replan) reserve_n(g, {}, {});

    auto bind = [&](int32_t t, const Slot& s) {
        const Tensor& x = g.tensors[static_cast<size_t>(t)];
        Address& a = bound[static_cast<size_t>(t)];
        if (a.buffer_id >= 0) return;
        if (x.view_src >= 0) {
            const Address root = bound[static_cast<size_t>(x.view_src)];
            if (root.buffer_id < 0) return;
            auto offset = checked_add(root.offset, x.view_offs);
            if (!offset)
                throw PlanError(ErrorCode::AllocationOverflow,
                                "view '" + label(g, t) + "' ends past 2^64-1", label(g, t));
            // As valid as its root's place: its stamp.
            a = Address{root.buffer_id, root.chunk, *offset, root.owner, root.plan, 0};
        } else if (!(x.flags & kHasData) && s.present && s.addr.buffer_id >= 0) {
            // The first record met binds it, as ggml's init_tensor skips a
            // tensor whose data is set: a tensor read at another position
            // than it was reserved at keeps the place it got first.
            a = Address{s.addr.buffer_id, s.addr.chunk, s.addr.offset, id_, plan_id_, s.size};
        }
    };
    for (size_t i = 0; i < g.leafs.size(); ++i) bind(g.leafs[i], leaf_slots_[i]);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
        const Tensor& n = g.tensors[static_cast<size_t>(g.nodes[i])];
        for (int s = 0; s < kMaxSrc; ++s)
            if (n.src[s] >= 0) bind(n.src[s], node_slots_[i][1 + s]);
        bind(g.nodes[i], node_slots_[i][0]);
    }
    return true;
}

std::vector<uint64_t> GraphAllocator::chunk_sizes(int32_t buffer_id) const {
    if (buffer_id < 0 || static_cast<size_t>(buffer_id) >= type_of_.size())
        throw PlanError(ErrorCode::InvalidIrShapes, "buffer id " + std::to_string(buffer_id) +
                                                        " out of range (" + std::to_string(type_of_.size()) +
                                                        " buffer ids)");
    const int32_t k = type_of_[static_cast<size_t>(buffer_id)];
    for (int32_t b = 0; b < buffer_id; ++b)
        if (type_of_[static_cast<size_t>(b)] == k) return {};  // counted under the earlier id
    const auto& chunks = buffers_[static_cast<size_t>(k)];
    return chunks ? *chunks : std::vector<uint64_t>();
}

uint64_t GraphAllocator::buffer_size(int32_t buffer_id) const {
    uint64_t total = 0;
    for (uint64_t c : chunk_sizes(buffer_id)) {
        auto sum = checked_add(total, c);
        if (!sum) throw PlanError(ErrorCode::AllocationOverflow, "buffer size exceeds 2^64-1");
        total = *sum;
    }
    return total;
}

}  // namespace emel::memory::ggml
