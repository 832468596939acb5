// The ggml-style graph allocator (src/emel/memory/ggml/graph_allocator.hpp) for
// emel.memory.ggml: _core.GgmlGraph (a ggml graph as plain rows) and
// _core.GgmlGraphAllocator, and _core.ggml_alloc_ctx_tensors over a GgmlGraph.
// Conversions only.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <tuple>
#include <vector>

#include "bindings.hpp"
#include "emel/memory/ggml/ggml_alloc.hpp"
#include "emel/memory/ggml/graph_allocator.hpp"

namespace py = pybind11;
using namespace emel::memory;

namespace {

using AddressTuple = std::tuple<int32_t, int32_t, uint64_t>;
using StampTuple = std::tuple<uint64_t, uint64_t, uint64_t>;  // Address: owner, plan, reserved

// Addresses with their stamps (an empty `stamps` = none stamped).
std::vector<ggml::Address> to_addresses(const std::vector<AddressTuple>& bound,
                                        const std::vector<StampTuple>& stamps) {
    if (!stamps.empty() && stamps.size() != bound.size())
        throw py::value_error("one stamp per address expected");
    std::vector<ggml::Address> addr;
    addr.reserve(bound.size());
    for (size_t i = 0; i < bound.size(); ++i) {
        const auto& [b, c, o] = bound[i];
        ggml::Address a{b, c, o};
        if (!stamps.empty()) std::tie(a.owner, a.plan, a.reserved) = stamps[i];
        addr.push_back(a);
    }
    return addr;
}

// tensor row: (name, size, layout, view_src, view_offs, flags, op_none, op_inplace, srcs)
ggml::Graph graph_from_rows(const py::list& tensors, std::vector<int32_t> nodes,
                            std::vector<int32_t> leafs) {
    ggml::Graph g;
    g.tensors.reserve(tensors.size());
    for (auto item : tensors) {
        auto r = item.cast<py::tuple>();
        ggml::Tensor t;
        t.name = r[0].cast<std::string>();
        t.size = r[1].cast<uint64_t>();
        t.layout = r[2].cast<uint64_t>();
        t.view_src = r[3].cast<int32_t>();
        t.view_offs = r[4].cast<uint64_t>();
        t.flags = r[5].cast<uint8_t>();
        t.op_none = r[6].cast<bool>();
        t.op_inplace = r[7].cast<bool>();
        auto srcs = r[8].cast<std::vector<int32_t>>();
        if (srcs.size() > ggml::kMaxSrc) throw py::value_error("at most 10 sources per tensor");
        std::copy(srcs.begin(), srcs.end(), t.src);
        g.tensors.push_back(std::move(t));
    }
    g.nodes = std::move(nodes);
    g.leafs = std::move(leafs);
    ggml::check_graph(g);
    return g;
}

// A GraphAllocator with its own mutex. locked(f) runs f with the GIL
// released and the mutex held, and returns f's result by value (a copy taken
// under the lock, converted to Python after it is let go).
struct SharedGraphAllocator {
    explicit SharedGraphAllocator(ggml::GraphAllocator a) : alloc(std::move(a)) {}
    template <class F>
    auto locked(F&& f) {
        py::gil_scoped_release release;
        std::lock_guard<std::mutex> lock(mutex);
        using R = std::decay_t<decltype(f(alloc))>;
        return R(f(alloc));
    }
    std::mutex mutex;
    ggml::GraphAllocator alloc;
};

std::vector<AddressTuple> to_tuples(const std::vector<ggml::Address>& v) {
    std::vector<AddressTuple> out;
    out.reserve(v.size());
    for (const auto& a : v) out.emplace_back(a.buffer_id, a.chunk, a.offset);
    return out;
}

}  // namespace

void bind_ggml(py::module_& m) {
    py::class_<ggml::TensorAllocator>(m, "GgmlTensorAllocator")
        .def(py::init<uint64_t, uint64_t>(), py::arg("buffer_size"), py::arg("alignment"))
        .def("alloc", &ggml::TensorAllocator::alloc, py::arg("size"), py::arg("name") = "")
        .def_property_readonly("offset", &ggml::TensorAllocator::offset);

    py::class_<ggml::Graph>(m, "GgmlGraph")
        .def(py::init(&graph_from_rows), py::arg("tensors"), py::arg("nodes"), py::arg("leafs"))
        .def_property_readonly("num_tensors", [](const ggml::Graph& g) { return g.tensors.size(); });

    m.def(
        "ggml_alloc_ctx_tensors",
        [](ggml::Graph& g, const std::vector<int32_t>& tensors, uint64_t alignment, uint64_t max_size,
           const std::vector<AddressTuple>& bound) {
            if (bound.size() != g.tensors.size())
                throw py::value_error("alloc_ctx_tensors: one address per tensor expected");
            std::vector<ggml::Address> addr;
            addr.reserve(bound.size());
            for (const auto& [b, c, o] : bound) addr.push_back({b, c, o});
            const auto r = ggml::alloc_ctx_tensors(g, tensors, ggml::BufferType{alignment, max_size}, addr);
            std::vector<uint8_t> flags;
            flags.reserve(g.tensors.size());
            for (const auto& t : g.tensors) flags.push_back(t.flags);
            return py::make_tuple(r.buffer_sizes, to_tuples(addr), flags);
        },
        py::arg("graph"), py::arg("tensors"), py::arg("alignment"), py::arg("max_size"), py::arg("bound"),
        "ggml_backend_alloc_ctx_tensors_from_buft over tensors of a GgmlGraph: "
        "(buffer sizes, addresses per tensor, flags per tensor).");

    // Every method locks the allocator's mutex with the GIL released (planning
    // runs without it), and getters copy under the lock: two threads sharing
    // one allocator never see a plan half replaced.
    py::class_<SharedGraphAllocator>(m, "GgmlGraphAllocator")
        .def(py::init([](const std::vector<std::pair<uint64_t, uint64_t>>& types,
                         std::vector<int32_t> type_of, const std::string& strategy,
                         uint64_t time_budget_ms) {
                 std::optional<Strategy> s;
                 if (!ggml::strategy_from_name(strategy, s))
                     throw py::value_error("unknown strategy '" + strategy + "'");
                 std::vector<ggml::BufferType> bts;
                 for (const auto& [alignment, max_size] : types) bts.push_back({alignment, max_size});
                 // plan()'s clamp of the budget, then its fixed work units per ms
                 const uint64_t budget = std::min<uint64_t>(time_budget_ms, uint64_t{1} << 40) * kWorkUnitsPerMs;
                 return std::make_unique<SharedGraphAllocator>(
                     ggml::GraphAllocator(std::move(bts), std::move(type_of), s, budget));
             }),
             py::arg("types"), py::arg("type_of"), py::arg("strategy"), py::arg("time_budget_ms"))
        // `bound`: where each tensor of the graph is bound already (a bound
        // tensor counts as pre-allocated, as in ggml).
        .def("reserve_n",
             [](SharedGraphAllocator& a, const ggml::Graph& g, const std::vector<int32_t>& nodes,
                const std::vector<int32_t>& leafs, const std::vector<AddressTuple>& bound) {
                 const auto addr = to_addresses(bound, {});
                 return a.locked([&](ggml::GraphAllocator& x) { return x.reserve_n(g, nodes, leafs, &addr); });
             },
             py::arg("graph"), py::arg("node_buffer_ids"), py::arg("leaf_buffer_ids"), py::arg("bound"))
        .def("reserve_n_size",
             [](SharedGraphAllocator& a, const ggml::Graph& g, const std::vector<int32_t>& nodes,
                const std::vector<int32_t>& leafs, const std::vector<AddressTuple>& bound) {
                 const auto addr = to_addresses(bound, {});
                 return a.locked(
                     [&](ggml::GraphAllocator& x) { return x.reserve_n_size(g, nodes, leafs, &addr); });
             },
             py::arg("graph"), py::arg("node_buffer_ids"), py::arg("leaf_buffer_ids"), py::arg("bound"))
        .def("needs_realloc",
             [](SharedGraphAllocator& a, const ggml::Graph& g, const std::vector<AddressTuple>& bound) {
                 const auto addr = to_addresses(bound, {});
                 return a.locked([&](ggml::GraphAllocator& x) { return x.needs_realloc(g, &addr); });
             },
             py::arg("graph"), py::arg("bound"))
        .def(
            "alloc_graph",
            [](SharedGraphAllocator& a, const ggml::Graph& g, const std::vector<AddressTuple>& bound,
               const std::vector<StampTuple>& stamps) {
                if (bound.size() != g.tensors.size())
                    throw py::value_error("alloc_graph: one address per tensor expected");
                std::vector<ggml::Address> addr = to_addresses(bound, stamps);
                const bool ok = a.locked([&](ggml::GraphAllocator& x) { return x.alloc_graph(g, addr); });
                std::vector<StampTuple> out;
                out.reserve(addr.size());
                for (const auto& x : addr) out.emplace_back(x.owner, x.plan, x.reserved);
                return py::make_tuple(ok, to_tuples(addr), out);
            },
            py::arg("graph"), py::arg("bound"), py::arg("stamps"),
            "(allocated, addresses, stamps): addresses per tensor, (-1, -1, 0) when unbound; "
            "stamps (owner, plan, reserved bytes) per tensor, owner 0 when not this allocator's.")
        .def("buffer_size",
             [](SharedGraphAllocator& a, int32_t id) {
                 return a.locked([&](ggml::GraphAllocator& x) { return x.buffer_size(id); });
             },
             py::arg("buffer_id"))
        .def("chunk_sizes",
             [](SharedGraphAllocator& a, int32_t id) {
                 return a.locked([&](ggml::GraphAllocator& x) { return x.chunk_sizes(id); });
             },
             py::arg("buffer_id"))
        .def_property_readonly("addresses",
                               [](SharedGraphAllocator& a) {
                                   return to_tuples(a.locked([](ggml::GraphAllocator& x) { return x.addresses(); }));
                               })
        .def_property_readonly("inplace_of",
                               [](SharedGraphAllocator& a) {
                                   return a.locked([](ggml::GraphAllocator& x) { return x.inplace_of(); });
                               })
        .def_property_readonly("has_plan", [](SharedGraphAllocator& a) {
            return a.locked([](ggml::GraphAllocator& x) { return x.has_plan(); });
        });
}
