// The C API's shared part, used by every area (graph.cpp, plan.cpp,
// determinism.cpp, placement.cpp, ggml.cpp): the handles the areas share, the
// status of a failure (ApiError, PlanError's codes -> emel_status, the
// thread's last error), guarded() that runs each entry point so that nothing
// thrown leaves it, and the argument / handle checks. Internal to the
// emel_memory_c library (hidden visibility; only emel_* is exported).
#pragma once

#define EMEL_MEMORY_C_BUILD
#include "emel/memory.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "emel/memory/core/errors.hpp"
#include "emel/memory/core/graph.hpp"
#include "emel/memory/core/plan.hpp"

struct emel_graph {
    emel::memory::GraphInput in;
    bool read_only = false;  // made by emel_graph_from_arrays
    bool broken = false;     // a mutation failed half-way (out of memory)
    std::unordered_map<std::string, uint32_t> tensor_pos;  // first tensor with the id
    std::unordered_map<std::string, uint32_t> node_pos;
    // must_not_alias per tensor, kept aside (GraphInput holds it as CSR in
    // tensor order) and merged in when planned; empty until first used.
    std::vector<std::vector<std::string>> no_alias;
};

struct emel_plan {
    std::shared_ptr<const emel::memory::Graph> graph;  // owned: index below views its ids
    emel::memory::Plan plan;
    std::unordered_map<std::string_view, uint32_t> index;
};

// The C enums' codes are the core tables' codes (core/tables.hpp): the header
// appends in table order, and these checks fail the build where they drift.
static_assert(EMEL_STRATEGY_TMMU == static_cast<int>(emel::memory::Strategy::Tmmu) &&
                  EMEL_STRATEGY_GREEDY_BY_SIZE == static_cast<int>(emel::memory::Strategy::GreedyBySize) &&
                  EMEL_STRATEGY_BEST_FIT == static_cast<int>(emel::memory::Strategy::BestFit) &&
                  EMEL_STRATEGY_AUTO == static_cast<int>(emel::memory::Strategy::Auto) &&
                  EMEL_STRATEGY_OPTIMAL + 1 == emel::memory::kNumStrategies,
              "emel_strategy and kStrategies differ");
static_assert(EMEL_FIT_BEST == static_cast<int>(emel::memory::Fit::Best) &&
                  EMEL_FIT_FIRST + 1 == emel::memory::kNumFits,
              "emel_fit and kFits differ");
static_assert(EMEL_MODE_INFERENCE == static_cast<int>(emel::memory::Mode::Inference) &&
                  EMEL_MODE_FORWARD == static_cast<int>(emel::memory::Mode::Forward) &&
                  EMEL_MODE_BACKWARD + 1 == emel::memory::kNumModes,
              "emel_mode and kModes differ");
static_assert(EMEL_ROLE_OUTPUT + 1 == emel::memory::kNumRoles && EMEL_NUM_ROLES == emel::memory::kNumRoles &&
                  EMEL_ROLE_GRADIENT == static_cast<int>(emel::memory::Role::Gradient) &&
                  EMEL_ROLE_OPTIMIZER_STATE == static_cast<int>(emel::memory::Role::OptimizerState),
              "emel_role and kRoles differ");

namespace emel::memory::c_api {

// A failure found by the C API (not by the core): a status plus details.
struct ApiError {
    emel_status status;
    std::string message;
    std::string tensor;
    std::string node;
    std::string arena;
};

// status.cpp
const char* status_name(int s) noexcept;
emel_status to_status(ErrorCode c) noexcept;
// Records the thread's last error (emel_last_error_*) and returns `status`.
emel_status record(emel_status status, const std::string& text, const std::string& tensor,
                   const std::string& node, const std::string& arena) noexcept;
emel_status record(emel_status status, const char* text) noexcept;

// Runs one entry point: nothing thrown inside leaves it.
template <typename F>
emel_status guarded(F&& body) noexcept {
    try {
        body();
        return EMEL_OK;
    } catch (const ApiError& e) {
        return record(e.status, e.message, e.tensor, e.node, e.arena);
    } catch (const PlanError& e) {
        return record(to_status(e.code), e.message, e.tensor, e.node, e.arena);
    } catch (const std::bad_alloc&) {
        return record(EMEL_OUT_OF_MEMORY, "out of memory");
    } catch (const std::length_error& e) {
        return record(EMEL_OUT_OF_MEMORY, e.what());
    } catch (const std::exception& e) {
        return record(EMEL_INTERNAL, e.what());
    } catch (...) {
        return record(EMEL_INTERNAL, "unknown exception");
    }
}

[[noreturn]] void bad_arg(const char* fn, const std::string& what, std::string tensor = {},
                          std::string node = {}, std::string arena = {});

template <typename T>
void need(const T* p, const char* fn, const char* name) {
    if (p == nullptr) bad_arg(fn, std::string(name) + " is NULL");
}

std::string q(const std::string& s);

// The integer a caller passed for a C enum argument or field, read as bytes:
// loading a value outside the enum's range as the enum type is undefined
// behaviour (UBSan's -fsanitize=enum), so every check runs on this integer and
// only a checked value is converted.
template <typename E>
int enum_arg(const E& e) {
    static_assert(std::is_enum_v<E> && sizeof(E) == sizeof(int), "a C enum is an int");
    int v;
    std::memcpy(&v, &e, sizeof v);
    return v;
}

// Handle checks and conversions used by more than one area (status.cpp).
void check_graph(const emel_graph* g, const char* fn);
const GraphInput& input_of(const emel_graph& g, GraphInput& scratch);
uint64_t budget_units(uint64_t time_budget_ms);
// Range checks of a caller's enum codes against the core tables.
void check_strategy_fit(int strategy, int fit, const char* fn);
inline bool is_mode_code(int m) { return m >= 0 && static_cast<size_t>(m) < kNumModes; }
inline bool is_role_code(int r) { return r >= 0 && static_cast<size_t>(r) < kNumRoles; }
const emel_plan& check_plan(const emel_plan* p, const char* fn);

}  // namespace emel::memory::c_api
