// Each area of the core binds itself in its own file under src/bindings/;
// module.cpp calls these in order. Keeps the bindings thin and separable.
#pragma once

#include <pybind11/pybind11.h>

void bind_graph(pybind11::module_& m);       // graph.cpp: GraphInput, validate
void bind_plan(pybind11::module_& m);        // plan.cpp: plan() through pipeline/, CorePlan
void bind_place(pybind11::module_& m);       // place.cpp: place() on bare rows
void bind_test_hooks(pybind11::module_& m);  // test_hooks.cpp: '_'-named hooks for tests only
void bind_sha256(pybind11::module_& m);
void bind_ggml(pybind11::module_& m);
void bind_arenas(pybind11::module_& m);   // arenas.cpp: the arena engine
void bind_pooling(pybind11::module_& m);  // pooling.cpp: the pooling allocator
void bind_determinism(pybind11::module_& m);
