// _core.ArenaEngine: the arena engine (src/emel/memory/runtime/arena_engine.hpp).
// Arrays are made here over the engine's memory with the ArenaMemory object
// as their base, so the bytes outlive the engine for as long as any array
// holds them; NumPy then provides __dlpack__. Engine errors become
// emel.memory.PlanError with their own codes. Calls on an existing engine
// keep the GIL: the engine is not thread-safe, and the GIL serialises them
// (only the constructor, which no other thread can see yet, releases it).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>

#include "bindings.hpp"
#include "core_plan.hpp"
#include "emel/memory/runtime/arena_engine.hpp"

namespace py = pybind11;
using namespace emel::memory;

namespace {

using U64Array = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>;
using U32Array = py::array_t<uint32_t, py::array::c_style | py::array::forcecast>;

template <typename T, typename A>
std::vector<T> column(const A& a, size_t expected, const char* what) {
    if (a.ndim() != 1 || static_cast<size_t>(a.shape(0)) != expected)
        throw py::value_error(std::string(what) + ": expected a 1-D array of length " +
                              std::to_string(expected));
    return std::vector<T>(a.data(), a.data() + expected);
}

// The core plan with the caller's (possibly edited) arrays, as Plan.verify takes them.
Plan plan_as_edited(const CorePlan& c, const U64Array& offset, const U32Array& birth,
                    const U32Array& death, const std::vector<uint64_t>& arena_sizes) {
    const size_t T = c.graph->num_tensors;
    Plan p = c.plan;
    p.offset = column<uint64_t>(offset, T, "offset");
    p.live.birth = column<uint32_t>(birth, T, "birth");
    p.live.death = column<uint32_t>(death, T, "death");
    if (arena_sizes.size() != p.arenas.size())
        throw py::value_error("arena_sizes: one size per arena expected");
    for (size_t i = 0; i < arena_sizes.size(); ++i) p.arenas[i].size = arena_sizes[i];
    return p;
}

ExecutionMode parse_execution_mode(const std::string& m) {
    if (m == "standard") return ExecutionMode::Standard;
    if (m == "confidential") return ExecutionMode::Confidential;
    if (m == "regulated") return ExecutionMode::Regulated;
    throw py::value_error("execution_mode must be 'standard', 'confidential' or 'regulated', got '" +
                          m + "'");
}

py::dict ledger_dict(const LedgerEntry& l) {
    py::dict d;
    d["step"] = l.step;
    d["bytes_allocated"] = l.bytes_allocated;
    d["peak_bytes"] = l.peak_bytes;
    d["allocation_failures"] = l.allocation_failures;
    d["internal_fragmentation_ratio"] = l.internal_fragmentation_ratio;
    return d;
}

const char* visibility_name(Visibility v) { return v == Visibility::Committed ? "committed" : "pending"; }

uint32_t tensor_index(const ArenaEngine& e, int64_t t) {
    if (t < 0 || static_cast<uint64_t>(t) >= e.graph().num_tensors)
        throw py::index_error("tensor index out of range");
    return static_cast<uint32_t>(t);
}

}  // namespace

void bind_arenas(py::module_& m) {
    py::register_exception_translator([](std::exception_ptr ep) {
        try {
            if (ep) std::rethrow_exception(ep);
        } catch (const EngineError& e) {
            auto none_if_empty = [](const std::string& s) -> py::object {
                return s.empty() ? py::object(py::none()) : py::object(py::str(s));
            };
            py::object cls = py::module_::import("emel.memory.errors").attr("PlanError");
            py::object err = cls(e.code, e.message, none_if_empty(e.tensor), none_if_empty(e.node),
                                 none_if_empty(e.arena));
            err.attr("step") = e.step == kNoStep ? py::object(py::none()) : py::object(py::int_(e.step));
            err.attr("byte_offset") =
                e.byte_offset == kNoStep ? py::object(py::none()) : py::object(py::int_(e.byte_offset));
            err.attr("overwritten_by") = none_if_empty(e.overwritten_by);
            PyErr_SetObject(cls.ptr(), err.ptr());
        }
    });

    py::class_<ArenaMemory, std::shared_ptr<ArenaMemory>>(
        m, "ArenaMemory", "The host buffers of one application of a plan (the base of its arrays).")
        .def_property_readonly("nbytes", [](const ArenaMemory& mem) {
            uint64_t n = 0;
            for (const auto& a : mem.arenas) n += a.owned ? a.size : 0;
            return n;
        });

    py::class_<ArenaEngine>(m, "ArenaEngine")
        .def(py::init([](const CorePlan& c, const U64Array& offset, const U32Array& birth,
                         const U32Array& death, const std::vector<uint64_t>& arena_sizes,
                         const std::string& execution_mode, bool zero,
                         std::optional<uint64_t> budget, uint64_t pattern_seed) {
                 ApplyOptions opt;
                 opt.execution_mode = parse_execution_mode(execution_mode);
                 opt.zero_tensors = zero;
                 opt.has_budget = budget.has_value();
                 opt.memory_bytes_budget = budget.value_or(0);
                 opt.pattern_seed = pattern_seed;
                 Plan p = plan_as_edited(c, offset, birth, death, arena_sizes);
                 py::gil_scoped_release release;
                 return std::make_unique<ArenaEngine>(c.graph, std::move(p), opt);
             }),
             py::arg("plan"), py::arg("offset"), py::arg("birth"), py::arg("death"),
             py::arg("arena_sizes"), py::arg("execution_mode"), py::arg("zero"), py::arg("budget"),
             py::arg("pattern_seed"))
        .def(
            "apply",
            [](ArenaEngine& e, const CorePlan& c, const U64Array& offset, const U32Array& birth,
               const U32Array& death, const std::vector<uint64_t>& arena_sizes, bool zero) {
                Plan p = plan_as_edited(c, offset, birth, death, arena_sizes);
                e.apply(c.graph, std::move(p), zero);
            },
            py::arg("plan"), py::arg("offset"), py::arg("birth"), py::arg("death"),
            py::arg("arena_sizes"), py::arg("zero"))
        .def(
            "array",
            [](ArenaEngine& e, int64_t t, const py::dtype& dt, const std::vector<py::ssize_t>& shape) {
                const uint32_t i = tensor_index(e, t);
                uint64_t bytes = static_cast<uint64_t>(dt.itemsize());
                for (py::ssize_t d : shape) bytes *= static_cast<uint64_t>(d);
                if (bytes != e.graph().size[i])
                    throw py::value_error("the array would span " + std::to_string(bytes) +
                                          " bytes but tensor '" + e.graph().tensor_id[i] + "' has " +
                                          std::to_string(e.graph().size[i]));
                e.mark_written(e.plan().arena_of[i]);  // the caller may write through it
                return py::array(dt, shape, e.address(i), py::cast(e.memory()));
            },
            py::arg("tensor"), py::arg("dtype"), py::arg("shape"))
        .def(
            "arena_array",
            [](ArenaEngine& e, uint32_t a) {
                if (a >= e.memory()->arenas.size()) throw py::index_error("arena index out of range");
                e.mark_written(a);
                const ArenaBuffer& b = e.memory()->arenas[a];
                return py::array(py::dtype::of<uint8_t>(), {static_cast<py::ssize_t>(b.size)}, b.base,
                                 py::cast(e.memory()));
            },
            py::arg("arena"))
        .def("address",
             [](const ArenaEngine& e, int64_t t) {
                 return reinterpret_cast<uintptr_t>(e.address(tensor_index(e, t)));
             })
        .def("zero_tensor", [](ArenaEngine& e, int64_t t) { e.zero_tensor(tensor_index(e, t)); })
        .def("zero_all", [](ArenaEngine& e) { e.zero_all(); })
        .def("debug_fill_tensor",
             [](ArenaEngine& e, int64_t t) { e.debug_fill_tensor(tensor_index(e, t)); })
        .def(
            "commit",
            [](ArenaEngine& e, bool include_data) {
                const CommitRecord r = e.commit(include_data);
                py::dict d;
                d["step"] = r.step;
                d["state_hash"] = to_hex(r.state_hash);
                d["includes_data"] = r.includes_data;
                py::list vis, changed;
                for (size_t i = 0; i < r.visibility.size(); ++i) {
                    vis.append(visibility_name(r.visibility[i]));
                    changed.append(r.committed_step[i]);
                }
                d["visibility"] = vis;
                d["committed_step"] = changed;
                return d;
            },
            py::arg("include_data"))
        .def("verify_execution",
             [](ArenaEngine& e) {
                 const ExecutionReport r = e.verify_execution();
                 py::dict d;
                 d["steps"] = r.steps;
                 d["tensors_written"] = r.tensors_written;
                 d["bytes_written"] = r.bytes_written;
                 d["tensors_checked"] = r.tensors_checked;
                 d["bytes_checked"] = r.bytes_checked;
                 return d;
             })
        .def_property_readonly("ledger", [](const ArenaEngine& e) { return ledger_dict(e.ledger()); })
        .def_property_readonly("ledger_history",
                               [](const ArenaEngine& e) {
                                   py::list out;
                                   for (const auto& l : e.ledger_history()) out.append(ledger_dict(l));
                                   return out;
                               })
        .def_property_readonly("step", &ArenaEngine::step)
        .def_property_readonly("execution_mode",
                               [](const ArenaEngine& e) {
                                   return execution_mode_name(e.options().execution_mode);
                               })
        .def_property_readonly("memory", [](const ArenaEngine& e) { return e.memory(); })
        .def_property_readonly("arenas", [](const ArenaEngine& e) {
            py::list out;
            const auto& mem = *e.memory();
            for (size_t i = 0; i < mem.arenas.size(); ++i) {
                const ArenaBuffer& b = mem.arenas[i];
                py::dict d;
                d["name"] = b.name;
                d["size"] = b.size;
                d["alignment"] = b.alignment;
                d["address"] = reinterpret_cast<uintptr_t>(b.base);
                d["allocated"] = b.owned ? b.size : 0;
                d["visibility"] = visibility_name(e.visibility()[i]);
                out.append(d);
            }
            return out;
        });
}
