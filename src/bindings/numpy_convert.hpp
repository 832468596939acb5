// Conversions between NumPy arrays and the core's vectors, shared by the
// binding files.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <string>
#include <vector>

#include "emel/memory/core/graph.hpp"  // kNone

namespace emel_bindings {

namespace py = pybind11;

// A C-contiguous array of T, converting whatever the caller passed.
template <typename T>
using Array = py::array_t<T, py::array::c_style | py::array::forcecast>;

template <typename T>
py::array_t<T> to_numpy(const std::vector<T>& v) {
    py::array_t<T> a(static_cast<py::ssize_t>(v.size()));
    std::copy(v.begin(), v.end(), a.mutable_data());
    return a;
}

// The vector itself becomes the array's memory (freed with the array): no
// copy of a million offsets into freshly faulted pages.
template <typename T>
py::array_t<T> to_numpy(std::vector<T>&& v) {
    auto* owned = new std::vector<T>(std::move(v));
    py::capsule free_it(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
    return py::array_t<T>(static_cast<py::ssize_t>(owned->size()), owned->data(), free_it);
}

// kNone -> -1, so "none" is visible as a negative index in Python.
inline py::array_t<int64_t> to_numpy_index(const std::vector<uint32_t>& v) {
    py::array_t<int64_t> a(static_cast<py::ssize_t>(v.size()));
    int64_t* out = a.mutable_data();
    for (size_t i = 0; i < v.size(); ++i) out[i] = v[i] == emel::memory::kNone ? -1 : int64_t{v[i]};
    return a;
}

template <typename T>
std::vector<T> from_numpy(const Array<T>& a,
                          size_t expected, const char* what) {
    if (a.ndim() != 1 || static_cast<size_t>(a.shape(0)) != expected)
        throw py::value_error(std::string(what) + ": expected a 1-D array of length " +
                              std::to_string(expected));
    return std::vector<T>(a.data(), a.data() + expected);
}

}  // namespace emel_bindings
