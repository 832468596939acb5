// _core.plan(graph, ...) -> CorePlan, through the pipeline's one entry
// (pipeline/pipeline.hpp), and CorePlan's read-only views of the plan.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <string>

#include "bindings.hpp"
#include "core_plan.hpp"
#include "numpy_convert.hpp"
#include "parse_options.hpp"
#include "emel/memory/core/plan.hpp"
#include "emel/memory/determinism/sha256.hpp"
#include "emel/memory/pipeline/pipeline.hpp"

namespace py = pybind11;
using namespace emel::memory;
using namespace emel_bindings;

namespace {

// arenas: {name: {"alignment_bytes": int, "capacity_bytes": int, "page_size": int,
//                 "persistent": bool}}, already type-checked by the Python layer.
// role_arenas: {role index: arena name}.
PlanOptions make_options(const std::string& mode, const std::string& strategy,
                         const std::string& fit, uint64_t time_budget_ms,
                         uint64_t default_alignment, const py::dict& arenas,
                         const std::map<int, std::string>& role_arenas) {
    PlanOptions opt;
    opt.mode = parse_mode(mode);
    opt.strategy = parse_strategy(strategy);
    opt.fit = parse_fit(fit);
    opt.work_budget = budget_units(time_budget_ms);
    opt.default_alignment = default_alignment;
    for (const auto& [role, name] : role_arenas) opt.role_arenas.at(role) = name;
    for (auto item : arenas) {
        ArenaConfig c;
        auto cfg = item.second.cast<py::dict>();
        if (cfg.contains("alignment_bytes")) {
            c.has_alignment = true;
            c.alignment_bytes = cfg["alignment_bytes"].cast<uint64_t>();
        }
        if (cfg.contains("capacity_bytes")) {
            c.has_capacity = true;
            c.capacity_bytes = cfg["capacity_bytes"].cast<uint64_t>();
        }
        if (cfg.contains("page_size")) {
            c.has_page_size = true;
            c.page_size = cfg["page_size"].cast<uint64_t>();
        }
        if (cfg.contains("persistent")) {
            c.has_persistent = true;
            c.persistent = cfg["persistent"].cast<bool>();
        }
        opt.arenas[item.first.cast<std::string>()] = c;
    }
    return opt;
}

py::dict arena_dict(const ArenaPlan& a) {
    py::dict d;
    d["name"] = a.name;
    d["persistent"] = a.persistent;
    d["alignment"] = a.alignment;
    d["page_size"] = a.page_size;
    d["capacity_bytes"] = a.has_capacity ? py::object(py::int_(a.capacity)) : py::none();
    d["size"] = a.size;
    d["slots"] = a.has_slots ? py::object(py::int_(a.slot_size.size())) : py::none();
    d["method"] = a.method;
    d["work"] = a.work;
    d["optimal"] = a.optimal;
    d["proven_bound"] = a.proven_bound;
    d["lower_bound"] = a.inplace_aware_bound;  // public key (docs/architecture.md, "Bounds")
    d["peak_live_bytes"] = a.peak_live_bytes;
    d["max_live"] = a.max_live;
    d["storage_tensors"] = a.storage_tensors;
    d["memory_reuse_ratio"] = a.memory_reuse_ratio;
    d["internal_fragmentation_ratio"] = a.internal_fragmentation_ratio;
    d["slot_sizes"] = to_numpy(a.slot_size);
    d["slot_offsets"] = to_numpy(a.slot_offset);
    return d;
}

}  // namespace

void bind_plan(py::module_& m) {
    py::class_<CorePlan>(m, "CorePlan")
        .def_property_readonly("steps", [](const CorePlan& c) { return c.plan.steps; })
        .def_property_readonly("mode", [](const CorePlan& c) { return mode_name(c.plan.mode); })
        .def_property_readonly("strategy", [](const CorePlan& c) { return c.plan.strategy; })
        .def_property_readonly("allocation_time_ns",
                               [](const CorePlan& c) { return c.plan.allocation_time_ns; })
        .def_property_readonly("tensor_ids", [](const CorePlan& c) { return c.graph->tensor_id; })
        .def_property_readonly("size", [](const CorePlan& c) { return to_numpy(c.graph->size); })
        .def_property_readonly("root",
                               [](const CorePlan& c) { return to_numpy_index(c.graph->root); })
        .def_property_readonly("view_base",
                               [](const CorePlan& c) { return to_numpy_index(c.graph->view_base); })
        .def_property_readonly("arena_of",
                               [](const CorePlan& c) { return to_numpy_index(c.plan.arena_of); })
        .def_property_readonly("slot", [](const CorePlan& c) { return to_numpy_index(c.plan.slot); })
        .def_property_readonly("offset", [](const CorePlan& c) { return to_numpy(c.plan.offset); })
        .def_property_readonly("birth", [](const CorePlan& c) { return to_numpy(c.plan.live.birth); })
        .def_property_readonly("death", [](const CorePlan& c) { return to_numpy(c.plan.live.death); })
        .def_property_readonly("inplace_of",
                               [](const CorePlan& c) { return to_numpy_index(c.plan.inplace_of); })
        .def_property_readonly("hashes",
                               [](const CorePlan& c) {
                                   const PlanHashes& h = c.plan.hashes;
                                   py::dict d;
                                   d["ir_hash"] = to_hex(h.ir);
                                   d["execution_order_hash"] = to_hex(h.execution_order);
                                   d["arena_config_hash"] = to_hex(h.arena_config);
                                   d["shard_spec_hash"] = to_hex(h.shard_spec);
                                   d["plan_hash"] = to_hex(h.plan);
                                   return d;
                               })
        .def_property_readonly("replay_token",
                               [](const CorePlan& c) {
                                   const Digest& t = c.plan.replay_token;
                                   return py::bytes(reinterpret_cast<const char*>(t.data()), t.size());
                               })
        .def_property_readonly("rank", [](const CorePlan& c) { return c.plan.rank; })
        .def_property_readonly("world_size", [](const CorePlan& c) { return c.plan.world_size; })
        .def_property_readonly("arenas",
                               [](const CorePlan& c) {
                                   py::list out;
                                   for (const auto& a : c.plan.arenas) out.append(arena_dict(a));
                                   return out;
                               })
        .def(
            "verify",
            [](const CorePlan& c,
               const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& offset,
               const py::array_t<uint32_t, py::array::c_style | py::array::forcecast>& birth,
               const py::array_t<uint32_t, py::array::c_style | py::array::forcecast>& death,
               const std::vector<uint64_t>& arena_sizes) {
                const size_t T = c.graph->num_tensors;
                Plan p = c.plan;
                p.offset = from_numpy(offset, T, "offset");
                p.live.birth = from_numpy(birth, T, "birth");
                p.live.death = from_numpy(death, T, "death");
                if (arena_sizes.size() != p.arenas.size())
                    throw py::value_error("arena_sizes: one size per arena expected");
                for (size_t i = 0; i < arena_sizes.size(); ++i) p.arenas[i].size = arena_sizes[i];
                py::gil_scoped_release release;
                self_check(*c.graph, p);
            },
            "Re-run the self-check on edited plan arrays; raise PlanError on failure.");

    m.def(
        "plan",
        [](const GraphInput& in, const std::string& mode, const std::string& strategy,
           const std::string& fit, uint64_t time_budget_ms, uint64_t default_alignment,
           const py::dict& arenas, const std::map<int, std::string>& role_arenas,
           const py::bytes& replay_token, uint64_t rank, uint64_t world_size,
           const std::map<std::string, uint64_t>& shard_spec) {
            PlanOptions opt = make_options(mode, strategy, fit, time_budget_ms, default_alignment,
                                           arenas, role_arenas);
            const std::string token = replay_token;
            opt.replay_token.assign(token.begin(), token.end());
            opt.rank = rank;
            opt.world_size = world_size;
            opt.shard_spec = shard_spec;
            py::gil_scoped_release release;
            return std::make_unique<CorePlan>(plan_graph(in, opt));  // pipeline/pipeline.cpp
        },
        py::arg("graph"), py::arg("mode"), py::arg("strategy"), py::arg("fit"),
        py::arg("time_budget_ms"), py::arg("default_alignment"), py::arg("arenas"),
        py::arg("role_arenas"), py::arg("replay_token") = py::bytes(), py::arg("rank") = 0,
        py::arg("world_size") = 1, py::arg("shard_spec") = std::map<std::string, uint64_t>(),
        "Validate, plan and hash a graph.");

}
