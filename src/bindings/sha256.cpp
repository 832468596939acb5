// _core.sha256(data: bytes) -> bytes: the core's own SHA-256, exposed so the
// tests can hold it to the FIPS 180-4 vectors and to hashlib.
#include <pybind11/pybind11.h>

#include <string>

#include "bindings.hpp"
#include "emel/memory/sha256.hpp"

namespace py = pybind11;

void bind_sha256(py::module_& m) {
    m.def(
        "sha256",
        [](py::bytes data) {
            std::string s = data;
            emel::memory::Digest d = emel::memory::sha256(s.data(), s.size());
            return py::bytes(reinterpret_cast<const char*>(d.data()), d.size());
        },
        py::arg("data"), "SHA-256 digest (32 bytes) computed by the C++ core.");
}
