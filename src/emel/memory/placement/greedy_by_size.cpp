// greedy_by_size (docs/strategies.md §2): each buffer, biggest first, into the
// tightest gap among the conflicting buffers already placed.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <memory>
#include <numeric>
#include <optional>
#include <system_error>
#include <thread>
#include <tuple>

#include "emel/memory/core/checked_math.hpp"
#include "emel/memory/core/errors.hpp"
#include "emel/memory/placement/placed_index.hpp"
#include "emel/memory/placement/placement.hpp"
#include "emel/memory/placement/stab_index.hpp"
#include "emel/memory/placement/union_index.hpp"
#include "emel/memory/placement/worker_pool.hpp"

namespace emel::memory {

namespace {

// Buffer x lands at `chosen`: recorded, counted in the end, and indexed
// (the index skips never-live buffers, after checking that its offsets hold
// the end).
template <class Index>
void place_at(const Buffers& b, uint32_t x, uint64_t chosen, Placement& out, std::vector<uint8_t>& placed,
              Index& index) {
    out.work += index.insert(x, chosen);
    out.offset[x] = chosen;
    out.end = std::max(out.end, chosen + b.size[x]);  // no wrap: GapFinder::find() checked it
    placed[x] = 1;
}

// Buffers per batch of the parallel pass: large enough that the threads'
// hand-offs cost little, small enough that few buffers of a batch conflict
// with an earlier one (uniform 10^6: about 5%).
constexpr size_t kBatch = 512;
// Traces smaller than this are placed on one thread: a pass takes
// milliseconds, less than starting threads is worth.
constexpr size_t kParallelFrom = 16384;

// Pairs of a batch's buffers live together, per buffer, past which the
// batch counts as dense (placed one by one, not sorted out into levels).
constexpr size_t kDensePairsPerBuffer = 8;

// The levels of one batch (`m` buffers of the order from `batch`); the
// vectors are scratch, kept between batches.
void levels_of_batch(const Buffers& b, const uint32_t* batch, size_t m, uint16_t* levels,
                     std::vector<uint32_t>& by_lower, std::vector<uint32_t>& active,
                     std::vector<std::pair<uint32_t, uint32_t>>& after) {
    std::fill(levels, levels + m, uint16_t{0});
    by_lower.clear();
    for (uint32_t i = 0; i < m; ++i)
        if (b.lower[batch[i]] < b.upper[batch[i]]) by_lower.push_back(i);
    std::sort(by_lower.begin(), by_lower.end(),
              [&](uint32_t i, uint32_t j) { return b.lower[batch[i]] < b.lower[batch[j]]; });
    active.clear();  // batch positions whose interval may still overlap later starts
    after.clear();   // (later, earlier) positions live together
    // A batch whose buffers mostly live together (a layer of a layered
    // trace) is placed one by one: each its own level.
    const size_t most_pairs = kDensePairsPerBuffer * m;
    for (size_t s = 0; s < by_lower.size() && after.size() <= most_pairs; ++s) {
        const uint32_t i = by_lower[s];
        const uint64_t start = b.lower[batch[i]];
        size_t kept = 0;
        for (uint32_t j : active) {
            if (b.upper[batch[j]] <= start) continue;
            active[kept++] = j;
            after.emplace_back(std::max(i, j), std::min(i, j));
        }
        active.resize(kept);
        active.push_back(i);
    }
    if (after.size() > most_pairs) {
        for (uint32_t i = 0; i < m; ++i) levels[i] = static_cast<uint16_t>(i);
        return;
    }
    // In batch order, each buffer's level is final before a later one reads it.
    std::sort(after.begin(), after.end());
    for (const auto& [later, earlier] : after)
        levels[later] = std::max<uint16_t>(levels[later], static_cast<uint16_t>(levels[earlier] + 1));
}

// Levels of the buffers of each batch: 0 for a buffer live together with no
// earlier buffer of its batch, else one more than the highest level of those
// it is live with (their offsets decide its gap). Buffers of one level are
// never live together, and every buffer an earlier one of the batch is live
// with has a higher level. The batches' levels are found on the pool's
// threads, each batch on its own, before the pass: they depend only on the
// order.
void batch_levels(const Buffers& b, const std::vector<uint32_t>& order, WorkerPool& pool,
                  std::vector<uint16_t>& level) {
    level.assign(order.size(), 0);
    pool.run([&](unsigned t) {
        std::vector<uint32_t> by_lower, active;
        std::vector<std::pair<uint32_t, uint32_t>> after;
        for (size_t at = t * kBatch; at < order.size(); at += pool.size() * kBatch)
            levels_of_batch(b, order.data() + at, std::min(kBatch, order.size() - at), level.data() + at, by_lower,
                            active, after);
    });
}

// Whether at least half of a pass's buffers wait on none before them in
// their batch (level 0).
bool mostly_at_once(const std::vector<uint16_t>& level) {
    return 2 * static_cast<size_t>(std::count(level.begin(), level.end(), uint16_t{0})) >= level.size();
}

// A level this small is found on the calling thread: handing it to the
// pool costs about as much as its gaps.
constexpr size_t kPoolLevelFrom = 8;

// Where at least half of a pass's buffers are in levels the pool takes
// (kPoolLevelFrom buffers or more), the threads pay even though most
// buffers wait on an earlier one: random lifetimes up to 2,000 steps by
// size, 10^5 buffers, wait in about 20 levels per batch of 512, nearly all
// wide (one thread 1.43 s, the threads 0.80 s). A layered trace's levels
// hold a buffer or a few each.
bool mostly_in_wide_levels(const std::vector<uint16_t>& level) {
    size_t wide = 0;
    std::vector<uint32_t> in_level;
    for (size_t at = 0; at < level.size(); at += kBatch) {
        const size_t m = std::min(kBatch, level.size() - at);
        in_level.assign(m, 0);
        for (size_t i = 0; i < m; ++i) ++in_level[level[at + i]];
        for (uint32_t count : in_level)
            if (count >= kPoolLevelFrom) wide += count;
    }
    return 2 * wide >= level.size();
}

// Whether the threads take a pass whose batches have these levels; else it
// runs on one thread (place_greedy_as_given).
bool threads_pay(const std::vector<uint16_t>& level) { return mostly_at_once(level) || mostly_in_wide_levels(level); }

// The greedy pass on several threads, identical to the one-thread pass: in
// each batch, level by level, the gaps of a level's buffers are found at
// once against the placement so far (every buffer they are live with that
// comes earlier in the order is placed by then), then they are placed.
// Buffers placed out of order are never live with the ones they pass, so
// each gap, each charge and the end are the one-thread pass's. An overflow
// is raised for the earliest buffer of the batch that overflows, as one
// thread would: every buffer before it was found against the right state.
template <class Index>
void place_greedy_batched(const Buffers& b, const std::vector<uint32_t>& order, Fit fit, Index& index,
                          Placement& out, std::vector<uint8_t>& placed, WorkerPool& pool,
                          const std::vector<uint16_t>& level, uint64_t give_up_above) {
    std::vector<BasicGapFinder<typename Index::Span>> finders;
    for (unsigned t = 0; t < pool.size(); ++t) finders.emplace_back(b);
    std::vector<uint64_t> found(kBatch), found_work(kBatch);
    std::vector<uint8_t> overflow(kBatch);
    std::vector<uint32_t> by_level, level_begin;
    for (size_t start = 0; start < order.size(); start += kBatch) {
        const uint32_t* batch = order.data() + start;
        const uint16_t* levels = level.data() + start;
        const size_t m = std::min(kBatch, order.size() - start);
        // The batch's positions grouped by level, in batch order within each.
        uint16_t top = 0;
        for (size_t i = 0; i < m; ++i) top = std::max(top, levels[i]);
        level_begin.assign(size_t{top} + 2, 0);
        for (size_t i = 0; i < m; ++i) ++level_begin[levels[i] + 1];
        for (size_t l = 1; l < level_begin.size(); ++l) level_begin[l] += level_begin[l - 1];
        by_level.resize(m);
        for (uint32_t i = 0; i < m; ++i) by_level[level_begin[levels[i]]++] = i;
        for (size_t l = level_begin.size() - 1; l > 0; --l) level_begin[l] = level_begin[l - 1];
        level_begin[0] = 0;
        for (size_t l = 0; l <= top; ++l) {
            const uint32_t* items = by_level.data() + level_begin[l];
            const size_t count = level_begin[l + 1] - level_begin[l];
            auto find = [&](unsigned t, size_t step) {
                for (size_t e = t; e < count; e += step) {
                    const uint32_t i = items[e];
                    index.read_ahead([&](size_t k) { return batch[items[e + k * step]]; }, (count - 1 - e) / step);
                    found_work[i] = 0;
                    overflow[i] = 0;
                    try {
                        found[i] = finders[t].find(index, out.offset, placed, batch[i], fit, found_work[i]);
                    } catch (const PlacementOverflow&) {
                        overflow[i] = 1;
                    }
                }
            };
            if (count >= kPoolLevelFrom) pool.run([&](unsigned t) { find(t, pool.size()); });
            else find(0, 1);
            for (size_t e = 0; e < count; ++e) {
                const uint32_t i = items[e];
                out.work += found_work[i];
                if (!overflow[i]) place_at(b, batch[i], found[i], out, placed, index);
            }
        }
        for (size_t i = 0; i < m; ++i)
            if (overflow[i]) throw PlacementOverflow(batch[i]);
        // Checked per batch: the batch's gaps were found (and charged) at once.
        if (out.end > give_up_above) {
            out.abandoned = true;
            return;
        }
    }
}

// A pass the threads take in batches: large, and without partners (placed
// buffers outside the index: one thread keeps their checks simple).
bool in_batches(const Buffers& b) { return b.count() >= kParallelFrom && !b.has_partners(); }

// From this many buffers a pass copies them in its order first (below).
constexpr size_t kInOrderFrom = 4096;

template <class Index>
Placement place_greedy_as_given(const Buffers& b, const std::vector<uint32_t>& order, Fit fit,
                                uint64_t give_up_above, WorkerPool* pool, GreedyRecord* record);

// Most buffers of the order far (a cache line or more) from the one before
// in the arrays: random traces by size. Orders that already walk the arrays
// in sequence (layered traces by size, then time) gain nothing from a copy.
bool scattered(const std::vector<uint32_t>& order) {
    size_t far = 0;
    for (size_t i = 1; i < order.size(); ++i) far += order[i] > order[i - 1] + 8 || order[i] + 8 < order[i - 1];
    return 2 * far > order.size();
}

// A type to pick place_greedy_as_given's index by.
template <class Index>
struct IndexTag {
    using type = Index;
};

// The narrowest index that holds the pass: 32-bit times where every time
// fits, and 32-bit offsets where the placement's end does. The end is known
// only by placing, so a pass whose sizes add up past 2^32-1 tries 32-bit
// offsets and starts again with 64-bit ones once an end passes them (by
// size, the largest buffers come first and set most of the end: early); a
// buffer that alone passes them rules them out at once. The index decides
// nothing, so the answer and the work are the same.
//
// A dense instance (`dense`: dense_index_for() the caller's buffers) takes
// StabIndex or UnionIndex instead, whose queries read unions of placed bytes
// instead of every conflict: the same answer, for the work of what it reads.
Placement place_greedy_indexed(const Buffers& b, const std::vector<uint32_t>& order, Fit fit,
                               uint64_t give_up_above, WorkerPool* pool, DenseIndex dense, GreedyRecord* record) {
    auto pass = [&](auto index) {
        using Index = typename decltype(index)::type;
        return place_greedy_as_given<Index>(b, order, fit, give_up_above, pool, record);
    };
    if (dense == DenseIndex::Unions) return pass(IndexTag<UnionIndex>{});
    if (dense == DenseIndex::Stabs) return pass(IndexTag<StabIndex>{});
    if (!times_fit_32_bits(b)) return pass(IndexTag<PlacedIndex>{});
    if (std::any_of(b.size.begin(), b.size.end(), [](uint64_t size) { return size > UINT32_MAX; }))
        return pass(IndexTag<TimesCompactPlacedIndex>{});
    try {
        return pass(IndexTag<CompactPlacedIndex>{});
    } catch (const OffsetsTooWide&) {
        return pass(IndexTag<TimesCompactPlacedIndex>{});
    }
}

// A pass expected to cost less than this many work units (a few
// milliseconds) runs on one thread: starting the threads and handing them
// each batch's levels costs more than it saves there, and far more where
// another process keeps a core busy (a waiting thread then waits for a time
// slice). auto's local search on a KV-cache trace of 16,384 buffers, some
// 1,160 passes of 3M units each, took 3.5-37 s on two threads and 2.3 s on
// one (docs/strategies.md §2).
constexpr uint64_t kThreadsFromWork = 100'000'000;

}  // namespace

bool greedy_too_small_for_threads(const Buffers& b, uint64_t expected_work) {
    return !in_batches(b) || expected_work < kThreadsFromWork;
}

namespace {

// The threads of a pass in batches (null: one thread).
std::unique_ptr<WorkerPool> pass_threads(const Buffers& b, uint64_t expected_work) {
    if (greedy_too_small_for_threads(b, expected_work) || placement_threads() < 2) return nullptr;
    auto pool = std::make_unique<WorkerPool>(placement_threads());
    if (pool->size() < 2) return nullptr;
    return pool;
}

// A large pass reads each buffer's times, size and alignment and writes its
// offset in the order it places them: scattered over the buffers' arrays,
// each a cache miss at 10^6 buffers. So the buffers are copied in that order
// first (the index's rows are sorted by time either way) and the offsets
// copied back. Nothing the pass chooses depends on the buffers' numbering
// (spans are walked in offset order; equal offsets in any order give the
// same gaps), so the answer and the work are the same.
Placement place_greedy_in_order(const Buffers& b, const std::vector<uint32_t>& order, Fit fit,
                                uint64_t give_up_above, WorkerPool* pool, GreedyRecord* record) {
    const DenseIndex dense = dense_index_for(b);
    // Every buffer in the order (the passes' orders are permutations), so the
    // copy has the same count, and so the same batches and checks.
    if (order.size() < kInOrderFrom || order.size() != b.count() || b.has_partners() || !scattered(order))
        return place_greedy_indexed(b, order, fit, give_up_above, pool, dense, record);
    const size_t m = order.size();
    Buffers in_order;
    copy_rows(b, order, in_order, pool);
    std::vector<uint32_t> in_turn(m);
    std::iota(in_turn.begin(), in_turn.end(), 0u);
    Placement placed;
    try {
        placed = place_greedy_indexed(in_order, in_turn, fit, give_up_above, pool, dense, record);
    } catch (const PlacementOverflow& e) {
        throw PlacementOverflow(order[e.buffer]);
    }
    std::vector<uint64_t> offset(b.count(), 0);
    in_ranges(pool, m, [&](size_t from, size_t to) {
        for (size_t i = from; i < to; ++i) offset[order[i]] = placed.offset[i];
    });
    placed.offset = std::move(offset);
    return placed;
}

}  // namespace

void copy_rows(const Buffers& b, const std::vector<uint32_t>& rows, Buffers& into, WorkerPool* pool) {
    const size_t m = rows.size();
    into.lower.resize(m);
    into.upper.resize(m);
    into.size.resize(m);
    into.alignment.resize(m);
    into.rank.resize(m);
    in_ranges(pool, m, [&](size_t from, size_t to) {
        for (size_t i = from; i < to; ++i) {
            const uint32_t x = rows[i];
            into.lower[i] = b.lower[x];
            into.upper[i] = b.upper[x];
            into.size[i] = b.size[x];
            into.alignment[i] = b.alignment[x];
            into.rank[i] = b.rank[x];
        }
    });
}

Placement place_greedy_recorded(const Buffers& b, const std::vector<uint32_t>& order, Fit fit,
                                GreedyRecord& record) {
    return place_greedy_in_order(b, order, fit, UINT64_MAX, nullptr, &record);
}

// Batches of the order greedy_runs_on_one_thread() levels: spread over it,
// enough to tell a pass that waits from one that does not.
constexpr size_t kSampledBatches = 16;

bool greedy_runs_on_one_thread(const Buffers& b, const std::vector<uint32_t>& order) {
    if (!in_batches(b) || placement_threads() < 2 || order.size() < kBatch) return true;
    const size_t batches = order.size() / kBatch, sampled = std::min(batches, kSampledBatches);
    std::vector<uint16_t> level(sampled * kBatch);
    std::vector<uint32_t> by_lower, active;
    std::vector<std::pair<uint32_t, uint32_t>> after;
    for (size_t k = 0; k < sampled; ++k)
        levels_of_batch(b, order.data() + batches * k / sampled * kBatch, kBatch, level.data() + k * kBatch,
                        by_lower, active, after);
    return !threads_pay(level);
}

namespace {

// A trace's buffers by time part: the live ones split at every instant
// none of them spans (zero-size ones too: a pass places them by their
// conflicts as well), the never-live ones with the first part (they meet
// no buffer). A greedy pass places each part as if alone: a buffer's gap
// depends only on the buffers live with it, all in its part.
struct TimeParts {
    std::vector<uint32_t> part_of;  // by buffer
    std::vector<uint32_t> members;  // by part: how many buffers
    size_t count() const { return members.size(); }
};

// Time lines up to this many instants a buffer are cut by counting (a few
// milliseconds at 10^6 buffers, where a sort takes 0.1 s: a pass asks on
// every trace of 16,384 buffers or more); longer ones by sorting, where
// `may_sort` (else the trace counts as one part).
constexpr uint64_t kCountedInstantsPerBuffer = 4;

TimeParts time_parts(const Buffers& b, bool may_sort) {
    const size_t n = b.count();
    TimeParts t;
    t.part_of.assign(n, 0);
    uint64_t first = UINT64_MAX, last = 0;
    for (size_t x = 0; x < n; ++x)
        if (b.lower[x] < b.upper[x]) {
            first = std::min(first, b.lower[x]);
            last = std::max(last, b.upper[x]);
        }
    const bool counted = first < last && last - first <= kCountedInstantsPerBuffer * n;
    if (first >= last || (!counted && !may_sort)) {
        t.members.assign(1, static_cast<uint32_t>(n));
        return t;
    }
    if (counted) {
        // Lowers and uppers at each instant; then, swept in time, the part
        // that begins at or before each instant (a part begins where a
        // buffer does and none begun before is live), written over the uppers.
        const size_t span = static_cast<size_t>(last - first) + 1;
        std::vector<uint32_t> begin(span, 0), part_at(span, 0);
        for (size_t x = 0; x < n; ++x)
            if (b.lower[x] < b.upper[x]) {
                ++begin[b.lower[x] - first];
                ++part_at[b.upper[x] - first];
            }
        uint64_t live = 0;
        uint32_t part = 0;
        for (size_t i = 0; i < span; ++i) {
            live -= part_at[i];
            if (begin[i] && live == 0 && i > 0) ++part;
            part_at[i] = part;
            live += begin[i];
        }
        for (size_t x = 0; x < n; ++x)
            if (b.lower[x] < b.upper[x]) t.part_of[x] = part_at[b.lower[x] - first];
    } else {
        std::vector<uint32_t> by_lower;
        for (uint32_t x = 0; x < n; ++x)
            if (b.lower[x] < b.upper[x]) by_lower.push_back(x);
        std::sort(by_lower.begin(), by_lower.end(), [&](uint32_t p, uint32_t q) {
            return b.lower[p] != b.lower[q] ? b.lower[p] < b.lower[q] : p < q;
        });
        uint64_t reach = 0;  // the latest upper so far
        uint32_t part = 0;
        for (size_t i = 0; i < by_lower.size(); ++i) {
            const uint32_t x = by_lower[i];
            if (i > 0 && reach <= b.lower[x]) ++part;  // nothing begun before x is live at its lower
            t.part_of[x] = part;
            reach = std::max(reach, b.upper[x]);
        }
    }
    for (size_t x = 0; x < n; ++x) {
        if (t.part_of[x] >= t.members.size()) t.members.resize(t.part_of[x] + 1, 0);
        ++t.members[t.part_of[x]];
    }
    return t;
}

// Each part's peak of live bytes (saturating: an order, not a bound).
std::vector<uint64_t> part_peaks(const Buffers& b, const TimeParts& t) {
    struct Event {
        uint64_t at;
        bool lower;  // uppers first at one instant: lifetimes are half-open
        uint32_t x;
    };
    std::vector<Event> events;
    for (uint32_t x = 0; x < b.count(); ++x)
        if (b.lower[x] < b.upper[x]) {
            events.push_back({b.lower[x], true, x});
            events.push_back({b.upper[x], false, x});
        }
    std::sort(events.begin(), events.end(), [](const Event& p, const Event& q) {
        return std::tie(p.at, p.lower, p.x) < std::tie(q.at, q.lower, q.x);
    });
    std::vector<uint64_t> peak(t.count(), 0);
    unsigned __int128 bytes = 0;  // parts meet no instant: the bytes live are one part's
    for (const Event& e : events) {
        if (!e.lower) {
            bytes -= b.size[e.x];
            continue;
        }
        bytes += b.size[e.x];
        uint64_t& p = peak[t.part_of[e.x]];
        p = std::max<uint64_t>(p, bytes > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(bytes));
    }
    return peak;
}

// The parts a pass in `order` takes on the threads at once, or none.
// Where the threads do not take it in batches (dense traces), every part
// pays; where they do, only parts that split it evenly (none holding more
// than half its buffers) beat the batches. Needs two threads, a pass
// expected to pay for them, and PlacedIndex, whose work for a buffer
// depends only on the buffers live with it (UnionIndex and StabIndex
// charge by the nodes and stabs of the whole trace's time line), so the
// parts' work adds up to the whole pass's.
std::optional<TimeParts> parts_for_threads(const Buffers& b, const std::vector<uint32_t>& order,
                                           uint64_t expected_work) {
    if (greedy_too_small_for_threads(b, expected_work) || order.size() != b.count() || placement_threads() < 2)
        return std::nullopt;
    // A pass on one thread costs seconds: a sort to find its parts is
    // nothing beside it (the batches' passes take a second at 10^6 buffers).
    const bool one_thread = greedy_runs_on_one_thread(b, order);
    TimeParts t = time_parts(b, one_thread);
    if (t.count() < 2) return std::nullopt;
    const uint32_t largest = *std::max_element(t.members.begin(), t.members.end());
    if (2 * static_cast<uint64_t>(largest) > b.count() && !one_thread) return std::nullopt;
    if (dense_index_for(b) != DenseIndex::None) return std::nullopt;
    return t;
}

// The parts by their peak of live bytes, highest first (ties: earlier in
// time): where a pass is likeliest to end highest.
std::vector<uint32_t> highest_parts_first(const Buffers& b, const TimeParts& t) {
    const std::vector<uint64_t> peak = part_peaks(b, t);
    std::vector<uint32_t> order(t.count());
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(), [&](uint32_t p, uint32_t q) { return peak[p] > peak[q]; });
    return order;
}

// The parts with the most buffers first: the threads end together.
std::vector<uint32_t> largest_parts_first(const TimeParts& t) {
    std::vector<uint32_t> order(t.count());
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t p, uint32_t q) { return t.members[p] > t.members[q]; });
    return order;
}

// The pass in `order` one time part at a time, taken in `part_order` by
// `threads` threads at once. Each part's offsets and work are what the
// whole pass gives its buffers, so where every part ends within `limit`
// the answer is the whole pass's: the same offsets, end and work. Where
// one does not (`limit` may fall while the parts run), the rest stop and
// it comes back abandoned, with no end or work of use: only for callers
// that charge nothing for a pass given up. `highest`: the highest end of
// the parts done (in and out). `between` runs before every part but a
// thread's first. None where a part raised (an overflow: the caller runs
// the whole pass, which names the buffer in order) or `cancel` was set
// before the parts were done.
std::optional<Placement> place_greedy_in_parts(const Buffers& b, const std::vector<uint32_t>& order, Fit fit,
                                               const TimeParts& t, const std::vector<uint32_t>& part_order,
                                               unsigned threads, const std::atomic<uint64_t>& limit,
                                               const std::atomic<bool>& cancel, std::atomic<uint64_t>& highest,
                                               const std::function<void()>& between) {
    std::vector<std::vector<uint32_t>> members(t.count());
    for (uint32_t x : order) members[t.part_of[x]].push_back(x);
    std::vector<Placement> placed(t.count());
    std::atomic<size_t> next{0}, done{0};
    std::atomic<bool> lost{false}, failed{false};
    WorkerPool pool(threads);
    pool.run([&](unsigned) {
        Buffers part;
        std::vector<uint32_t> in_turn;
        GreedyRecord record;  // a part is given up past `limit`, or stopped
        record.give_up_above = &limit;
        record.cancel = &cancel;
        for (size_t k = next++, first = k; k < part_order.size() && !lost && !failed && !cancel; k = next++) {
            if (k != first) between();
            if (highest > limit) {  // a part done passes the limit, lowered since
                lost = true;
                break;
            }
            const uint32_t c = part_order[k];
            const size_t m = members[c].size();
            copy_rows(b, members[c], part);
            in_turn.resize(m);
            std::iota(in_turn.begin(), in_turn.end(), 0u);
            try {
                placed[c] = place_greedy_indexed(part, in_turn, fit, UINT64_MAX, nullptr, DenseIndex::None, &record);
                // Given up (past the limit, or stopped: the caller wants it no more).
                if (placed[c].abandoned || placed[c].end > limit) lost = true;
                ++done;
                uint64_t seen = highest;
                while (placed[c].end > seen && !highest.compare_exchange_weak(seen, placed[c].end)) {
                }
            } catch (...) {
                failed = true;
            }
        }
    });
    if (failed || (!lost && done < part_order.size())) return std::nullopt;
    Placement out;
    out.method = fit == Fit::Best ? "greedy_by_size" : "greedy_by_size_first_fit";
    if (lost) {
        out.abandoned = true;
        out.end = UINT64_MAX;
        return out;
    }
    out.offset.assign(b.count(), 0);
    for (size_t c = 0; c < t.count(); ++c) {
        for (size_t i = 0; i < members[c].size(); ++i) out.offset[members[c][i]] = placed[c].offset[i];
        out.end = std::max(out.end, placed[c].end);
        out.work += placed[c].work;
    }
    return out;
}

}  // namespace

Placement place_greedy(const Buffers& b, const std::vector<uint32_t>& order, Fit fit, uint64_t give_up_above,
                       uint64_t expected_work) {
    // A whole pass (never given up) over a trace that falls apart in time:
    // its parts on the threads at once (bursty starts, 10^5 buffers: 2.4 s
    // on one thread, 1.05 s in parts on two).
    if (give_up_above == UINT64_MAX)
        if (const auto t = parts_for_threads(b, order, expected_work)) {
            const std::atomic<uint64_t> no_limit{UINT64_MAX};
            const std::atomic<bool> no_cancel{false};
            std::atomic<uint64_t> highest{0};
            if (auto p = place_greedy_in_parts(b, order, fit, *t, largest_parts_first(*t), placement_threads(),
                                               no_limit, no_cancel, highest, [] {}))
                return std::move(*p);
        }
    return place_greedy_in_order(b, order, fit, give_up_above, pass_threads(b, expected_work).get(), nullptr);
}

bool greedy_takes_parts(const Buffers& b, const std::vector<uint32_t>& order) {
    return parts_for_threads(b, order, UINT64_MAX).has_value();
}

PartsPass::PartsPass(const Buffers& b, const std::vector<uint32_t>& order, Fit fit) {
    try {
        thread_ = std::thread([this, &b, &order, fit] {
            try {
                const TimeParts t = time_parts(b, true);
                // The part likeliest to pass the limit at once; the others
                // only once the limit is known (the first lower_limit).
                answer_ = place_greedy_in_parts(b, order, fit, t, highest_parts_first(b, t), 1, limit_, cancel_,
                                                highest_, [this] {
                                                    std::unique_lock<std::mutex> lock(mutex_);
                                                    told_.wait(lock, [this] { return limit_known_ || cancel_; });
                                                });
            } catch (...) {
                answer_.reset();
            }
        });
    } catch (const std::system_error&) {
    }
}

PartsPass::~PartsPass() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        cancel_ = true;
    }
    told_.notify_all();
    if (thread_.joinable()) thread_.join();
}

void PartsPass::lower_limit(uint64_t limit) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        lower_to(limit_, limit);
        limit_known_ = true;
        if (highest_ > limit_) cancel_ = true;  // a part done passes it: lost, whatever the rest
    }
    told_.notify_all();
}

std::optional<Placement> PartsPass::unless_above(uint64_t limit) {
    lower_limit(limit);
    if (thread_.joinable()) thread_.join();
    if (highest_ > limit) {  // a part done passes it (maybe before the limit was known)
        Placement lost;
        lost.abandoned = true;
        lost.end = UINT64_MAX;
        lost.method = "greedy_by_size";
        return lost;
    }
    return std::move(answer_);
}

namespace {

template <class Index>
Placement place_greedy_as_given(const Buffers& b, const std::vector<uint32_t>& order, Fit fit,
                                uint64_t give_up_above, WorkerPool* pool, GreedyRecord* record) {
    const size_t n = b.count();
    Placement out;
    out.offset.assign(n, 0);
    out.method = fit == Fit::Best ? "greedy_by_size" : "greedy_by_size_first_fit";
    std::vector<uint8_t> placed(n, 0);
    Index index(b, pool);
    if (pool) {
        // Threads pay where most buffers of a batch wait on none before them
        // (random lifetimes); where most wait (a layered trace by size, each
        // layer's buffers live together) the levels are short and one
        // thread is faster: there the pass below runs, which is the same.
        std::vector<uint16_t> level;
        batch_levels(b, order, *pool, level);
        if (threads_pay(level)) {
            place_greedy_batched(b, order, fit, index, out, placed, *pool, level, give_up_above);
            return out;
        }
    }
    // On one thread, a pass the threads would take in batches is given up
    // where they would, at a batch's end: the work charged, and so every
    // later choice a budget makes, must not depend on the machine's cores.
    const size_t check_every = in_batches(b) ? kBatch : 1;
    if (record) record->checks.clear();  // a pass started again with wider offsets
    BasicGapFinder<typename Index::Span> gaps(b);
    for (size_t i = 0; i < order.size(); ++i) {
        const uint32_t x = order[i];
        index.read_ahead([&](size_t k) { return order[i + k]; }, order.size() - 1 - i);
        place_at(b, x, gaps.find(index, out.offset, placed, x, fit, out.work), out, placed, index);
        if ((i + 1) % check_every == 0 || i + 1 == order.size()) {
            if (out.end > give_up_above) {
                out.abandoned = true;
                break;
            }
            if (record && (record->checks.empty() || out.end > record->checks.back().end)) {
                record->checks.push_back({out.end, out.work});
                if (record->give_up_above && out.end > record->give_up_above->load(std::memory_order_relaxed)) {
                    out.abandoned = true;
                    break;
                }
            }
        }
        if (record && record->cancel && record->cancel->load(std::memory_order_relaxed)) {
            out.abandoned = true;
            break;
        }
    }
    return out;
}

}  // namespace

}  // namespace emel::memory
