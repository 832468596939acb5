// The determinism contract's hashes (docs/determinism.md): ir_hash,
// execution_order_hash, arena_config_hash, shard_spec_hash, the default
// replay token and tmmu_plan_hash, each SHA-256 over canonical CBOR. The
// reference (python/emel/memory/reference.py) computes the same bytes on its
// own; the E0 tests compare the two.
#include <algorithm>
#include <numeric>

#include "emel/memory/determinism/plan_hash.hpp"
#include "emel/memory/determinism/cbor.hpp"

namespace emel::memory {

namespace {

using cbor::Value;
using cbor::Writer;

// Streams a structure straight into SHA-256.
struct HashingWriter {
    Sha256 hasher;
    Writer w{&hasher};
    Digest finish() {
        w.flush();
        return hasher.finish();
    }
};

void write_digest(Writer& w, const Digest& d) { w.bytes(d.data(), d.size()); }

// Ids in id (code point) order: the order of every table.
std::vector<uint32_t> tensors_in_id_order(const Graph& g) {
    std::vector<uint32_t> order(g.num_tensors);
    for (uint32_t t = 0; t < g.num_tensors; ++t) order[g.id_rank[t]] = t;
    return order;
}

template <typename It>
void write_sorted_unique(Writer& w, It first, It last) {
    if (first == last) {  // the common case: no allocation
        w.array(0);
        return;
    }
    std::vector<std::string> ids(first, last);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    w.array(ids.size());
    for (const auto& id : ids) w.text(id);
}

Digest execution_order_hash(const Graph& g) {
    HashingWriter h;
    h.w.array(2);
    h.w.text("emel_execution_order_v1");
    h.w.array(g.step_node_id.size());
    for (const auto& id : g.step_node_id) h.w.text(id);
    return h.finish();
}

Digest arena_config_hash(const Plan& p) {
    Value arenas = Value::map();
    for (const ArenaPlan& a : p.arenas) {
        Value cfg = Value::map();
        cfg.set(Value::text("alignment"), Value::uint(a.alignment));
        cfg.set(Value::text("capacity_bytes"), a.has_capacity ? Value::uint(a.capacity) : Value::null());
        cfg.set(Value::text("page_size"), Value::uint(a.page_size));
        cfg.set(Value::text("persistent"), Value::boolean(a.persistent));
        arenas.set(Value::text(a.name), std::move(cfg));
    }
    Value doc = Value::array();
    doc.push(Value::text("emel_arena_config_v1")).push(std::move(arenas));
    return sha256(cbor::encode(doc));
}

Digest shard_spec_hash(const std::map<std::string, uint64_t>& spec) {
    Value m = Value::map();
    for (const auto& [id, axis] : spec) m.set(Value::text(id), Value::uint(axis));
    return sha256(cbor::encode(m));
}

Digest default_replay_token(const Digest& ir, Mode mode) {
    Writer w;
    w.array(2);
    write_digest(w, ir);
    w.text(mode_name(mode));
    return sha256(w.out);
}

// [replay_token, rows]; a row per storage tensor in id order:
// [id, arena, slot | null, birth, death, inplace_of | null].
void write_slot_assignment_table(Writer& w, const Graph& g, const Plan& p,
                                 const std::vector<uint32_t>& order) {
    w.array(2);
    write_digest(w, p.replay_token);
    uint64_t storage = 0;
    for (uint32_t t = 0; t < g.num_tensors; ++t) storage += g.is_view(t) ? 0 : 1;
    w.array(storage);
    for (uint32_t t : order) {
        if (g.is_view(t)) continue;
        w.array(6);
        w.text(g.tensor_id[t]);
        w.text(p.arenas[p.arena_of[t]].name);
        if (p.slot[t] == kNone) w.null(); else w.uint(p.slot[t]);
        w.uint(p.live.birth[t]);
        w.uint(p.live.death[t]);
        if (p.inplace_of[t] == kNone) w.null(); else w.text(g.tensor_id[p.inplace_of[t]]);
    }
}

// [[[arena, size], ...] in name order, rows]; a row per tensor in id order:
// [id, arena, offset, size, root | null].
void write_logical_address_table(Writer& w, const Graph& g, const Plan& p,
                                 const std::vector<uint32_t>& order) {
    w.array(2);
    w.array(p.arenas.size());
    for (const ArenaPlan& a : p.arenas) {
        w.array(2);
        w.text(a.name);
        w.uint(a.size);
    }
    w.array(g.num_tensors);
    for (uint32_t t : order) {
        w.array(5);
        w.text(g.tensor_id[t]);
        w.text(p.arenas[p.arena_of[t]].name);
        w.uint(p.offset[t]);
        w.uint(g.size[t]);
        if (g.is_view(t)) w.text(g.tensor_id[g.root[t]]); else w.null();
    }
}

}  // namespace

// ["emel_ir_v1", tensors, nodes, outputs] -- see docs/determinism.md §2.
Digest ir_hash(const GraphInput& in, const Graph& g) {
    HashingWriter h;
    Writer& w = h.w;
    w.array(4);
    w.text("emel_ir_v1");
    const auto order = tensors_in_id_order(g);
    w.array(order.size());
    for (uint32_t t : order) {
        w.array(11);
        w.text(g.tensor_id[t]);
        w.array(in.dims_start[t + 1] - in.dims_start[t]);
        for (uint64_t k = in.dims_start[t]; k < in.dims_start[t + 1]; ++k) w.uint(in.dims[k]);
        w.text(in.dtype[t]);
        w.uint(g.size[t]);
        w.text(role_name(g.role[t]));
        w.text(in.arena[t]);
        w.uint(g.alignment[t]);
        w.boolean(in.saved_for_backward[t] != 0);
        w.boolean(in.can_inplace[t] != 0);
        if (in.is_view[t]) {
            w.array(2);
            w.text(in.view_base[t]);
            w.uint(in.view_byte_offset[t]);
        } else {
            w.null();
        }
        write_sorted_unique(w, in.must_not_alias.begin() + in.must_not_alias_start[t],
                            in.must_not_alias.begin() + in.must_not_alias_start[t + 1]);
    }
    std::vector<uint32_t> nodes(in.num_nodes());
    std::iota(nodes.begin(), nodes.end(), 0u);
    std::sort(nodes.begin(), nodes.end(),
              [&](uint32_t a, uint32_t b) { return in.node_id[a] < in.node_id[b]; });
    w.array(nodes.size());
    for (uint32_t k : nodes) {
        w.array(4);
        w.text(in.node_id[k]);
        switch (in.node_phase[k]) {
            case Phase::Forward: w.text("forward"); break;
            case Phase::Backward: w.text("backward"); break;
            case Phase::Unspecified: w.null(); break;
        }
        for (const auto& [flat, start] : {std::pair{&in.node_inputs, &in.node_inputs_start},
                                          std::pair{&in.node_outputs, &in.node_outputs_start}}) {
            w.array((*start)[k + 1] - (*start)[k]);
            for (uint64_t i = (*start)[k]; i < (*start)[k + 1]; ++i) w.text((*flat)[i]);
        }
    }
    write_sorted_unique(w, in.outputs.begin(), in.outputs.end());
    return h.finish();
}

void hash_plan(const GraphInput& in, const Graph& g, const PlanOptions& opt, Plan& p) {
    PlanHashes& h = p.hashes;
    h.ir = ir_hash(in, g);
    h.execution_order = execution_order_hash(g);
    h.arena_config = arena_config_hash(p);
    h.shard_spec = shard_spec_hash(opt.shard_spec);
    if (opt.replay_token.empty())
        p.replay_token = default_replay_token(h.ir, p.mode);
    else
        std::copy(opt.replay_token.begin(), opt.replay_token.end(), p.replay_token.begin());
    p.rank = opt.rank;
    p.world_size = opt.world_size;

    const auto order = tensors_in_id_order(g);
    HashingWriter hw;
    Writer& w = hw.w;
    w.array(2);
    w.text("tmmu_plan_v1");
    w.array(9);
    write_digest(w, h.ir);
    w.text(mode_name(p.mode));
    write_digest(w, h.arena_config);
    write_digest(w, h.execution_order);
    w.uint(p.rank);
    w.uint(p.world_size);
    write_digest(w, h.shard_spec);
    write_slot_assignment_table(w, g, p, order);
    write_logical_address_table(w, g, p, order);
    h.plan = hw.finish();
}

}  // namespace emel::memory
