// The neighbourhood search around the peak of a placement the exact search
// found (neighbourhood_search.cpp); improve_by_windows is in placement.hpp.
#pragma once

#include <cstdint>

#include "emel/memory/placement/canonical_search.hpp"

namespace emel::memory::exact {

// Lowers `best` (of `in`'s buffers), never below `lo`, with about `budget`
// work units; `work` grows by what it spends.
void improve_peak(const CanonicalInstance& in, Placement& best, uint64_t lo, uint64_t budget, uint64_t& work);

}  // namespace emel::memory::exact
