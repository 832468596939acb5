// Option names to the core's enums, through its tables (core/tables.hpp);
// a name not in the table is a ValueError naming the choices.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "emel/memory/core/strategy.hpp"
#include "emel/memory/core/tables.hpp"

namespace emel_bindings {

namespace py = pybind11;
using emel::memory::Fit;
using emel::memory::Mode;
using emel::memory::Strategy;

inline Mode parse_mode(const std::string& m) {
    if (auto v = emel::memory::value_named(emel::memory::kModes, m)) return *v;
    throw py::value_error("mode must be " + emel::memory::quoted_names(emel::memory::kModes) + ", got '" + m + "'");
}

inline Strategy parse_strategy(const std::string& s) {
    if (auto v = emel::memory::value_named(emel::memory::kStrategies, s)) return *v;
    throw py::value_error("unknown strategy '" + s + "'");
}

inline Fit parse_fit(const std::string& f) {
    if (auto v = emel::memory::value_named(emel::memory::kFits, f)) return *v;
    throw py::value_error("fit must be " + emel::memory::quoted_names(emel::memory::kFits) + ", got '" + f + "'");
}


// time_budget_ms in work units, saturating (the Python layer caps it at 2^40 ms).
inline uint64_t budget_units(uint64_t time_budget_ms) {
    using emel::memory::kWorkUnitsPerMs;
    return time_budget_ms > UINT64_MAX / kWorkUnitsPerMs ? UINT64_MAX : time_budget_ms * kWorkUnitsPerMs;
}

}  // namespace emel_bindings
