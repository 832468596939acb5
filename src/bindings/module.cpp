// pybind11 module emel.memory._core: converts Python values to the core's
// plain data and back. No planning logic lives here: each area binds itself
// in its own file (bindings.hpp lists them); this file holds the module, the
// PlanError translation and the core's name tables.
#include <pybind11/pybind11.h>

#include "bindings.hpp"
#include "emel/memory/core/errors.hpp"
#include "emel/memory/core/tables.hpp"

namespace py = pybind11;
using namespace emel::memory;

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

    // The core's tables (core/tables.hpp), read by emel.memory.vocabulary.
    {
        py::list strategies;
        for (const auto& s : kStrategies)
            strategies.append(py::make_tuple(s.name, static_cast<int>(s.value), s.has_reference, s.searches));
        m.attr("STRATEGY_TABLE") = py::tuple(strategies);
        py::list roles;
        for (const auto& r : kRoles)
            roles.append(py::make_tuple(r.name, static_cast<int>(r.value), r.default_arena, r.persistent,
                                        r.never_inplace_victim));
        m.attr("ROLE_TABLE") = py::tuple(roles);
        auto names = [](const auto& table) {
            py::list out;
            for (const auto& row : table) out.append(row.name);
            return py::tuple(out);
        };
        m.attr("MODES") = names(kModes);
        m.attr("FITS") = names(kFits);
    }

    // Areas bound in their own files (src/bindings/*.cpp).
    bind_graph(m);
    bind_plan(m);
    bind_place(m);
    bind_test_hooks(m);
    bind_sha256(m);
    bind_ggml(m);
    bind_arenas(m);
    bind_pooling(m);
    bind_determinism(m);
}
