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

std::vector<uint32_t> order_by_size(const Buffers& b) {
    // The keys sit beside each buffer's index, so a million-buffer sort
    // compares contiguous records, not four scattered arrays.
    struct Key { uint64_t size, lower, length; uint32_t rank, x; };
    std::vector<Key> keys(b.count());
    for (uint32_t x = 0; x < b.count(); ++x)
        keys[x] = Key{b.size[x], b.lower[x], b.upper[x] - b.lower[x], b.rank[x], x};
    std::sort(keys.begin(), keys.end(), [](const Key& p, const Key& q) {
        // Among equal sizes, earlier first: equal-size buffers then stack in
        // time order and leave fewer holes (measured on the idealloc traces:
        // +0.76% over the bound on pangu_2.6B where longest-first gave +3.3%).
        if (p.size != q.size) return p.size > q.size;
        if (p.lower != q.lower) return p.lower < q.lower;
        if (p.length != q.length) return p.length > q.length;
        return p.rank < q.rank;
    });
    std::vector<uint32_t> order(b.count());
    for (size_t k = 0; k < keys.size(); ++k) order[k] = keys[k].x;
    return order;
}

std::vector<uint32_t> order_by_lifetime(const Buffers& b) {
    std::vector<uint32_t> order(b.count());
    std::iota(order.begin(), order.end(), 0u);
    std::sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
        const uint64_t lx = b.upper[x] - b.lower[x], ly = b.upper[y] - b.lower[y];
        if (lx != ly) return lx > ly;
        if (b.size[x] != b.size[y]) return b.size[x] > b.size[y];
        if (b.lower[x] != b.lower[y]) return b.lower[x] < b.lower[y];
        return b.rank[x] < b.rank[y];
    });
    return order;
}

std::vector<uint32_t> order_by_conflict_size(const Buffers& b) {
    // A buffer's conflict degree: the buffers live with it at some step,
    // counted with two sorted arrays (those that start before it ends, less
    // those that end before it starts, less itself).
    const size_t n = b.count();
    std::vector<uint64_t> lowers, uppers;
    lowers.reserve(n);
    uppers.reserve(n);
    for (size_t x = 0; x < n; ++x) {
        if (b.lower[x] >= b.upper[x]) continue;
        lowers.push_back(b.lower[x]);
        uppers.push_back(b.upper[x]);
    }
    std::sort(lowers.begin(), lowers.end());
    std::sort(uppers.begin(), uppers.end());
    std::vector<unsigned __int128> key(n, 0);  // degree x size; never-live rows 0
    for (size_t x = 0; x < n; ++x) {
        if (b.lower[x] >= b.upper[x]) continue;
        const size_t started = std::lower_bound(lowers.begin(), lowers.end(), b.upper[x]) - lowers.begin();
        const size_t ended = std::upper_bound(uppers.begin(), uppers.end(), b.lower[x]) - uppers.begin();
        key[x] = static_cast<unsigned __int128>(started - ended - 1) * b.size[x];
    }
    std::vector<uint32_t> order(n);
    std::iota(order.begin(), order.end(), 0u);
    std::sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
        if (key[x] != key[y]) return key[x] > key[y];
        if (b.size[x] != b.size[y]) return b.size[x] > b.size[y];
        if (b.lower[x] != b.lower[y]) return b.lower[x] < b.lower[y];
        return b.rank[x] < b.rank[y];
    });
    return order;
}

std::vector<uint32_t> order_by_live_peak(const Buffers& b) {
    // Live bytes rise only where a buffer starts, so the peak over a
    // buffer's lifetime is the largest of the totals at the starts inside it:
    // the totals at the distinct starts, by a sweep, then a range maximum
    // per buffer (a bottom-up segment tree: 2 words per start, not the
    // sparse table's log n).
    const size_t n = b.count();
    std::vector<uint64_t> starts;
    starts.reserve(n);
    for (size_t x = 0; x < n; ++x)
        if (b.lower[x] < b.upper[x]) starts.push_back(b.lower[x]);
    std::sort(starts.begin(), starts.end());
    starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
    const size_t m = starts.size();
    // Each live buffer's starts [first, after): its own, up to the first
    // start at or after its end (where it is live no more).
    std::vector<uint32_t> first(n, 0), after(n, 0);
    for (size_t x = 0; x < n; ++x) {
        if (b.lower[x] >= b.upper[x]) continue;
        first[x] = static_cast<uint32_t>(std::lower_bound(starts.begin(), starts.end(), b.lower[x]) - starts.begin());
        after[x] = static_cast<uint32_t>(std::lower_bound(starts.begin(), starts.end(), b.upper[x]) - starts.begin());
    }
    // Bytes starting at, and ending at or before, each distinct start.
    std::vector<uint64_t> tree(2 * std::max<size_t>(m, 1), 0);
    {
        std::vector<unsigned __int128> delta(m + 1, 0), gone(m + 1, 0);
        for (size_t x = 0; x < n; ++x) {
            if (b.lower[x] >= b.upper[x]) continue;
            delta[first[x]] += b.size[x];
            gone[after[x]] += b.size[x];
        }
        unsigned __int128 live = 0;
        for (size_t i = 0; i < m; ++i) {
            live += delta[i];
            live -= gone[i];
            tree[m + i] = live > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(live);
        }
    }
    for (size_t i = m; i-- > 1;) tree[i] = std::max(tree[2 * i], tree[2 * i + 1]);
    std::vector<uint64_t> key(n, 0);  // never-live rows 0
    for (size_t x = 0; x < n; ++x) {
        if (b.lower[x] >= b.upper[x]) continue;
        size_t l = first[x] + m, r = after[x] + m;
        uint64_t best = 0;
        for (; l < r; l >>= 1, r >>= 1) {
            if (l & 1) best = std::max(best, tree[l++]);
            if (r & 1) best = std::max(best, tree[--r]);
        }
        key[x] = best;
    }
    std::vector<uint32_t> order(n);
    std::iota(order.begin(), order.end(), 0u);
    std::sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
        if (key[x] != key[y]) return key[x] > key[y];
        const uint64_t lx = b.upper[x] - b.lower[x], ly = b.upper[y] - b.lower[y];
        if (lx != ly) return lx > ly;
        if (b.size[x] != b.size[y]) return b.size[x] > b.size[y];
        return b.rank[x] < b.rank[y];
    });
    return order;
}

namespace {

// Buffer x lands at `chosen`: recorded, counted in the end, and indexed.
void place_at(const Buffers& b, uint32_t x, uint64_t chosen, Placement& out, std::vector<uint8_t>& placed,
              PlacedIndex& index) {
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
void place_greedy_batched(const Buffers& b, const std::vector<uint32_t>& order, Fit fit, PlacedIndex& index,
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

}  // namespace

Placement place_greedy(const Buffers& b, const std::vector<uint32_t>& order, Fit fit, uint64_t give_up_above) {
    const size_t n = b.count();
    Placement out;
    out.offset.assign(n, 0);
    out.method = fit == Fit::Best ? "greedy_by_size" : "greedy_by_size_first_fit";
    std::vector<uint8_t> placed(n, 0);
    PlacedIndex index(b);
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

uint64_t buffers_lower_bound(const Buffers& b) {
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
    // (10^6 rows: 0.16 s for the sort below). The sum wraps harmlessly: every
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
