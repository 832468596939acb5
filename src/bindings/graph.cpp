// _core.GraphInput (the builder Python fills from a document or arrays) and
// _core.validate(graph): docs/algorithm.md §1 without planning.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>

#include "bindings.hpp"
#include "emel/memory/core/graph.hpp"

namespace py = pybind11;
using namespace emel::memory;

void bind_graph(py::module_& m) {
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

}
