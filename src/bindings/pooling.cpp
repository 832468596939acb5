// _core.PoolingAllocator and _core.replay_pool_trace: the pooling allocator
// (src/emel/memory/runtime/pooling_allocator.hpp). Addresses cross as integers.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "emel/memory/runtime/pooling_allocator.hpp"

namespace py = pybind11;
using namespace emel::memory;

namespace {

PoolPolicy parse_policy(const std::string& p) {
    if (p == "exact") return PoolPolicy::ExactSize;
    if (p == "best_fit") return PoolPolicy::SmallestBlock;
    throw py::value_error("policy must be 'exact' or 'best_fit', got '" + p + "'");
}

py::dict stats_dict(const PoolStats& s) {
    py::dict d;
    d["allocated"] = s.allocated;
    d["reused"] = s.reused;
    d["pooled"] = s.pooled;
    d["released"] = s.released;
    d["bytes_in_use"] = s.bytes_in_use;
    d["bytes_pooled"] = s.bytes_pooled;
    d["peak_bytes"] = s.peak_bytes;
    d["requests"] = s.requests;
    return d;
}

}  // namespace

void bind_pooling(py::module_& m) {
    py::class_<PoolingAllocator>(m, "PoolingAllocator")
        .def(py::init([](const std::string& policy, uint64_t max_per_size, uint64_t alignment) {
                 return std::make_unique<PoolingAllocator>(parse_policy(policy), max_per_size, alignment);
             }),
             py::arg("policy"), py::arg("max_per_size"), py::arg("alignment"))
        .def("allocate",
             [](PoolingAllocator& p, uint64_t size) { return reinterpret_cast<uintptr_t>(p.allocate(size)); })
        .def("free", [](PoolingAllocator& p, uintptr_t address) {
            return p.free(reinterpret_cast<void*>(address));
        })
        .def("trim", &PoolingAllocator::trim)
        .def_property_readonly("host_bytes", &PoolingAllocator::host_bytes)
        .def_property_readonly("stats", [](const PoolingAllocator& p) { return stats_dict(p.stats()); });

    m.def(
        "replay_pool_trace",
        [](const std::string& policy, uint64_t max_per_size, uint64_t alignment,
           const std::vector<uint64_t>& size, const std::vector<uint8_t>& is_alloc,
           const std::vector<uint32_t>& id) {
            const PoolPolicy pp = parse_policy(policy);
            PoolStats s;
            {
                py::gil_scoped_release release;
                s = replay_trace(pp, max_per_size, alignment, size, is_alloc, id);
            }
            return stats_dict(s);
        },
        py::arg("policy"), py::arg("max_per_size"), py::arg("alignment"), py::arg("size"),
        py::arg("is_alloc"), py::arg("id"), "Replay an allocate/free trace; returns the statistics.");
}
