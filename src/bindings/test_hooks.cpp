// Test-only hooks into the core (names start with '_'; not public API): they
// expose one internal step so a test can check it on its own.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "numpy_convert.hpp"
#include "emel/memory/placement/neighbourhood_search.hpp"
#include "emel/memory/placement/placement.hpp"
#include "emel/memory/placement/stab_index.hpp"

#include <optional>
#include <string>

namespace py = pybind11;
using namespace emel::memory;
using namespace emel_bindings;

namespace {

using U64Array = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>;

// The hooks' rows as bare buffers: alignment 1, ranks in row order.
Buffers rows_as_buffers(const U64Array& lower, const U64Array& upper, const U64Array& size) {
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
    return b;
}

}  // namespace

void bind_test_hooks(py::module_& m) {
    // For tests of auto's peak window (docs/strategies.md §4); not public API.
    m.def(
        "_peak_window",
        [](const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& lower,
           const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& upper,
           const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& size,
           uint64_t max_buffers, uint64_t time_budget_ms) {
            const Buffers b = rows_as_buffers(lower, upper, size);
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

    // For tests of window neighbourhoods (docs/strategies.md §5); not public API.
    m.def(
        "_windows",
        [](const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& lower,
           const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& upper,
           const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& size, uint64_t time_budget_ms) {
            const Buffers b = rows_as_buffers(lower, upper, size);
            Placement p;
            uint64_t work = 0;
            std::vector<WindowSearched> searched;
            {
                py::gil_scoped_release release;
                p = place_greedy(b, order_by_size(b), Fit::First);
                improve_by_windows(b, p, time_budget_ms * kWorkUnitsPerMs, work, &searched);
            }
            py::list windows;
            for (const WindowSearched& w : searched)
                windows.append(py::make_tuple(w.from, w.to, w.freed, w.found, w.share, w.charged));
            py::dict out;
            out["offsets"] = to_numpy(p.offset);
            out["end"] = p.end;
            out["work"] = work;
            out["windows"] = windows;
            return out;
        },
        py::arg("lower"), py::arg("upper"), py::arg("size"), py::arg("time_budget_ms"),
        "improve_by_windows on rows (alignment 1) from first fit by size: the placement, its work and every "
        "window searched, in turn, as (from, to, buffers freed, found, share, work charged for its search).");

    // For tests of the exact search by time sections (docs/strategies.md §5); not public API.
    m.def(
        "_sections",
        [](const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& lower,
           const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& upper,
           const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& size, uint64_t capacity,
           uint64_t time_budget_ms, uint64_t search_whole_up_to, uint64_t section_rows) {
            const Buffers b = rows_as_buffers(lower, upper, size);
            Placement start, p;
            {
                py::gil_scoped_release release;
                // The start: first fit by size, often above the optimum, so there is something to gain.
                start = place_greedy(b, order_by_size(b), Fit::First);
                p = place_by_sections(b, start, capacity, time_budget_ms * kWorkUnitsPerMs,
                                      SectionSizes{static_cast<size_t>(search_whole_up_to),
                                                   static_cast<size_t>(section_rows)});
            }
            py::dict out;
            out["start_end"] = start.end;
            out["offsets"] = to_numpy(p.offset);
            out["end"] = p.end;
            out["work"] = p.work;
            out["optimal"] = p.optimal;
            out["proven_bound"] = p.proven_bound;
            return out;
        },
        py::arg("lower"), py::arg("upper"), py::arg("size"), py::arg("capacity"), py::arg("time_budget_ms"),
        py::arg("search_whole_up_to"), py::arg("section_rows"),
        "place_by_sections on rows (alignment 1) from first fit by size, components searched whole up to "
        "`search_whole_up_to` rows, larger ones rolled through in sections of about `section_rows`.");

    // For tests of greedy passes by time parts (docs/strategies.md §2); not public API.
    m.def(
        "_parts_pass",
        [](const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& lower,
           const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& upper,
           const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& size, const std::string& fit,
           uint64_t limit) {
            const Buffers b = rows_as_buffers(lower, upper, size);
            const Fit f = fit == "first" ? Fit::First : Fit::Best;
            bool takes_parts = false;
            std::optional<Placement> p;
            {
                py::gil_scoped_release release;
                const std::vector<uint32_t> order = order_by_size(b);
                takes_parts = greedy_takes_parts(b, order);
                PartsPass pass(b, order, f);
                p = pass.unless_above(limit);
            }
            py::dict out;
            out["takes_parts"] = takes_parts;
            out["answered"] = p.has_value();
            if (p) {
                out["abandoned"] = p->abandoned;
                out["end"] = p->end;
                out["work"] = p->work;
                out["offsets"] = to_numpy(p->offset);
            }
            return out;
        },
        py::arg("lower"), py::arg("upper"), py::arg("size"), py::arg("fit"), py::arg("limit"),
        "greedy by size (rows, alignment 1) as auto's closing pass takes it in time parts, given up past "
        "`limit`: whether a whole pass takes parts, and the answer (none where it failed).");
    // For tests of the index a greedy pass takes (docs/strategies.md §2, "Crowds"); not public API.
    m.def(
        "_dense_index",
        [](const U64Array& lower, const U64Array& upper, const U64Array& size) {
            const Buffers b = rows_as_buffers(lower, upper, size);
            switch (dense_index_for(b)) {
                case DenseIndex::Stabs: return std::string("stabs");
                case DenseIndex::Unions: return std::string("unions");
                case DenseIndex::None: break;
            }
            return std::string("rows");
        },
        py::arg("lower"), py::arg("upper"), py::arg("size"),
        "the index a greedy pass over these rows takes: 'stabs', 'unions' or 'rows'.");
    // For tests of the neighbourhood search around the peak (docs/strategies.md §5); not public API.
    m.def(
        "_neighbourhoods",
        [](const U64Array& lower, const U64Array& upper, const U64Array& size, uint64_t budget) {
            const Buffers b = rows_as_buffers(lower, upper, size);
            Placement p;
            uint64_t start_end = 0, work = 0;
            std::vector<exact::NeighbourhoodTried> tried;
            {
                py::gil_scoped_release release;
                p = place_greedy(b, order_by_size(b), Fit::First);
                start_end = p.end;
                const exact::CanonicalInstance instance(b);
                exact::run_with_stack_for(instance.active.size(), [&] {
                    exact::improve_peak(instance, p, peak_live_bytes(b), budget, work, &tried);
                });
            }
            py::list attempts;
            for (const auto& t : tried) attempts.append(py::make_tuple(t.freed, t.share, t.spent, t.found));
            py::dict out;
            out["start_end"] = start_end;
            out["offsets"] = to_numpy(p.offset);
            out["end"] = p.end;
            out["work"] = work;
            out["attempts"] = attempts;
            return out;
        },
        py::arg("lower"), py::arg("upper"), py::arg("size"), py::arg("budget"),
        "improve_peak on rows (alignment 1) from first fit by size, with `budget` work units: the placement, "
        "the work charged and every neighbourhood searched, in turn, as (buffers freed, share, work done, "
        "found).");
}
