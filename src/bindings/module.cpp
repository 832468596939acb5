// pybind11 module emel.memory._core: converts Python values to the core's
// plain data and back. No planning logic lives here.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>

#include "bindings.hpp"
#include "core_plan.hpp"
#include "emel/memory/core/checked_math.hpp"
#include "emel/memory/core/errors.hpp"
#include "emel/memory/core/graph.hpp"
#include "emel/memory/core/plan.hpp"
#include "emel/memory/determinism/sha256.hpp"
#include "emel/memory/ggml/ggml_alloc.hpp"
#include "emel/memory/placement/placement.hpp"

namespace py = pybind11;
using namespace emel::memory;

namespace {

template <typename T>
py::array_t<T> to_numpy(const std::vector<T>& v) {
    py::array_t<T> a(static_cast<py::ssize_t>(v.size()));
    std::copy(v.begin(), v.end(), a.mutable_data());
    return a;
}

// kNone -> -1, so "none" is visible as a negative index in Python.
py::array_t<int64_t> to_numpy_index(const std::vector<uint32_t>& v) {
    py::array_t<int64_t> a(static_cast<py::ssize_t>(v.size()));
    int64_t* out = a.mutable_data();
    for (size_t i = 0; i < v.size(); ++i) out[i] = v[i] == kNone ? -1 : int64_t{v[i]};
    return a;
}

template <typename T>
std::vector<T> from_numpy(const py::array_t<T, py::array::c_style | py::array::forcecast>& a,
                          size_t expected, const char* what) {
    if (a.ndim() != 1 || static_cast<size_t>(a.shape(0)) != expected)
        throw py::value_error(std::string(what) + ": expected a 1-D array of length " +
                              std::to_string(expected));
    return std::vector<T>(a.data(), a.data() + expected);
}

Mode parse_mode(const std::string& m) {
    if (m == "inference") return Mode::Inference;
    if (m == "forward") return Mode::Forward;
    if (m == "backward") return Mode::Backward;
    throw py::value_error("mode must be 'inference', 'forward' or 'backward', got '" + m + "'");
}

Strategy parse_strategy(const std::string& s) {
    if (s == "tmmu") return Strategy::Tmmu;
    if (s == "greedy_by_size") return Strategy::GreedyBySize;
    if (s == "best_fit") return Strategy::BestFit;
    if (s == "auto") return Strategy::Auto;
    if (s == "optimal") return Strategy::Optimal;
    throw py::value_error("unknown strategy '" + s + "'");
}

Fit parse_fit(const std::string& f) {
    if (f == "best") return Fit::Best;
    if (f == "first") return Fit::First;
    throw py::value_error("fit must be 'best' or 'first', got '" + f + "'");
}

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
    opt.work_budget = time_budget_ms > UINT64_MAX / kWorkUnitsPerMs ? UINT64_MAX
                                                                     : time_budget_ms * kWorkUnitsPerMs;
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
    d["lower_bound"] = a.lower_bound;
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

PYBIND11_MODULE(_core, m) {
    m.doc() = "emel.memory C++ core (use the emel.memory package, not this module)";

    py::register_exception_translator([](std::exception_ptr ep) {
        try {
            if (ep) std::rethrow_exception(ep);
        } catch (const PlanError& e) {
            auto none_if_empty = [](const std::string& s) -> py::object {
                return s.empty() ? py::object(py::none()) : py::object(py::str(s));
            };
            py::object cls = py::module_::import("emel.memory.errors").attr("PlanError");
            py::object err = cls(error_code_name(e.code), e.message, none_if_empty(e.tensor),
                                 none_if_empty(e.node), none_if_empty(e.arena));
            PyErr_SetObject(cls.ptr(), err.ptr());
        }
    });

    py::class_<GraphInput, std::shared_ptr<GraphInput>>(m, "GraphInput")
        .def(py::init<>())
        .def_readwrite("name", &GraphInput::name)
        .def_property_readonly("num_tensors", &GraphInput::num_tensors)
        .def_property_readonly("num_nodes", &GraphInput::num_nodes)
        .def(
            "add_tensors",
            [](GraphInput& in, const py::list& rows) {
                // row: (id, shape, dtype, nbytes|None, role, arena, alignment, saved,
                //       can_inplace, base|None, byte_offset, must_not_alias)
                std::vector<uint64_t> shape;
                for (auto item : rows) {
                    auto r = item.cast<py::tuple>();
                    shape.clear();
                    for (auto d : r[1].cast<py::list>()) shape.push_back(d.cast<uint64_t>());
                    const bool has_nbytes = !r[3].is_none();
                    const bool view = !r[9].is_none();
                    in.add_tensor(r[0].cast<std::string>(), shape.data(), shape.size(),
                                  r[2].cast<std::string>(), has_nbytes,
                                  has_nbytes ? r[3].cast<uint64_t>() : 0,
                                  static_cast<Role>(r[4].cast<int>()), r[5].cast<std::string>(),
                                  r[6].cast<uint64_t>(), r[7].cast<bool>(), r[8].cast<bool>(),
                                  view, view ? r[9].cast<std::string>() : std::string(),
                                  r[10].cast<uint64_t>(),
                                  r[11].cast<std::vector<std::string>>());
                }
            },
            "Append tensors given as tuples (see emel/memory/graph.py).")
        .def(
            "add_nodes",
            [](GraphInput& in, const py::list& rows) {
                // row: (id, phase, inputs, outputs)
                for (auto item : rows) {
                    auto r = item.cast<py::tuple>();
                    in.add_node(r[0].cast<std::string>(), static_cast<Phase>(r[1].cast<int>()),
                                r[2].cast<std::vector<std::string>>(),
                                r[3].cast<std::vector<std::string>>());
                }
            },
            "Append nodes given as tuples (see emel/memory/graph.py).")
        .def_static(
            "from_arrays",
            [](const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& size,
               const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& in_start,
               const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& in_index,
               const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& out_start,
               const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& out_index,
               const py::array_t<uint8_t, py::array::c_style | py::array::forcecast>& role,
               const py::array_t<uint8_t, py::array::c_style | py::array::forcecast>& can_inplace,
               const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& alignment,
               const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& view_base,
               const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& view_offset,
               const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& outputs,
               const std::string& name) {
                GraphArrays a;
                a.num_tensors = static_cast<size_t>(size.size());
                a.num_nodes = in_start.size() > 0 ? static_cast<size_t>(in_start.size()) - 1 : 0;
                if (static_cast<size_t>(out_start.size()) != a.num_nodes + 1 || in_start.size() == 0)
                    throw py::value_error("node input and output offsets need num_nodes + 1 entries each");
                auto tail = [](const auto& start) { return static_cast<uint64_t>(start.data()[start.size() - 1]); };
                if (tail(in_start) > static_cast<uint64_t>(in_index.size()) ||
                    tail(out_start) > static_cast<uint64_t>(out_index.size()))
                    throw py::value_error("node offsets point past the index arrays");
                auto optional = [&](const auto& arr, const char* what) {
                    if (arr.size() == 0) return decltype(arr.data())(nullptr);
                    if (static_cast<size_t>(arr.size()) != a.num_tensors)
                        throw py::value_error(std::string(what) + ": one entry per tensor expected");
                    return arr.data();
                };
                a.size = size.data();
                a.in_start = in_start.data();
                a.in_index = in_index.data();
                a.out_start = out_start.data();
                a.out_index = out_index.data();
                a.role = optional(role, "role");
                a.can_inplace = optional(can_inplace, "can_inplace");
                a.alignment = optional(alignment, "alignment");
                a.view_base = optional(view_base, "view_base");
                a.view_offset = optional(view_offset, "view_offset");
                a.outputs = outputs.data();
                a.num_outputs = static_cast<size_t>(outputs.size());
                py::gil_scoped_release release;
                return std::make_shared<GraphInput>(graph_input_from_arrays(a, name));
            },
            "A GraphInput from index arrays (see Graph.from_arrays).")
        .def("set_execution_order",
             [](GraphInput& in, const std::vector<std::string>& order) {
                 in.has_execution_order = true;
                 in.execution_order = order;
             })
        .def("set_outputs",
             [](GraphInput& in, const std::vector<std::string>& outs) { in.outputs = outs; });

    m.def(
        "validate",
        [](const GraphInput& in) {
            py::gil_scoped_release release;
            build_graph(in);
        },
        "Run the full validation (docs/algorithm.md §1); raise PlanError on failure.");

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
            validate_options(opt);  // configuration errors come before graph errors
            auto graph = std::make_shared<const Graph>(build_graph(in));
            auto core = std::make_unique<CorePlan>();
            core->graph = graph;
            core->plan = make_plan(*graph, opt);
            hash_plan(in, *graph, opt, core->plan);
            return core;
        },
        py::arg("graph"), py::arg("mode"), py::arg("strategy"), py::arg("fit"),
        py::arg("time_budget_ms"), py::arg("default_alignment"), py::arg("arenas"),
        py::arg("role_arenas"), py::arg("replay_token") = py::bytes(), py::arg("rank") = 0,
        py::arg("world_size") = 1, py::arg("shard_spec") = std::map<std::string, uint64_t>(),
        "Validate, plan and hash a graph.");

    py::class_<ggml::TensorAllocator>(m, "GgmlTensorAllocator")
        .def(py::init<uint64_t, uint64_t>(), py::arg("buffer_size"), py::arg("alignment"))
        .def("alloc", &ggml::TensorAllocator::alloc, py::arg("size"), py::arg("name") = "")
        .def_property_readonly("offset", &ggml::TensorAllocator::offset);

    m.def(
        "place",
        [](const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& lower,
           const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& upper,
           const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& size,
           const std::string& strategy, uint64_t alignment, const std::string& fit,
           uint64_t time_budget_ms, uint64_t capacity) {
            const size_t n = static_cast<size_t>(size.size());
            auto lo = from_numpy(lower, n, "lower");
            auto hi = from_numpy(upper, n, "upper");
            auto sz = from_numpy(size, n, "size");
            const Strategy s = parse_strategy(strategy);
            const Fit f = parse_fit(fit);
            const uint64_t budget = time_budget_ms > UINT64_MAX / kWorkUnitsPerMs
                                        ? UINT64_MAX
                                        : time_budget_ms * kWorkUnitsPerMs;
            RowPlacement r;
            {
                py::gil_scoped_release release;
                r = place_rows(std::move(lo), std::move(hi), std::move(sz), alignment, s, f, budget,
                               capacity);
            }
            const Placement& placed = r.placed;
            py::dict info;
            info["method"] = placed.method;
            info["work"] = placed.work;
            info["optimal"] = placed.optimal;
            info["lower_bound"] = r.peak_live_bytes;
            info["proven_bound"] = placed.proven_bound;
            return py::make_tuple(to_numpy(placed.offset), r.arena_size, info);
        },
        py::arg("lower"), py::arg("upper"), py::arg("size"), py::arg("strategy"),
        py::arg("alignment"), py::arg("fit"), py::arg("time_budget_ms"), py::arg("capacity"),
        "Place buffers live over [lower, upper) with `size` bytes; returns (offsets, size, info).");

    // For tests of auto's peak window (docs/strategies.md §4); not public API.
    m.def(
        "_peak_window",
        [](const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& lower,
           const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& upper,
           const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& size,
           uint64_t max_buffers, uint64_t time_budget_ms) {
            const size_t n = static_cast<size_t>(size.size());
            Buffers b;
            b.lower = from_numpy(lower, n, "lower");
            b.upper = from_numpy(upper, n, "upper");
            b.size = from_numpy(size, n, "size");
            b.alignment.assign(n, 1);
            b.rank.resize(n);
            for (size_t x = 0; x < n; ++x) {
                if (b.lower[x] > b.upper[x]) throw py::value_error("lower > upper in row " + std::to_string(x));
                b.rank[x] = static_cast<uint32_t>(x);
            }
            PeakWindow w;
            Placement inside, around;
            {
                py::gil_scoped_release release;
                w = PeakWindows(b).around_peak(static_cast<size_t>(max_buffers));
                inside = place_optimal(w.instance, time_budget_ms * kWorkUnitsPerMs, peak_live_bytes(b));
                around = place_around_window(b, w, inside, order_by_size(b));
            }
            py::dict out;
            out["from"] = w.from;
            out["to"] = w.to;
            out["whole"] = w.whole;
            out["members"] = to_numpy(std::vector<uint64_t>(w.members.begin(), w.members.end()));
            out["window_offsets"] = to_numpy(inside.offset);
            out["window_end"] = inside.end;
            out["offsets"] = to_numpy(around.offset);
            out["end"] = around.end;
            return out;
        },
        py::arg("lower"), py::arg("upper"), py::arg("size"), py::arg("max_buffers"),
        py::arg("time_budget_ms"),
        "auto's peak window on rows (alignment 1): the window, the exact search's "
        "placement of it, and every row placed around it by first fit.");

    // Areas bound in their own files (src/bindings/*.cpp).
    bind_sha256(m);
    bind_ggml(m);
    bind_arenas(m);
    bind_pooling(m);
    bind_determinism(m);
}
