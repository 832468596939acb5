// greedy_by_size (docs/strategies.md §2): each buffer, biggest first, into the
// tightest gap among the conflicting buffers already placed.
#include <algorithm>
#include <numeric>

#include "emel/memory/core/checked_math.hpp"
#include "emel/memory/core/errors.hpp"
#include "emel/memory/placement/placed_index.hpp"
#include "emel/memory/placement/placement.hpp"
#include "emel/memory/placement/worker_pool.hpp"

namespace emel::memory {

namespace {

// Buffer x lands at `chosen`: recorded, counted in the end, and indexed.
template <class Index>
void place_at(const Buffers& b, uint32_t x, uint64_t chosen, Placement& out, std::vector<uint8_t>& placed,
              Index& index) {
    out.offset[x] = chosen;
    out.end = std::max(out.end, chosen + b.size[x]);  // no wrap: GapFinder::find() checked it
    placed[x] = 1;
    if (b.lower[x] < b.upper[x]) index.insert(x, chosen);
}

// Buffers per batch of the parallel pass: large enough that the threads'
// hand-offs cost little, small enough that few buffers of a batch conflict
// with an earlier one (uniform 10^6: about 5%).
constexpr size_t kBatch = 512;
// Traces smaller than this are placed on one thread: a pass takes
// milliseconds, less than starting threads is worth.
constexpr size_t kParallelFrom = 16384;

// Marks the buffers of `batch` that are live together with an earlier buffer
// of the batch: their gap depends on where that one lands.
void mark_dependent(const Buffers& b, const uint32_t* batch, size_t m, std::vector<uint32_t>& by_lower,
                    std::vector<uint32_t>& active, std::vector<uint8_t>& dependent) {
    dependent.assign(m, 0);
    by_lower.clear();
    for (uint32_t i = 0; i < m; ++i)
        if (b.lower[batch[i]] < b.upper[batch[i]]) by_lower.push_back(i);
    std::sort(by_lower.begin(), by_lower.end(),
              [&](uint32_t i, uint32_t j) { return b.lower[batch[i]] < b.lower[batch[j]]; });
    active.clear();  // batch positions whose interval may still overlap later starts
    for (uint32_t i : by_lower) {
        const uint64_t start = b.lower[batch[i]];
        size_t kept = 0;
        for (uint32_t j : active) {
            if (b.upper[batch[j]] <= start) continue;
            active[kept++] = j;
            dependent[std::max(i, j)] = 1;  // they overlap: the later one in the order waits
        }
        active.resize(kept);
        active.push_back(i);
    }
}

// The greedy pass on several threads, identical to the one-thread pass: in
// each batch, the gaps of the buffers that conflict with no earlier buffer of
// the batch are found at once against the placement so far, then all are
// placed in order, the others' gaps found then.
template <class Index>
void place_greedy_batched(const Buffers& b, const std::vector<uint32_t>& order, Fit fit, Index& index,
                          Placement& out, std::vector<uint8_t>& placed, WorkerPool& pool,
                          uint64_t give_up_above) {
    std::vector<GapFinder> finders;
    for (unsigned t = 0; t < pool.size(); ++t) finders.emplace_back(b);
    std::vector<uint64_t> early_offset(kBatch), early_work(kBatch);
    std::vector<uint8_t> dependent, overflow(kBatch);
    std::vector<uint32_t> by_lower, active, early;
    for (size_t start = 0; start < order.size(); start += kBatch) {
        const uint32_t* batch = order.data() + start;
        const size_t m = std::min(kBatch, order.size() - start);
        mark_dependent(b, batch, m, by_lower, active, dependent);
        early.clear();
        for (uint32_t i = 0; i < m; ++i)
            if (!dependent[i]) early.push_back(i);
        pool.run([&](unsigned t) {
            const size_t step = pool.size();
            for (size_t e = t; e < early.size(); e += step) {
                const uint32_t i = early[e];
                index.read_ahead([&](size_t k) { return batch[early[e + k * step]]; }, (early.size() - 1 - e) / step);
                early_work[i] = 0;
                overflow[i] = 0;
                try {
                    early_offset[i] = finders[t].find(index, out.offset, placed, batch[i], fit, early_work[i]);
                } catch (const PlacementOverflow&) {
                    overflow[i] = 1;  // raised when its turn comes, as one thread would
                }
            }
        });
        for (uint32_t i = 0; i < m; ++i) {
            const uint32_t x = batch[i];
            uint64_t chosen;
            if (dependent[i]) {
                chosen = finders[0].find(index, out.offset, placed, x, fit, out.work);
            } else {
                if (overflow[i]) throw PlacementOverflow(x);
                chosen = early_offset[i];
                out.work += early_work[i];
            }
            place_at(b, x, chosen, out, placed, index);
        }
        // Checked per batch: the batch's gaps were found (and charged) at once.
        if (out.end > give_up_above) {
            out.abandoned = true;
            return;
        }
    }
}

// From this many buffers a pass copies them in its order first (below).
constexpr size_t kInOrderFrom = 4096;

template <class Index>
Placement place_greedy_as_given(const Buffers& b, const std::vector<uint32_t>& order, Fit fit,
                                uint64_t give_up_above);

// Most buffers of the order far (a cache line or more) from the one before
// in the arrays: random traces by size. Orders that already walk the arrays
// in sequence (layered traces by size, then time) gain nothing from a copy.
bool scattered(const std::vector<uint32_t>& order) {
    size_t far = 0;
    for (size_t i = 1; i < order.size(); ++i) far += order[i] > order[i - 1] + 8 || order[i] + 8 < order[i - 1];
    return 2 * far > order.size();
}

Placement place_greedy_indexed(const Buffers& b, const std::vector<uint32_t>& order, Fit fit,
                               uint64_t give_up_above) {
    if (times_fit_32_bits(b)) return place_greedy_as_given<CompactPlacedIndex>(b, order, fit, give_up_above);
    return place_greedy_as_given<PlacedIndex>(b, order, fit, give_up_above);
}

}  // namespace

// A large pass reads each buffer's times, size and alignment and writes its
// offset in the order it places them: scattered over the buffers' arrays,
// each a cache miss at 10^6 buffers. So the buffers are copied in that order
// first (the index's rows are sorted by time either way) and the offsets
// copied back. Nothing the pass chooses depends on the buffers' numbering
// (spans are walked in offset order; equal offsets in any order give the
// same gaps), so the answer and the work are the same.
Placement place_greedy(const Buffers& b, const std::vector<uint32_t>& order, Fit fit, uint64_t give_up_above) {
    // Every buffer in the order (the passes' orders are permutations), so the
    // copy has the same count, and so the same batches and checks.
    if (order.size() < kInOrderFrom || order.size() != b.count() || b.has_partners() || !scattered(order))
        return place_greedy_indexed(b, order, fit, give_up_above);
    const size_t m = order.size();
    Buffers in_order;
    in_order.lower.resize(m);
    in_order.upper.resize(m);
    in_order.size.resize(m);
    in_order.alignment.resize(m);
    in_order.rank.resize(m);
    for (size_t i = 0; i < m; ++i) {
        const uint32_t x = order[i];
        in_order.lower[i] = b.lower[x];
        in_order.upper[i] = b.upper[x];
        in_order.size[i] = b.size[x];
        in_order.alignment[i] = b.alignment[x];
        in_order.rank[i] = b.rank[x];
    }
    std::vector<uint32_t> in_turn(m);
    std::iota(in_turn.begin(), in_turn.end(), 0u);
    Placement placed;
    try {
        placed = place_greedy_indexed(in_order, in_turn, fit, give_up_above);
    } catch (const PlacementOverflow& e) {
        throw PlacementOverflow(order[e.buffer]);
    }
    std::vector<uint64_t> offset(b.count(), 0);
    for (size_t i = 0; i < m; ++i) offset[order[i]] = placed.offset[i];
    placed.offset = std::move(offset);
    return placed;
}

namespace {

template <class Index>
Placement place_greedy_as_given(const Buffers& b, const std::vector<uint32_t>& order, Fit fit,
                                uint64_t give_up_above) {
    const size_t n = b.count();
    Placement out;
    out.offset.assign(n, 0);
    out.method = fit == Fit::Best ? "greedy_by_size" : "greedy_by_size_first_fit";
    std::vector<uint8_t> placed(n, 0);
    Index index(b);
    // Partners are placed buffers outside the index: one thread keeps their
    // checks simple.
    const bool in_batches = n >= kParallelFrom && !b.has_partners();
    const unsigned threads = in_batches ? placement_threads() : 1;
    if (threads > 1) {
        WorkerPool pool(threads);
        if (pool.size() > 1) {
            place_greedy_batched(b, order, fit, index, out, placed, pool, give_up_above);
            return out;
        }
    }
    // On one thread, a pass the threads would take in batches is given up
    // where they would, at a batch's end: the work charged, and so every
    // later choice a budget makes, must not depend on the machine's cores.
    const size_t check_every = in_batches ? kBatch : 1;
    GapFinder gaps(b);
    for (size_t i = 0; i < order.size(); ++i) {
        const uint32_t x = order[i];
        index.read_ahead([&](size_t k) { return order[i + k]; }, order.size() - 1 - i);
        place_at(b, x, gaps.find(index, out.offset, placed, x, fit, out.work), out, placed, index);
        if (((i + 1) % check_every == 0 || i + 1 == order.size()) && out.end > give_up_above) {
            out.abandoned = true;
            break;
        }
    }
    return out;
}

}  // namespace

}  // namespace emel::memory
