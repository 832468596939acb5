// The neighbourhood search around the peak of a placement the exact search
// found (neighbourhood_search.cpp); improve_by_windows is in placement.hpp.
#pragma once

#include <cstdint>
#include <vector>

#include "emel/memory/placement/canonical_search.hpp"

namespace emel::memory::exact {

// One neighbourhood searched: the buffers freed, the search's share, the
// work it did (charged up to the share) and whether it placed them lower.
struct NeighbourhoodTried {
    size_t freed;
    uint64_t share, spent;
    bool found;
};

// Lowers `best` (of `in`'s buffers), never below `lo`, with about `budget`
// work units; `work` grows by what it spends. `tried`, when set, gets every
// neighbourhood searched, in turn (for tests).
void improve_peak(const CanonicalInstance& in, Placement& best, uint64_t lo, uint64_t budget, uint64_t& work,
                  std::vector<NeighbourhoodTried>* tried = nullptr);

}  // namespace emel::memory::exact
