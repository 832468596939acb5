// _core.place(lower, upper, size, ...): the placement problem on bare rows
// (placement/offsets.cpp place_rows), docs/strategies.md §6.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "numpy_convert.hpp"
#include "parse_options.hpp"
#include "emel/memory/placement/placement.hpp"

namespace py = pybind11;
using namespace emel::memory;
using namespace emel_bindings;

void bind_place(py::module_& m) {
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
            const uint64_t budget = budget_units(time_budget_ms);
            RowPlacement r;
            {
                py::gil_scoped_release release;
                r = place_rows(std::move(lo), std::move(hi), std::move(sz), alignment, s, f, budget,
                               capacity);
            }
            Placement& placed = r.placed;
            py::dict info;
            info["method"] = placed.method;
            info["work"] = placed.work;
            info["optimal"] = placed.optimal;
            // Two different bounds (docs/architecture.md, "Bounds"): the public key
            // "lower_bound" is the rows' peak of live bytes, "proven_bound" what
            // auto / optimal proved about the end.
            info["lower_bound"] = r.peak_live_bytes;
            info["proven_bound"] = placed.proven_bound;
            return py::make_tuple(to_numpy(std::move(placed.offset)), r.arena_size, info);
        },
        py::arg("lower"), py::arg("upper"), py::arg("size"), py::arg("strategy"),
        py::arg("alignment"), py::arg("fit"), py::arg("time_budget_ms"), py::arg("capacity"),
        "Place buffers live over [lower, upper) with `size` bytes; returns (offsets, size, info).");

}
