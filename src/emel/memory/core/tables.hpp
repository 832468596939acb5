// The vocabulary of the options and the graph, one table per enum: each
// value's name (what Python, the CLI, documents and the plan hash spell), its
// code (the enum's value, which is also the C API's code: include/emel/memory.h
// appends in the same order) and, for strategies, what else the rest of the
// code must know about it. Everything that spells a strategy, mode, fit or
// role reads these tables: the core, the bindings (which export them to Python
// as _core.STRATEGY_TABLE, MODES, FITS, ROLES), the ggml allocator and the C
// API (its range checks and messages). Adding a strategy: docs/architecture.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace emel::memory {

// docs/strategies.md. Append only: the value is the C API's emel_strategy.
enum class Strategy : uint8_t { Tmmu, GreedyBySize, BestFit, Auto, Optimal };
// greedy_by_size's gap choice: Best takes the smallest gap a buffer fits in,
// First the lowest. Not the best_fit strategy (the online allocator,
// placement/online_best_fit.cpp) nor the pooling allocator's "best_fit" policy.
enum class Fit : uint8_t { Best, First };
// docs/algorithm.md §2.
enum class Mode : uint8_t { Inference, Forward, Backward };
// The order of emel.memory.graph.ROLES and of the C API's emel_role.
enum class Role : uint8_t { Input, Parameter, Activation, Gradient, OptimizerState, Output };

struct StrategyInfo {
    Strategy value;
    const char* name;
    // The pure-Python reference (python/emel/memory/reference.py) implements
    // it bit for bit, so the E0 tests and the fuzzer compare with it.
    bool has_reference;
    // Searches under the work budget and reports work units, optimality and a
    // proven bound per arena (auto, optimal).
    bool searches;
};

// In enum order (kStrategies[k].value == Strategy(k), checked below).
inline constexpr StrategyInfo kStrategies[] = {
    {Strategy::Tmmu, "tmmu", true, false},
    {Strategy::GreedyBySize, "greedy_by_size", true, false},
    {Strategy::BestFit, "best_fit", true, false},
    {Strategy::Auto, "auto", false, true},
    {Strategy::Optimal, "optimal", false, true},
};

struct FitInfo {
    Fit value;
    const char* name;
};
inline constexpr FitInfo kFits[] = {{Fit::Best, "best"}, {Fit::First, "first"}};

struct ModeInfo {
    Mode value;
    const char* name;
};
inline constexpr ModeInfo kModes[] = {
    {Mode::Inference, "inference"}, {Mode::Forward, "forward"}, {Mode::Backward, "backward"}};

struct RoleInfo {
    Role value;
    const char* name;
    const char* default_arena;  // where its tensors go unless the graph or role_arenas says
    bool persistent;            // lives for the whole program
    bool never_inplace_victim;  // never gives its memory to an in-place output (§4)
};
inline constexpr RoleInfo kRoles[] = {
    {Role::Input, "input", "activations", false, true},
    {Role::Parameter, "parameter", "parameters", true, true},
    {Role::Activation, "activation", "activations", false, false},
    {Role::Gradient, "gradient", "gradients", false, false},
    {Role::OptimizerState, "optimizer_state", "parameters", true, true},
    {Role::Output, "output", "activations", false, true},
};

inline constexpr size_t kNumStrategies = std::size(kStrategies);
inline constexpr size_t kNumFits = std::size(kFits);
inline constexpr size_t kNumModes = std::size(kModes);
inline constexpr size_t kNumRoles = std::size(kRoles);

namespace tables_detail {
template <typename Table>
constexpr bool in_enum_order(const Table& table) {
    for (size_t k = 0; k < std::size(table); ++k)
        if (static_cast<size_t>(table[k].value) != k) return false;
    return true;
}
}  // namespace tables_detail
static_assert(tables_detail::in_enum_order(kStrategies), "kStrategies: one row per enum value, in order");
static_assert(tables_detail::in_enum_order(kFits), "kFits: one row per enum value, in order");
static_assert(tables_detail::in_enum_order(kModes), "kModes: one row per enum value, in order");
static_assert(tables_detail::in_enum_order(kRoles), "kRoles: one row per enum value, in order");

inline const StrategyInfo& strategy_info(Strategy s) { return kStrategies[static_cast<size_t>(s)]; }
inline const RoleInfo& role_info(Role r) { return kRoles[static_cast<size_t>(r)]; }
inline const char* strategy_name(Strategy s) { return strategy_info(s).name; }
inline const char* fit_name(Fit f) { return kFits[static_cast<size_t>(f)].name; }
inline const char* mode_name(Mode m) { return kModes[static_cast<size_t>(m)].name; }
inline const char* role_name(Role r) { return role_info(r).name; }

// The value named `name` in a table, or nothing.
template <typename Table>
auto value_named(const Table& table, std::string_view name)
    -> std::optional<decltype(table[0].value)> {
    for (const auto& row : table)
        if (name == row.name) return row.value;
    return std::nullopt;
}

// "'a', 'b' or 'c'": the names of a table for messages; `first`, when given,
// is listed before them (ggml's extra "ggml" strategy).
template <typename Table>
std::string quoted_names(const Table& table, const char* first = nullptr) {
    std::string out;
    const size_t n = std::size(table) + (first ? 1 : 0);
    for (size_t k = 0; k < n; ++k) {
        const char* name = first ? (k == 0 ? first : table[k - 1].name) : table[k].name;
        if (k > 0) out += k + 1 == n ? " or " : ", ";
        out += "'" + std::string(name) + "'";
    }
    return out;
}

}  // namespace emel::memory
