// The instance's lower bound (docs/strategies.md §4): the peak of live bytes
// over all instants, which no placement can end below. (The arena's
// in-place-aware bound of a plan is core/metrics.cpp's; a bound an exact
// search has proven is a Placement's proven_bound.)
#include <algorithm>
#include <utility>
#include <vector>

#include "emel/memory/placement/placement.hpp"

namespace emel::memory {

uint64_t peak_live_bytes(const Buffers& b) {
    const size_t n = b.count();
    uint64_t first = UINT64_MAX, last = 0, total = 0;
    bool total_fits = true;
    for (size_t x = 0; x < n; ++x) {
        if (b.lower[x] >= b.upper[x]) continue;
        first = std::min(first, b.lower[x]);
        last = std::max(last, b.upper[x]);
        total_fits = total_fits && !__builtin_add_overflow(total, b.size[x], &total);
    }
    if (first > last) return 0;  // nothing live
    // Times no more spread out than the rows (a graph's steps, most traces):
    // the live bytes at each time from a table of changes, in linear time
    // instead of the sort below. The sum wraps harmlessly: every
    // true value lies in [0, total], and total fits.
    if (total_fits && times_fit_a_table(last - first, n)) {
        std::vector<uint64_t> change(last - first + 1, 0);
        for (size_t x = 0; x < n; ++x) {
            if (b.lower[x] >= b.upper[x]) continue;
            change[b.lower[x] - first] += b.size[x];
            change[b.upper[x] - first] -= b.size[x];
        }
        uint64_t live = 0, best = 0;
        for (uint64_t d : change) {
            live += d;
            best = std::max(best, live);
        }
        return best;
    }
    std::vector<std::pair<uint64_t, int64_t>> events;  // (time, +/- index)
    events.reserve(2 * n);
    for (uint32_t x = 0; x < n; ++x) {
        if (b.lower[x] >= b.upper[x]) continue;
        events.emplace_back(b.upper[x], -1 - static_cast<int64_t>(x));  // ends sort first
        events.emplace_back(b.lower[x], static_cast<int64_t>(x));
    }
    std::sort(events.begin(), events.end());
    unsigned __int128 live = 0, best = 0;
    for (const auto& [time, e] : events) {
        if (e < 0) live -= b.size[static_cast<size_t>(-1 - e)];
        else live += b.size[static_cast<size_t>(e)];
        best = std::max(best, live);
    }
    return best > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(best);
}

}  // namespace emel::memory
