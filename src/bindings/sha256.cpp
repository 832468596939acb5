// _core.sha256(data, implementation="auto") -> bytes: the core's own SHA-256,
// exposed so the tests can hold every compression path (portable, SHA-NI) to
// the FIPS 180-4 vectors and to hashlib. `data` is bytes, or a list of bytes
// fed to update() one chunk at a time.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "bindings.hpp"
#include "emel/memory/determinism/sha256.hpp"

namespace py = pybind11;
namespace mem = emel::memory;

namespace {

py::bytes digest_bytes(const mem::Digest& d) {
    return py::bytes(reinterpret_cast<const char*>(d.data()), d.size());
}

}  // namespace

void bind_sha256(py::module_& m) {
    m.def(
        "sha256",
        [](py::bytes data, const std::string& implementation) {
            mem::Sha256 h(mem::parse_sha256_implementation(implementation));
            std::string s = data;
            h.update(s.data(), s.size());
            return digest_bytes(h.finish());
        },
        py::arg("data"), py::arg("implementation") = "auto",
        "SHA-256 digest (32 bytes) computed by the C++ core. implementation: 'auto', "
        "'portable' or 'shani' (ValueError when SHA-NI is unavailable).");
    m.def(
        "sha256",
        [](const std::vector<py::bytes>& chunks, const std::string& implementation) {
            mem::Sha256 h(mem::parse_sha256_implementation(implementation));
            for (const py::bytes& chunk : chunks) {
                std::string s = chunk;
                h.update(s.data(), s.size());
            }
            return digest_bytes(h.finish());
        },
        py::arg("data"), py::arg("implementation") = "auto",
        "SHA-256 of the concatenated chunks, each passed to one update() call.");
    m.def(
        "sha256_implementation",
        [] { return std::string(mem::sha256_implementation_name(mem::sha256_auto_implementation())); },
        "The SHA-256 implementation 'auto' uses on this machine: 'shani' or 'portable'.");
}
