// The determinism contract's entry points (docs/determinism.md):
// _core.cbor_dumps(value) -> bytes, the core's canonical CBOR writer, exposed
// so the tests can hold it to RFC 8949's examples and to cbor2 (converts
// Python values to cbor::Value and nothing more); _core.ir_hash(graph) -> hex,
// the IR hash of a validated graph without planning it.
#include <pybind11/pybind11.h>

#include <string>

#include "bindings.hpp"
#include "emel/memory/core/graph.hpp"
#include "emel/memory/determinism/plan_hash.hpp"
#include "emel/memory/core/plan.hpp"
#include "emel/memory/determinism/cbor.hpp"

namespace py = pybind11;
using emel::memory::cbor::Value;

namespace {

Value to_value(const py::handle& obj, int depth) {
    if (depth > 512) throw py::value_error("nesting deeper than 512");
    if (obj.is_none()) return Value::null();
    if (py::isinstance<py::bool_>(obj)) return Value::boolean(obj.cast<bool>());
    if (py::isinstance<py::int_>(obj)) {
        const py::int_ i = py::reinterpret_borrow<py::int_>(obj);
        const py::int_ zero(0), limit(py::int_(1).attr("__lshift__")(64));
        Value v;
        if (i >= zero) {
            if (i >= limit) throw py::value_error("integer does not fit in 64 bits");
            v.kind = Value::Kind::Unsigned;
            v.n = i.cast<uint64_t>();
        } else {
            const py::int_ m = py::reinterpret_steal<py::int_>(PyNumber_Subtract(py::int_(-1).ptr(), i.ptr()));
            if (m >= limit) throw py::value_error("integer does not fit in 64 bits");
            v.kind = Value::Kind::Negative;
            v.n = m.cast<uint64_t>();
        }
        return v;
    }
    if (py::isinstance<py::float_>(obj)) {
        Value v;
        v.kind = Value::Kind::Float;
        v.f = obj.cast<double>();
        return v;
    }
    if (py::isinstance<py::bytes>(obj)) return Value::bytes(obj.cast<std::string>());
    if (py::isinstance<py::str>(obj)) {
        // A lone surrogate has no UTF-8: a ValueError, as cbor.dumps' CBORError
        // (pybind11's own cast would make it a RuntimeError).
        Py_ssize_t n = 0;
        const char* utf8 = PyUnicode_AsUTF8AndSize(obj.ptr(), &n);
        if (utf8 == nullptr) {
            PyErr_Clear();
            throw py::value_error("text is not valid Unicode (a lone surrogate)");
        }
        return Value::text(std::string(utf8, static_cast<size_t>(n)));
    }
    if (py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj)) {
        Value v = Value::array();
        for (auto item : obj) v.push(to_value(item, depth + 1));
        return v;
    }
    if (py::isinstance<py::dict>(obj)) {
        Value v = Value::map();
        for (auto item : py::reinterpret_borrow<py::dict>(obj))
            v.set(to_value(item.first, depth + 1), to_value(item.second, depth + 1));
        return v;
    }
    throw py::type_error("cannot encode a " + std::string(py::str(py::type::handle_of(obj).attr("__name__"))) +
                         " as CBOR");
}

}  // namespace

void bind_determinism(py::module_& m) {
    m.def(
        "cbor_dumps",
        [](const py::object& value) {
            const auto out = emel::memory::cbor::encode(to_value(value, 0));
            return py::bytes(reinterpret_cast<const char*>(out.data()), out.size());
        },
        py::arg("value"), "Canonical CBOR (RFC 8949 §4.2.1) written by the C++ core.");
    m.def(
        "ir_hash",
        [](const emel::memory::GraphInput& in) {
            py::gil_scoped_release release;
            return emel::memory::to_hex(emel::memory::ir_hash(in, emel::memory::build_graph(in)));
        },
        py::arg("graph"), "Validate a graph and return its ir_hash (hex).");
}
