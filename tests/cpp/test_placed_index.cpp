// PlacedIndex, SpanSorter and GapFinder (placement/placed_index.hpp), the
// greedy passes' index of placed buffers and their gap choice, against brute
// force on random instances and against hand-worked gaps.
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "emel/memory/placement/placed_index.hpp"
#include "mini_test.hpp"

using namespace emel::memory;

namespace {

// Random rows: `spread` instants, lifetimes up to `longest` (some never live).
Buffers random_buffers(Rng& rng, size_t n, uint64_t spread, uint64_t longest) {
    Buffers b;
    for (size_t x = 0; x < n; ++x) {
        const uint64_t lo = rng.below(spread);
        const uint64_t len = rng.below(10) == 0 ? 0 : 1 + rng.below(longest);
        b.lower.push_back(lo);
        b.upper.push_back(lo + len);
        b.size.push_back(1 + rng.below(100));
        b.alignment.push_back(1);
        b.rank.push_back(static_cast<uint32_t>(x));
    }
    return b;
}

using Pair = std::pair<uint64_t, uint64_t>;

std::vector<Pair> sorted_pairs(const std::vector<Span>& spans) {
    std::vector<Pair> out;
    for (const Span& s : spans) out.emplace_back(s.offset, s.end);
    std::sort(out.begin(), out.end());
    return out;
}

// Every placed, live buffer with lower < hi and upper > lo, by brute force.
std::vector<Pair> brute_conflicts(const Buffers& b, const std::vector<uint64_t>& offset,
                                  const std::vector<uint8_t>& placed, uint64_t lo, uint64_t hi) {
    std::vector<Pair> out;
    for (size_t y = 0; y < b.count(); ++y)
        if (placed[y] && b.lower[y] < b.upper[y] && b.lower[y] < hi && b.upper[y] > lo)
            out.emplace_back(offset[y], offset[y] + b.size[y]);
    std::sort(out.begin(), out.end());
    return out;
}

void check_collect_matches_brute_force(uint64_t spread, uint64_t longest, size_t n, uint64_t seed) {
    Rng rng;
    rng.state = seed;
    const Buffers b = random_buffers(rng, n, spread, longest);
    PlacedIndex index(b);
    std::vector<uint64_t> offset(n, 0);
    std::vector<uint8_t> placed(n, 0);
    std::vector<Span> spans;
    PlacedIndex::Runs runs;
    size_t queries = 0;
    for (size_t step = 0; step < n; ++step) {
        const uint32_t x = static_cast<uint32_t>(rng.below(n));
        if (!placed[x]) {
            offset[x] = rng.below(1000);
            placed[x] = 1;
            index.insert(x, offset[x]);
        }
        const uint64_t lo = rng.below(spread + 2), hi = lo + 1 + rng.below(longest + 2);
        spans.clear();
        index.collect(lo, hi, spans, runs);
        CHECK(sorted_pairs(spans) == brute_conflicts(b, offset, placed, lo, hi));
        ++queries;
    }
    CHECK_EQ(queries, n);
}

}  // namespace

TEST(placed_index_dense_times_match_brute_force) {
    // Few instants for many rows: the counting sort and crowded buckets.
    check_collect_matches_brute_force(/*spread=*/50, /*longest=*/8, /*n=*/600, 1);
}

TEST(placed_index_sparse_times_match_brute_force) {
    // Instants far more spread than the rows: std::sort and empty buckets.
    check_collect_matches_brute_force(/*spread=*/1000000, /*longest=*/300000, /*n=*/400, 2);
}

TEST(placed_index_mixed_lifetimes_match_brute_force) {
    // Lifetimes from 1 to 5000: many length classes.
    check_collect_matches_brute_force(/*spread=*/5000, /*longest=*/5000, /*n=*/500, 3);
}

TEST(placed_index_ignores_never_live_and_unplaced_rows) {
    Buffers b;
    b.lower = {0, 3, 0};
    b.upper = {5, 3, 5};  // row 1 is never live
    b.size = {4, 4, 4};
    b.alignment = {1, 1, 1};
    b.rank = {0, 1, 2};
    PlacedIndex index(b);
    index.insert(1, 100);  // a never-live row has no place in the index
    std::vector<Span> spans;
    PlacedIndex::Runs runs;
    index.collect(0, 10, spans, runs);
    CHECK(spans.empty());
    index.insert(0, 8);  // row 2 stays unplaced
    index.collect(0, 10, spans, runs);
    REQUIRE(spans.size() == 1);
    CHECK_EQ(spans[0].offset, uint64_t{8});
    CHECK_EQ(spans[0].end, uint64_t{12});
    spans.clear();
    index.collect(5, 9, spans, runs);  // [0, 5) ends where the query starts
    CHECK(spans.empty());
}

TEST(span_sorter_orders_by_offset) {
    Rng rng;
    for (size_t k : {0, 1, 5, 31, 32, 200, 5000}) {
        std::vector<Span> spans;
        for (size_t i = 0; i < k; ++i) {
            // A few huge offsets stretch the range: the crowded-bucket path.
            const uint64_t o = rng.below(20) == 0 ? (uint64_t{1} << 50) + rng.below(1000) : rng.below(3000);
            spans.emplace_back(o, o + 1 + rng.below(50));
        }
        std::vector<Span> full = spans;
        SpanSorter sorter;
        sorter.sort(spans, false);
        sorter.sort(full, true);
        CHECK_EQ(spans.size(), k);
        bool by_offset = true, by_offset_then_end = true;
        for (size_t i = 1; i < spans.size(); ++i) {
            by_offset = by_offset && spans[i - 1].offset <= spans[i].offset;
            by_offset_then_end = by_offset_then_end &&
                                 (full[i - 1].offset < full[i].offset ||
                                  (full[i - 1].offset == full[i].offset && full[i - 1].end <= full[i].end));
        }
        CHECK(by_offset);
        CHECK(by_offset_then_end);
    }
}

namespace {

// Rows 0..2 placed over one lifetime at [0, 10), [20, 30) and [36, 50): a
// gap of 10 at 10 and one of 6 at 30. Row 3, same lifetime, is the one to place.
struct GapCase {
    Buffers b;
    std::vector<uint64_t> offset{0, 20, 36, 0};
    std::vector<uint8_t> placed{1, 1, 1, 0};

    explicit GapCase(uint64_t size, uint64_t alignment) {
        b.lower = {0, 0, 0, 0};
        b.upper = {4, 4, 4, 4};
        b.size = {10, 10, 14, size};
        b.alignment = {1, 1, 1, alignment};
        b.rank = {0, 1, 2, 3};
    }
    uint64_t find(Fit fit, uint64_t& work) {
        PlacedIndex index(b);
        for (uint32_t x = 0; x < 3; ++x) index.insert(x, offset[x]);
        GapFinder finder(b);
        return finder.find(index, offset, placed, 3, fit, work);
    }
};

}  // namespace

TEST(gap_finder_first_fit_takes_the_lowest_gap_best_fit_the_tightest) {
    uint64_t work = 0;
    CHECK_EQ(GapCase(5, 1).find(Fit::First, work), uint64_t{10});
    CHECK_EQ(GapCase(5, 1).find(Fit::Best, work), uint64_t{30});
    CHECK_EQ(GapCase(6, 1).find(Fit::Best, work), uint64_t{30});   // an exact fit
    CHECK_EQ(GapCase(7, 1).find(Fit::Best, work), uint64_t{10});   // only the wide gap fits
    CHECK_EQ(GapCase(12, 1).find(Fit::First, work), uint64_t{50});  // no gap fits: on top
    CHECK(work > 0);  // conflicts examined are charged
}

TEST(gap_finder_aligns_inside_gaps) {
    uint64_t work = 0;
    // Alignment 8: the wide gap's aligned start is 16 (4 bytes left), the
    // narrow one's 32 (4 left): 5 bytes fit in neither, so on top at 56.
    CHECK_EQ(GapCase(5, 8).find(Fit::First, work), uint64_t{56});
    CHECK_EQ(GapCase(4, 8).find(Fit::First, work), uint64_t{16});
    // Best fit compares the gaps as they are, before alignment: the narrow
    // one (6 bytes at 30) wins, its aligned start is 32.
    CHECK_EQ(GapCase(4, 8).find(Fit::Best, work), uint64_t{32});
}

TEST(gap_finder_throws_placement_overflow_past_2_64) {
    GapCase c(16, 1);
    c.b.size[2] = UINT64_MAX - 36;  // row 2 ends at 2^64 - 1
    uint64_t work = 0;
    bool threw = false;
    try {
        c.find(Fit::Best, work);
    } catch (const PlacementOverflow& e) {
        threw = e.buffer == 3;
    }
    CHECK(threw);
}
