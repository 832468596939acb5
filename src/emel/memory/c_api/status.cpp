// The C API's shared part (status.hpp): the thread's last error, the status
// mapping, the argument / handle checks every area uses; and the errors
// entry points (emel_status_name, emel_last_error_*).
#include "emel/memory/c_api/status.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "emel/memory/core/checked_math.hpp"
#include "emel/memory/core/errors.hpp"
#include "emel/memory/core/graph.hpp"
#include "emel/memory/core/plan.hpp"
#include "emel/memory/core/strategy.hpp"

using namespace emel::memory;
using namespace emel::memory::c_api;

namespace {

// Python's plan()/place() clamp the budget to 2^40 ms before the core sees it.
constexpr uint64_t kMaxBudgetMs = uint64_t{1} << 40;

struct LastError {
    emel_status status = EMEL_OK;
    bool lost = false;  // recording the details itself ran out of memory
    std::string message, tensor, node, arena;
};
thread_local LastError t_last;

}  // namespace

namespace emel::memory::c_api {

const char* status_name(int s) noexcept {
    switch (s) {
        case EMEL_OK: return "OK";
        case EMEL_INVALID_IR_SHAPES: return "INVALID_IR_SHAPES";
        case EMEL_LIVENESS_CYCLE: return "LIVENESS_CYCLE";
        case EMEL_ALLOCATION_OVERFLOW: return "ALLOCATION_OVERFLOW";
        case EMEL_ARENA_TOO_SMALL: return "ARENA_TOO_SMALL";
        case EMEL_ALIGNMENT_VIOLATION: return "ALIGNMENT_VIOLATION";
        case EMEL_ADDRESS_COLLISION: return "ADDRESS_COLLISION";
        case EMEL_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
        case EMEL_OUT_OF_MEMORY: return "OUT_OF_MEMORY";
        case EMEL_INTERNAL: return "INTERNAL";
        default: return "UNKNOWN";
    }
}

emel_status to_status(ErrorCode c) noexcept {
    switch (c) {
        case ErrorCode::InvalidIrShapes: return EMEL_INVALID_IR_SHAPES;
        case ErrorCode::LivenessCycle: return EMEL_LIVENESS_CYCLE;
        case ErrorCode::AllocationOverflow: return EMEL_ALLOCATION_OVERFLOW;
        case ErrorCode::ArenaTooSmall: return EMEL_ARENA_TOO_SMALL;
        case ErrorCode::AlignmentViolation: return EMEL_ALIGNMENT_VIOLATION;
        case ErrorCode::AddressCollision: return EMEL_ADDRESS_COLLISION;
    }
    return EMEL_INTERNAL;
}

emel_status record(emel_status status, const std::string& text, const std::string& tensor,
                   const std::string& node, const std::string& arena) noexcept {
    LastError& e = t_last;
    e.status = status;
    try {
        e.lost = false;
        e.message = std::string("[") + status_name(status) + "] " + text;
        e.tensor = tensor;
        e.node = node;
        e.arena = arena;
    } catch (...) {
        e.lost = true;
        e.message.clear();
        e.tensor.clear();
        e.node.clear();
        e.arena.clear();
    }
    return status;
}

emel_status record(emel_status status, const char* text) noexcept {
    LastError& e = t_last;
    e.status = status;
    e.tensor.clear();
    e.node.clear();
    e.arena.clear();
    try {
        e.lost = false;
        e.message = std::string("[") + status_name(status) + "] " + text;
    } catch (...) {
        e.lost = true;
        e.message.clear();
    }
    return status;
}

[[noreturn]] void bad_arg(const char* fn, const std::string& what, std::string tensor,
                          std::string node, std::string arena) {
    throw ApiError{EMEL_INVALID_ARGUMENT, std::string(fn) + ": " + what, std::move(tensor),
                   std::move(node), std::move(arena)};
}

std::string q(const std::string& s) { return "'" + s + "'"; }

void check_graph(const emel_graph* g, const char* fn) {
    need(g, fn, "graph");
    if (g->broken)
        throw ApiError{EMEL_INTERNAL,
                       std::string(fn) +
                           ": the graph was left incomplete by an earlier failed call (out of "
                           "memory); destroy it",
                       {}, {}, {}};
}

// The GraphInput to validate: the builder's, with must_not_alias merged in
// (a copy only when some tensor has must_not_alias partners).
const GraphInput& input_of(const emel_graph& g, GraphInput& scratch) {
    if (g.no_alias.empty()) return g.in;
    scratch = g.in;
    scratch.must_not_alias.clear();
    scratch.must_not_alias_start.assign(1, 0);
    for (size_t t = 0; t < scratch.num_tensors(); ++t) {
        if (t < g.no_alias.size())
            scratch.must_not_alias.insert(scratch.must_not_alias.end(), g.no_alias[t].begin(),
                                          g.no_alias[t].end());
        scratch.must_not_alias_start.push_back(scratch.must_not_alias.size());
    }
    return scratch;
}

uint64_t budget_units(uint64_t time_budget_ms) {
    return std::min(time_budget_ms, kMaxBudgetMs) * kWorkUnitsPerMs;
}

void check_strategy_fit(int strategy, int fit, const char* fn) {
    if (strategy < 0 || static_cast<size_t>(strategy) >= kNumStrategies)
        bad_arg(fn, "unknown strategy " + std::to_string(strategy));
    if (fit < 0 || static_cast<size_t>(fit) >= kNumFits)
        bad_arg(fn, "fit must be EMEL_FIT_BEST or EMEL_FIT_FIRST, got " + std::to_string(fit));
}

const emel_plan& check_plan(const emel_plan* p, const char* fn) {
    need(p, fn, "plan");
    return *p;
}

}  // namespace emel::memory::c_api

extern "C" {

// ---------------------------------------------------------------- errors

EMEL_API const char* emel_status_name(emel_status status) { return status_name(enum_arg(status)); }

EMEL_API emel_status emel_last_error_status(void) { return t_last.status; }

EMEL_API const char* emel_last_error_message(void) {
    const LastError& e = t_last;
    if (e.lost) return e.status == EMEL_OUT_OF_MEMORY
                           ? "[OUT_OF_MEMORY] out of memory"
                           : "(out of memory while recording the error's details)";
    return e.message.c_str();
}

EMEL_API const char* emel_last_error_tensor(void) { return t_last.tensor.c_str(); }
EMEL_API const char* emel_last_error_node(void) { return t_last.node.c_str(); }
EMEL_API const char* emel_last_error_arena(void) { return t_last.arena.c_str(); }

}  // extern "C"
