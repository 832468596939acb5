// The exact search's preorder race (placement/optimal_search.cpp, docs/
// strategies.md §5), through the C API's emel_place_ex: its three preorders
// race on a thread each, taking turns on fewer cores, or one after another
// with doubling limits, and the answer must not depend on which. The
// schedule is chosen by EMEL_SEARCH_THREADS_FROM and EMEL_THREADS, read at
// every search.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "emel/memory.h"
#include "emel/memory/placement/placement.hpp"  // Rng only
#include "mini_test.hpp"

namespace {

struct Rows {
    std::vector<uint64_t> lower, upper, size;
};

Rows random_rows(uint64_t seed, size_t n) {
    emel::memory::Rng rng;
    rng.state = seed;
    Rows r;
    for (size_t i = 0; i < n; ++i) {
        const uint64_t lo = rng.below(40);
        r.lower.push_back(lo);
        r.upper.push_back(lo + rng.below(14));  // some rows never live
        r.size.push_back(rng.below(10) == 0 ? 0 : 1 + rng.below(300));
    }
    return r;
}

struct Answer {
    std::vector<uint64_t> offsets;
    uint64_t size = 0;
    bool operator==(const Answer& o) const { return offsets == o.offsets && size == o.size; }
};

Answer place_optimal(const Rows& r, uint64_t budget_ms, const char* threads_from, const char* threads) {
    setenv("EMEL_SEARCH_THREADS_FROM", threads_from, 1);
    setenv("EMEL_THREADS", threads, 1);
    Answer a;
    a.offsets.assign(r.size.size(), 0);
    const emel_status s = emel_place_ex(r.lower.data(), r.upper.data(), r.size.data(), r.size.size(),
                                        EMEL_STRATEGY_OPTIMAL, EMEL_FIT_BEST, 1, budget_ms, 0,
                                        a.offsets.data(), &a.size);
    unsetenv("EMEL_SEARCH_THREADS_FROM");
    unsetenv("EMEL_THREADS");
    if (s != EMEL_OK) a.size = UINT64_MAX;
    return a;
}

// The peak of live bytes: no placement ends below it.
uint64_t peak(const Rows& r) {
    uint64_t best = 0;
    for (uint64_t t = 0; t < 64; ++t) {
        uint64_t live = 0;
        for (size_t i = 0; i < r.size.size(); ++i)
            if (r.lower[i] <= t && t < r.upper[i]) live += r.size[i];
        best = std::max(best, live);
    }
    return best;
}

bool overlaps(const Rows& r, const Answer& a) {
    for (size_t i = 0; i < r.size.size(); ++i)
        for (size_t j = i + 1; j < r.size.size(); ++j)
            if (r.lower[i] < r.upper[i] && r.lower[j] < r.upper[j] &&  // both live
                r.lower[i] < r.upper[j] && r.lower[j] < r.upper[i] && r.size[i] && r.size[j] &&
                a.offsets[i] < a.offsets[j] + r.size[j] && a.offsets[j] < a.offsets[i] + r.size[i])
                return true;
    return false;
}

}  // namespace

TEST(preorder_race_answer_is_the_same_on_threads_turns_or_restarts) {
    for (uint64_t seed : {11, 12, 13}) {
        for (size_t n : {30, 90}) {
            const Rows r = random_rows(seed, n);
            for (uint64_t budget : {2, 40}) {  // cut short, and (mostly) settled
                const Answer threads = place_optimal(r, budget, "1", "3");
                const Answer turns = place_optimal(r, budget, "1", "1");
                const Answer restarts = place_optimal(r, budget, "1000000", "3");
                REQUIRE(threads.size != UINT64_MAX);
                CHECK(threads == turns);
                CHECK(threads == restarts);
                CHECK(!overlaps(r, threads));
                CHECK(threads.size >= peak(r));
            }
        }
    }
}

TEST(preorder_race_reaches_the_peak_when_it_can_be_reached) {
    // Two stacks of rows whose sizes tile the peak exactly at every instant:
    // the optimum is the peak, and a search within budget must find it.
    Rows r;
    const uint64_t sizes[] = {48, 16, 32, 32, 8, 56};
    for (int k = 0; k < 6; ++k) {
        r.lower.push_back(k < 3 ? 0 : 5);
        r.upper.push_back(k < 3 ? 5 : 10);
        r.size.push_back(sizes[k]);
    }
    r.lower.push_back(3);  // a row across both halves, and room for it
    r.upper.push_back(7);
    r.size.push_back(0);
    const Answer a = place_optimal(r, 50, "1", "2");
    CHECK_EQ(a.size, uint64_t{96});
    CHECK_EQ(peak(r), uint64_t{96});
    CHECK(!overlaps(r, a));
    CHECK(place_optimal(r, 50, "1000000", "2") == a);
}
