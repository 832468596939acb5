// The C API (include/emel/memory.h): emel_place / emel_place_ex, placement on
// bare buffers (docs/strategies.md §6). Helpers shared with the other areas,
// and guarded(), are in status.hpp.
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
#include "emel/memory/placement/placement.hpp"

using namespace emel::memory;
using namespace emel::memory::c_api;

extern "C" {

// ------------------------------------------------------------- placement

namespace {

// Both entry points, with the enum arguments already read as ints (passing
// an out-of-range enum on by value would load it as the enum type).
emel_status place_ex(const uint64_t* lower, const uint64_t* upper, const uint64_t* size, size_t n,
                     int strategy, int fit, uint64_t alignment, uint64_t time_budget_ms,
                     uint64_t capacity, uint64_t* offsets_out, uint64_t* arena_size_out) {
    static const char* fn = "emel_place";
    return guarded([&] {
        // The argument checks of emel.memory.place(), then the core's place_rows().
        check_strategy_fit(strategy, fit, fn);
        if (n > 0) {
            need(lower, fn, "lower");
            need(upper, fn, "upper");
            need(size, fn, "size");
            need(offsets_out, fn, "offsets_out");
        }
        if (n >= kNone) bad_arg(fn, "too many buffers (" + std::to_string(n) + ")");
        const Fit f = static_cast<Fit>(fit);  // range-checked above
        const RowPlacement r = place_rows(std::vector<uint64_t>(lower, lower + n),
                                          std::vector<uint64_t>(upper, upper + n),
                                          std::vector<uint64_t>(size, size + n), alignment,
                                          static_cast<Strategy>(strategy), f,
                                          budget_units(time_budget_ms), capacity);
        const Placement& placed = r.placed;
        if (placed.offset.size() != n)
            throw ApiError{EMEL_INTERNAL, "placement returned a wrong number of offsets", {}, {}, {}};
        std::copy(placed.offset.begin(), placed.offset.end(), offsets_out);
        if (arena_size_out) *arena_size_out = r.arena_size;
    });
}

}  // namespace

EMEL_API emel_status emel_place_ex(const uint64_t* lower, const uint64_t* upper,
                                   const uint64_t* size, size_t n, emel_strategy strategy,
                                   emel_fit fit, uint64_t alignment, uint64_t time_budget_ms,
                                   uint64_t capacity, uint64_t* offsets_out,
                                   uint64_t* arena_size_out) {
    return place_ex(lower, upper, size, n, enum_arg(strategy), enum_arg(fit), alignment,
                    time_budget_ms, capacity, offsets_out, arena_size_out);
}

EMEL_API emel_status emel_place(const uint64_t* lower, const uint64_t* upper,
                                const uint64_t* size, size_t n, emel_strategy strategy,
                                uint64_t alignment, uint64_t time_budget_ms,
                                uint64_t* offsets_out, uint64_t* arena_size_out) {
    return place_ex(lower, upper, size, n, enum_arg(strategy), EMEL_FIT_BEST, alignment,
                    time_budget_ms, 0, offsets_out, arena_size_out);
}

}  // extern "C"
