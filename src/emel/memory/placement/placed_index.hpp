// Placed buffers, searchable by interval, and the gap choice of greedy
// placement (docs/strategies.md §2), used by greedy_by_size.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "emel/memory/core/checked_math.hpp"
#include "emel/memory/placement/placement.hpp"
#include "emel/memory/placement/worker_pool.hpp"

namespace emel::memory {

// A placed buffer's bytes: [offset, end). Spans with equal offset and end are
// interchangeable in the gap search, so no tie-break beyond them is needed.
// `Offset` is uint32_t where the index holding them keeps 32-bit offsets
// (CompactPlacedIndex): half the bytes to gather, sort and walk.
template <class Offset>
struct BasicSpan {
    Offset offset, end;
    // Left uninitialised on purpose: a query sizes its buffer for every
    // candidate row and then writes the ones it keeps.
    BasicSpan() noexcept {}  // NOLINT
    BasicSpan(Offset offset_, Offset end_) noexcept : offset(offset_), end(end_) {}
};
using Span = BasicSpan<uint64_t>;

// A placement's end passed what an index with 32-bit offsets holds: the
// pass starts again with 64-bit ones (greedy_by_size.cpp).
struct OffsetsTooWide {};

using IndexRuns = std::vector<std::pair<size_t, size_t>>;

// Placed buffers by interval. Live buffers are grouped in length classes
// (lifetimes 1, 2, 3-4, 5-8, ..., doubling) and sorted by `lower` within a
// class. A conflict with [lo, hi) in a class whose longest lifetime is L has
// its `lower` in (lo - L, hi), one run of sorted positions, found through a
// table of time buckets (about kRowsPerBucket rows each). A bitmap of placed
// positions, small enough to stay in cache, says which rows of the run to
// read, so a query reads the rows of placed buffers only: memory, not
// comparisons, is what a pass over a million buffers waits on. Each row read
// is filtered exactly (upper > lo, lower < hi). An insert is O(1).
//
// `Time` is how a row keeps its lower and upper, `Offset` its offset and
// end: uint32_t where they fit, which makes a row 24 bytes (32-bit times,
// TimesCompactPlacedIndex) or 16 (both, CompactPlacedIndex) instead of 32.
// A pass over 10^6 buffers waits on the rows it reads, so fewer bytes are
// fewer cache lines fetched. Offsets are not known before the pass: a
// 32-bit index refuses an end past 2^32-1 (OffsetsTooWide, from insert()).
template <class Time, class Offset>
class BasicPlacedIndex {
  public:
    using Span = BasicSpan<Offset>;

    // `pool` (optional) fills the rows on its threads.
    explicit BasicPlacedIndex(const Buffers& b, WorkerPool* pool = nullptr) : b_(b) {
        const size_t n = b.count();
        // Live buffers by (length class, lower), sorted as contiguous records.
        std::vector<Key> keys;
        keys.reserve(n);
        for (uint32_t x = 0; x < n; ++x) {
            if (b.lower[x] >= b.upper[x]) continue;
            const uint64_t length = b.upper[x] - b.lower[x];
            const uint32_t c = length_class(length);
            keys.push_back(Key{b.lower[x], c, x});
        }
        sort_by_class_and_lower(keys);
        position_.assign(n, kNotLive);
        row_.resize(keys.size());
        placed_.assign((keys.size() + 63) / 64, 0);
        in_ranges(pool, keys.size(), [&](size_t from, size_t to) {
            for (size_t k = from; k < to; ++k) {
                const uint32_t x = keys[k].x;
                position_[x] = static_cast<uint32_t>(k);
                row_[k] = Row{static_cast<Time>(b.lower[x]), static_cast<Time>(b.upper[x]), Span{0, 0}};
            }
        });
        for (size_t k = 0; k < keys.size(); ++k) {
            const unsigned c = keys[k].length_class;
            if (classes_.empty() || classes_.back().length_class != c)
                classes_.push_back(Class{c, k, k, 0, 0, 0, 0, 0});
            Class& cls = classes_.back();
            cls.end = k + 1;
            cls.longest = std::max<uint64_t>(cls.longest, row_[k].upper - row_[k].lower);
        }
        for (Class& cls : classes_) build_buckets(cls);
    }

    // Returns the work it adds to the pass: none (an insert is O(1)).
    uint64_t insert(uint32_t x, uint64_t offset) {
        // Checked for never-live buffers too: a partner's offset joins the
        // spans of a later query (GapFinder::find()).
        const uint64_t end = offset + b_.size[x];  // no wrap: GapFinder::find() checked it
        if (end > std::numeric_limits<Offset>::max()) throw OffsetsTooWide{};
        const uint32_t k = position_[x];
        if (k == kNotLive) return 0;
        row_[k].span = Span{static_cast<Offset>(offset), static_cast<Offset>(end)};
        placed_[k / 64] |= uint64_t{1} << (k % 64);
        return 0;
    }

    // A pass over a million buffers waits on scattered reads more than on
    // anything else, so each query's first reads are started a few queries
    // ahead, in the order they depend on each other (prefetch_* below).
    // `ahead(k)` is the buffer queried k queries after this one; `left` how
    // many queries there are after it.
    template <class Ahead>
    void read_ahead(Ahead ahead, size_t left) const {
        if (left >= 3) prefetch_times(ahead(3));
        if (left >= 2) prefetch_buckets(ahead(2));
        if (left >= 1) prefetch_rows(ahead(1));
    }

    // A query's runs of sorted positions, one per class; each querying thread
    // has its own.
    using Runs = IndexRuns;

    // Appends the span of every placed buffer with lower < hi and upper > lo;
    // returns the work it adds to the spans' charge (none: the caller
    // charges each span). Safe to call from several threads at once while
    // nothing is inserted.
    uint64_t collect(uint64_t lo, uint64_t hi, std::vector<Span>& out, Runs& run) const {
        run.resize(classes_.size());
        // Each class's run, widened to whole buckets: the rows a bucket adds
        // fail the exact filter below (lower <= lo - longest means upper <= lo).
        size_t most = 0;
        for (size_t c = 0; c < classes_.size(); ++c) {
            const Class& cls = classes_[c];
            run[c] = run_of(cls, lo, hi);
            if (run[c].first < run[c].second) {
                __builtin_prefetch(&row_[run[c].first]);
                most += run[c].second - run[c].first;
            }
        }
        size_t count = out.size();
        out.resize(count + most);
        Span* to_span = out.data();
        for (const auto& [from, to] : run) {
            if (from >= to) continue;
            const size_t last_word = (to - 1) / 64;
            for (size_t w = from / 64; w <= last_word; ++w) {
                uint64_t bits = placed_[w];
                if (w == from / 64) bits &= ~uint64_t{0} << (from % 64);
                if (w == last_word && to % 64) bits &= ~(~uint64_t{0} << (to % 64));
                // Write every placed row's span, keep those that conflict (no
                // branch to mispredict).
                for (; bits; bits &= bits - 1) {
                    const Row& r = row_[w * 64 + static_cast<size_t>(__builtin_ctzll(bits))];
                    to_span[count] = r.span;
                    count += (r.upper > lo) & (r.lower < hi);
                }
            }
        }
        out.resize(count);
        return 0;
    }

    // How many rows collect() would look at for [lo, hi), placed or not
    // (its runs, widened to whole buckets): at least as many as it keeps.
    size_t candidates(uint64_t lo, uint64_t hi) const {
        size_t most = 0;
        for (const Class& cls : classes_) {
            const auto [from, to] = run_of(cls, lo, hi);
            most += to > from ? to - from : 0;
        }
        return most;
    }

  private:
    static constexpr uint32_t kNotLive = UINT32_MAX;
    static constexpr size_t kRowsPerBucket = 2;
    static constexpr size_t kCrowded = 16;  // rows in a bucket worth a search
    static constexpr size_t kPrefetchRows = 128;
    struct Row { Time lower, upper; Span span; };  // span: once placed
    struct Class {
        unsigned length_class;
        size_t begin, end;            // sorted positions
        uint64_t longest;             // its longest lifetime
        // Time buckets: bucket i holds lowers in [first_lower + (i << shift), ...),
        // and its first sorted position is bucket_[buckets_begin + i].
        uint64_t first_lower;
        unsigned shift;
        uint64_t buckets;
        size_t buckets_begin;
    };

    struct Key { uint64_t lower; uint32_t length_class, x; };

    // Keys by (length class, lower); the order among equal keys is free (a
    // query's spans are sorted by offset). Lowers no more spread out than the
    // keys (a graph's steps, most traces) are sorted by counting, in linear
    // time, several times faster than std::sort at 10^6 buffers.
    static void sort_by_class_and_lower(std::vector<Key>& keys) {
        uint64_t first = UINT64_MAX, last = 0;
        uint32_t classes = 0;
        for (const Key& k : keys) {
            first = std::min(first, k.lower);
            last = std::max(last, k.lower);
            classes = std::max(classes, k.length_class + 1);
        }
        if (keys.size() < 2 || !times_fit_a_table(last - first, keys.size())) {
            std::sort(keys.begin(), keys.end(), [](const Key& p, const Key& q) {
                return p.length_class != q.length_class ? p.length_class < q.length_class : p.lower < q.lower;
            });
            return;
        }
        // By lower, then (stable) by class.
        std::vector<uint32_t> start(last - first + 2, 0);
        for (const Key& k : keys) ++start[k.lower - first + 1];
        for (size_t i = 1; i < start.size(); ++i) start[i] += start[i - 1];
        std::vector<Key> by_lower(keys.size());
        for (const Key& k : keys) by_lower[start[k.lower - first]++] = k;
        std::vector<size_t> class_start(classes + 1, 0);
        for (const Key& k : by_lower) ++class_start[k.length_class + 1];
        for (size_t c = 1; c <= classes; ++c) class_start[c] += class_start[c - 1];
        for (const Key& k : by_lower) keys[class_start[k.length_class]++] = k;
    }

    void build_buckets(Class& cls) {
        const size_t rows = cls.end - cls.begin;
        const uint64_t spread = row_[cls.end - 1].lower - row_[cls.begin].lower;
        const uint64_t wanted = std::max<uint64_t>(1, rows / kRowsPerBucket);
        unsigned shift = 0;
        while ((spread >> shift) + 1 > wanted) ++shift;
        cls.first_lower = row_[cls.begin].lower;
        cls.shift = shift;
        cls.buckets = (spread >> shift) + 1;
        cls.buckets_begin = bucket_.size();
        size_t k = cls.begin;
        for (uint64_t i = 0; i < cls.buckets; ++i) {
            while (((row_[k].lower - cls.first_lower) >> shift) < i) ++k;  // the last row is in the last bucket
            bucket_.push_back(static_cast<uint32_t>(k));
        }
        bucket_.push_back(static_cast<uint32_t>(cls.end));
    }

    // read_ahead()'s three steps: the buffer's times, then each class's
    // bucket entries around them, then each class's run (its first
    // kPrefetchRows rows: enough for the runs of random traces, few next to
    // the dense runs that stay in cache anyway).
    void prefetch_times(uint32_t x) const {
        __builtin_prefetch(&b_.lower[x]);
        __builtin_prefetch(&b_.upper[x]);
        __builtin_prefetch(&b_.size[x]);
        __builtin_prefetch(&b_.alignment[x]);
    }
    void prefetch_buckets(uint32_t x) const {
        const uint64_t lo = b_.lower[x], hi = b_.upper[x];
        if (lo >= hi) return;
        for (const Class& cls : classes_) {
            if (const uint32_t* entry = bucket_entry(cls, earliest_lower(cls, lo))) __builtin_prefetch(entry);
            if (const uint32_t* entry = bucket_entry(cls, hi)) __builtin_prefetch(entry);
        }
    }
    void prefetch_rows(uint32_t x) const {
        const uint64_t lo = b_.lower[x], hi = b_.upper[x];
        if (lo >= hi) return;
        for (const Class& cls : classes_) {
            const auto [from, run_end] = run_of(cls, lo, hi);
            const size_t to = std::min(run_end, from + kPrefetchRows);
            if (from >= to) continue;
            const char* line = reinterpret_cast<const char*>(&row_[from]);
            const char* last = reinterpret_cast<const char*>(&row_[to]);
            for (; line < last; line += 64) __builtin_prefetch(line);
            __builtin_prefetch(&placed_[from / 64]);
        }
    }

    // The sorted positions of `cls` a query of [lo, hi) looks at: from a
    // bucket at or before the first row that can be live after `lo`, to one
    // at or after the last that starts before `hi`.
    std::pair<size_t, size_t> run_of(const Class& cls, uint64_t lo, uint64_t hi) const {
        return {bucket_start(cls, earliest_lower(cls, lo), false), bucket_start(cls, hi, true)};
    }

    // The lowest `lower` a row of `cls` live after `lo` can have.
    static uint64_t earliest_lower(const Class& cls, uint64_t lo) {
        return lo >= cls.longest ? lo - cls.longest + 1 : 0;
    }

    // The bucket table entry of `cls` for time t; null before its first
    // bucket or past its last.
    const uint32_t* bucket_entry(const Class& cls, uint64_t t) const {
        if (t <= cls.first_lower) return nullptr;
        const uint64_t i = (t - cls.first_lower) >> cls.shift;
        return i < cls.buckets ? &bucket_[cls.buckets_begin + i] : nullptr;
    }

    // A sorted position of `cls` at or before the first row whose lower is
    // >= t (`past`: at or after it), within a bucket's rows. Lopsided time
    // values can crowd a bucket, which is then searched exactly.
    size_t bucket_start(const Class& cls, uint64_t t, bool past) const {
        if (t <= cls.first_lower) return cls.begin;
        const uint32_t* bucket = bucket_entry(cls, t);
        if (!bucket) return cls.end;
        const size_t from = bucket[0], to = bucket[1];
        if (to - from <= kCrowded) return past ? to : from;
        const auto first = row_.begin() + static_cast<std::ptrdiff_t>(from);
        const auto last = row_.begin() + static_cast<std::ptrdiff_t>(to);
        return from + static_cast<size_t>(
                          std::partition_point(first, last, [t](const Row& r) { return r.lower < t; }) - first);
    }

    const Buffers& b_;
    std::vector<uint32_t> position_;  // buffer -> sorted position (kNotLive: never live)
    std::vector<Row> row_;            // by sorted position
    std::vector<uint64_t> placed_;    // bit per sorted position
    std::vector<Class> classes_;
    std::vector<uint32_t> bucket_;    // every class's bucket starts, then its end
};

using PlacedIndex = BasicPlacedIndex<uint64_t, uint64_t>;
using TimesCompactPlacedIndex = BasicPlacedIndex<uint32_t, uint64_t>;
using CompactPlacedIndex = BasicPlacedIndex<uint32_t, uint32_t>;

// Every buffer's times fit in 32 bits: a 32-bit-time index serves.
inline bool times_fit_32_bits(const Buffers& b) {
    uint64_t latest = 0;
    for (size_t x = 0; x < b.count(); ++x) latest = std::max(latest, std::max(b.lower[x], b.upper[x]));
    return latest <= UINT32_MAX;
}

// Sorts spans by offset. A zero-size buffer can land between spans that start
// at one offset, so for it ties are broken by end (spans equal in both are
// interchangeable). For a buffer that holds bytes the order among spans of one
// offset does not matter: only the first of them is ever a candidate gap's
// upper edge, and the cursor after them is their highest end in any order. So
// large inputs are spread into about 2k buckets by the offset's leading bits
// (one counting pass) and each bucket is sorted on its own: linear for offsets
// spread over a range, k log k at worst.
template <class Span>
class BasicSpanSorter {
  public:
    void sort(std::vector<Span>& spans, bool full_order) {
        const size_t k = spans.size();
        if (full_order) {
            std::sort(spans.begin(), spans.end(), [](const Span& p, const Span& q) {
                return p.offset != q.offset ? p.offset < q.offset : p.end < q.end;
            });
            return;
        }
        if (k < kSpreadFrom) {
            sort_by_offset(spans.begin(), spans.end());
            return;
        }
        uint64_t low = UINT64_MAX, high = 0;
        for (const Span& s : spans) {
            low = std::min<uint64_t>(low, s.offset);
            high = std::max<uint64_t>(high, s.offset);
        }
        if (low == high) return;
        const unsigned range_bits = 64 - static_cast<unsigned>(__builtin_clzll(high - low));
        // About two buckets per span: most hold none or one.
        const unsigned bucket_bits = 65 - static_cast<unsigned>(__builtin_clzll(k - 1));
        const unsigned shift = range_bits > bucket_bits ? range_bits - bucket_bits : 0;
        const size_t buckets = size_t{1} << (range_bits - shift);
        edge_.assign(buckets + 1, 0);
        uint32_t fullest = 0;
        for (const Span& s : spans) fullest = std::max(fullest, ++edge_[(s.offset - low) >> shift]);
        for (size_t i = 1; i <= buckets; ++i) edge_[i] += edge_[i - 1];  // bucket ends
        scratch_.resize(k);
        for (const Span& s : spans) scratch_[--edge_[(s.offset - low) >> shift]] = s;
        // Offsets bunched in a few buckets (a few huge spans stretch the
        // range) would make the insertion sort below quadratic: such buckets
        // are sorted on their own first.
        for (size_t i = 0; fullest > kInsertionAtMost && i < buckets; ++i)
            if (edge_[i + 1] - edge_[i] > kInsertionAtMost)
                spread_sort(scratch_.begin() + edge_[i], scratch_.begin() + edge_[i + 1], 1);
        // In bucket order, every span is already past all smaller buckets:
        // an insertion sort only moves spans within their bucket.
        sort_by_offset(scratch_.begin(), scratch_.end(), true);
        spans.swap(scratch_);
    }

  private:
    static constexpr size_t kSpreadFrom = 32;
    // Runs this short are insertion-sorted; a bucket holding more is crowded.
    static constexpr uint32_t kInsertionAtMost = 16;
    using Iter = typename std::vector<Span>::iterator;
    // A crowded bucket spread again over buckets of its own offsets' range
    // (dense traces crowd thousands of spans into a few: Y_1), a few levels
    // deep, then sorted.
    static void spread_sort(Iter first, Iter last, int depth) {
        const size_t k = static_cast<size_t>(last - first);
        if (k <= kInsertionAtMost || depth > kSpreadDepth) {
            sort_by_offset(first, last);
            return;
        }
        uint64_t low = UINT64_MAX, high = 0;
        for (Iter i = first; i < last; ++i) {
            low = std::min<uint64_t>(low, i->offset);
            high = std::max<uint64_t>(high, i->offset);
        }
        if (low == high) return;
        const unsigned range_bits = 64 - static_cast<unsigned>(__builtin_clzll(high - low));
        const unsigned bucket_bits = 65 - static_cast<unsigned>(__builtin_clzll(k - 1));
        const unsigned shift = range_bits > bucket_bits ? range_bits - bucket_bits : 0;
        const size_t buckets = size_t{1} << (range_bits - shift);
        std::vector<uint32_t> edge(buckets + 1, 0);
        for (Iter i = first; i < last; ++i) ++edge[(i->offset - low) >> shift];
        for (size_t i = 1; i <= buckets; ++i) edge[i] += edge[i - 1];
        std::vector<Span> spread(k);
        for (Iter i = first; i < last; ++i) spread[--edge[(i->offset - low) >> shift]] = *i;
        for (size_t i = 0; i < buckets; ++i)
            if (edge[i + 1] - edge[i] > kInsertionAtMost)
                spread_sort(spread.begin() + edge[i], spread.begin() + edge[i + 1], depth + 1);
        sort_by_offset(spread.begin(), spread.end(), true);
        std::copy(spread.begin(), spread.end(), first);
    }
    static constexpr int kSpreadDepth = 3;
    static void sort_by_offset(Iter first, Iter last, bool nearly_sorted = false) {
        if (nearly_sorted || last - first <= kInsertionAtMost) {  // insertion sort
            for (Iter i = first + (first != last); i < last; ++i) {
                const Span v = *i;
                Iter j = i;
                for (; j > first && (j - 1)->offset > v.offset; --j) *j = *(j - 1);
                *j = v;
            }
            return;
        }
        std::sort(first, last, [](const Span& p, const Span& q) { return p.offset < q.offset; });
    }
    std::vector<uint32_t> edge_;
    std::vector<Span> scratch_;
};
using SpanSorter = BasicSpanSorter<Span>;

// Indexes whose queries can lend what they read instead of copying it
// (StabIndex::collect_lending): a sorted union of spans, or a part of a
// crowd, its members walked by offset (the index's LentMembers).
template <class Index, class = void>
struct LendsUnions : std::false_type {};
template <class Index>
struct LendsUnions<Index, std::void_t<decltype(&Index::collect_lending)>> : std::true_type {};
struct NoLentPart {
    size_t count = 0;
};
template <class Index, class = void>
struct LentPartOf {
    using type = NoLentPart;
};
template <class Index>
struct LentPartOf<Index, std::void_t<typename Index::LentMembers>> {
    using type = typename Index::LentMembers;
};

// Where greedy placement puts buffer x among the placed buffers of `index`
// and its placed must_not_alias partners (docs/strategies.md §2): walk the
// conflicting buffers in offset order (SpanSorter says which ties matter), keeping the
// highest end seen; best fit takes the fitting gap with the least room, first
// fit the lowest one; with no fitting gap, on top. `work` is charged for the
// conflicts examined and sorted. Throws PlacementOverflow past 2^64-1.
template <class Span>
class BasicGapFinder {
  public:
    explicit BasicGapFinder(const Buffers& b) : b_(b) {}

    template <class Index>
    uint64_t find(const Index& index, const std::vector<uint64_t>& offset,
                  const std::vector<uint8_t>& placed, uint32_t x, Fit fit, uint64_t& work) {
        spans_.clear();
        const std::vector<Span>* lent = nullptr;  // sorted spans lent by the index, beside spans_
        typename LentPartOf<Index>::type part{};  // or part of a crowd, lent (never both)
        size_t sorted_from = 0, sorted_to = 0;    // spans_ is sorted in [sorted_from, sorted_to)
        if (b_.lower[x] < b_.upper[x]) {
            if constexpr (LendsUnions<Index>::value) {
                work += index.collect_lending(b_.lower[x], b_.upper[x], spans_, runs_, lent, part, sorted_from);
                sorted_to = spans_.size();
            } else {
                work += index.collect(b_.lower[x], b_.upper[x], spans_, runs_);
            }
        }
        if (b_.has_partners())
            for (uint32_t q : b_.partners[x])
                if (placed[q] && !b_.live_together(x, q))
                    spans_.push_back(Span{static_cast<decltype(Span::offset)>(offset[q]),
                                          static_cast<decltype(Span::offset)>(offset[q] + b_.size[q])});
        // Charge the sort too, so huge traces with thousands of conflicts per
        // buffer cost what they really take. The charge is the one of the
        // earlier sort (k log k below 256 conflicts, linear above), kept so
        // that a budget buys the same passes as before; kWorkUnitsPerMs is
        // what was recalibrated to the faster pass.
        const uint64_t k = spans_.size() + (lent ? lent->size() : part.count);
        work += kGreedyUnitsPerStep * (1 + k) +
                (k >= 256 ? 3 * k : kGreedyUnitsPerStep * k * (64 - __builtin_clzll(k | 1)) / 4);
        Walk walk{b_.alignment[x], b_.size[x], fit};
        if (lent && !lent->empty()) {
            // The same spans as if copied, met in the same offset order:
            // the rest sorted, then both walked in step.
            sort_spans(sorted_from, sorted_to, b_.size[x] == 0);
            walk.in_step(spans_.data(), spans_.data() + spans_.size(), lent->data(), lent->data() + lent->size());
        } else if (part.count > 0) {
            if constexpr (LendsUnions<Index>::value) {
                sort_spans(sorted_from, sorted_to, b_.size[x] == 0);
                walk_in_step_with_part(walk, part);
            }
        } else if (sorted_from == 0 && sorted_to == spans_.size() && b_.size[x] > 0) {
            walk.over(spans_.data(), spans_.data() + k);  // in order already (collect_lending)
        } else if (b_.size[x] > 0 && k >= kSummariesFrom) {
            walk_summaries(spans_.data(), spans_.data() + k, walk, 0);
        } else {
            // A zero-size buffer can land between spans that start at one
            // offset: it needs their full order.
            sorter_.sort(spans_, b_.size[x] == 0);
            walk.over(spans_.data(), spans_.data() + k);
        }
        uint64_t chosen = walk.chosen;
        const uint64_t size = b_.size[x];
        if (!walk.found) {
            auto top = checked_align_up(walk.cursor, walk.alignment);
            if (!top) throw PlacementOverflow(x);
            chosen = *top;
        }
        if (!checked_add(chosen, size)) throw PlacementOverflow(x);
        return chosen;
    }

  private:
    // The gap choice over spans met in offset order: a gap is the room
    // between the highest end so far (the cursor) and the next span's offset.
    struct Walk {
        uint64_t alignment, size;
        Fit fit;
        uint64_t cursor = 0, best_gap = UINT64_MAX, chosen = 0;
        bool found = false;
        bool stopped = false;  // the choice is made: first fit's gap, or one of the buffer's size

        void over(const Span* q, const Span* last) {
            for (; q < last; ++q)
                if (meet(*q)) return;
        }
        // Two runs of spans, each sorted by offset, met in offset order.
        void in_step(const Span* p, const Span* p_last, const Span* q, const Span* q_last) {
            while (p < p_last && q < q_last)
                if (meet(p->offset <= q->offset ? *p++ : *q++)) return;
            if (p < p_last) over(p, p_last);
            else over(q, q_last);
        }
        // The gap below span q; true once the choice is made (stopped).
        bool meet(const Span& q) {
            // Aligning only raises the cursor: a gap narrower than the
            // buffer from the cursor (most spans of a dense walk) fits
            // nothing, and its alignment need not be looked at.
            if (q.offset < cursor || q.offset - cursor < size) {
                cursor = std::max<uint64_t>(cursor, q.end);
                return false;
            }
            auto aligned = checked_align_up(cursor, alignment);
            if (aligned && *aligned <= q.offset && size <= q.offset - *aligned) {
                const uint64_t gap = q.offset - cursor;
                if (gap < best_gap) {
                    best_gap = gap;
                    chosen = *aligned;
                    found = true;
                    // First fit takes the first; no gap is smaller than
                    // the buffer, and ties keep the earlier.
                    if (fit == Fit::First || gap == size) {
                        stopped = true;
                        return true;
                    }
                }
            }
            cursor = std::max<uint64_t>(cursor, q.end);
            return false;
        }
    };

    // spans_ in offset order, of which [sorted_from, sorted_to) is already:
    // the rest sorted and merged with it (spans of one offset may meet in
    // any order, but for a zero-size buffer: sorted whole).
    void sort_spans(size_t sorted_from, size_t sorted_to, bool zero_size) {
        if (sorted_from == sorted_to || sorted_to != spans_.size() || zero_size) {
            sorter_.sort(spans_, zero_size);
            return;
        }
        if (sorted_from == 0) return;
        head_.assign(spans_.begin(), spans_.begin() + static_cast<std::ptrdiff_t>(sorted_from));
        sorter_.sort(head_, false);
        merged_.resize(spans_.size());
        std::merge(head_.begin(), head_.end(), spans_.begin() + static_cast<std::ptrdiff_t>(sorted_from),
                   spans_.end(), merged_.begin(), [](const Span& p, const Span& q) { return p.offset < q.offset; });
        spans_.swap(merged_);
    }

    // spans_ (sorted) in step with a lent part of a crowd: its placed
    // members by offset, those whose place in the lent order is below
    // `part.below`. Each block's members in the part are picked first
    // without a branch (about half of them, in no pattern), then met.
    template <class Part>
    void walk_in_step_with_part(Walk& walk, const Part& part) {
        const Span* p = spans_.data();
        const Span* const p_last = p + spans_.size();
        for (const auto& block : part.members->blocks()) {
            const size_t n = block.size();
            picked_.resize(n);
            size_t k = 0;
            if (part.by_upper) {
                for (size_t i = 0; i < n; ++i) {
                    picked_[k] = static_cast<uint32_t>(i);
                    k += block[i].at_upper < part.below;
                }
            } else {
                for (size_t i = 0; i < n; ++i) {
                    picked_[k] = static_cast<uint32_t>(i);
                    k += block[i].at_lower < part.below;
                }
            }
            for (size_t j = 0; j < k; ++j) {
                const auto& e = block[picked_[j]];
                for (; p < p_last && p->offset <= e.offset; ++p)
                    if (walk.meet(*p)) return;
                if (walk.meet(Span{e.offset, e.end})) return;
            }
        }
        walk.over(p, p_last);
    }

    // Many conflicts (dense traces: thousands per buffer on Y_1), a buffer
    // that holds bytes: the spans are summed up in offset buckets (how many,
    // the highest offset, the highest end) instead of sorted. A bucket whose
    // highest offset is too close above the cursor it is entered with for
    // the buffer to fit has no gap it fits in (its gaps lie between the two)
    // and only moves the cursor to its highest end, whatever its spans'
    // order; only the other buckets are gathered and walked, in offset order,
    // each summed up again over its own offsets (dense traces stack many
    // spans at a few offsets). The fitting gaps met, in order, are the
    // sorted walk's, so the choice is the same. `walk.cursor` is the cursor
    // the spans are entered with; on return, past them all (unless stopped).
    void walk_summaries(Span* first, Span* last, Walk& walk, unsigned depth) {
        const size_t k = static_cast<size_t>(last - first);
        if (k <= kInsertionAtMost || depth == kSummaryDepth) {
            if (k <= kInsertionAtMost) {
                for (Span* p = first + (first != last); p < last; ++p) {
                    const Span v = *p;
                    Span* j = p;
                    for (; j > first && (j - 1)->offset > v.offset; --j) *j = *(j - 1);
                    *j = v;
                }
            } else {
                std::sort(first, last, [](const Span& p, const Span& q) { return p.offset < q.offset; });
            }
            walk.over(first, last);
            return;
        }
        uint64_t low = UINT64_MAX, high = 0;
        for (const Span* s = first; s < last; ++s) {
            low = std::min<uint64_t>(low, s->offset);
            high = std::max<uint64_t>(high, s->offset);
        }
        if (low == high) {  // one offset: any order is the sorted one
            walk.over(first, last);
            return;
        }
        Level& level = levels_[depth];
        const unsigned range_bits = 64 - static_cast<unsigned>(__builtin_clzll(high - low));
        const unsigned bucket_bits = 64 - static_cast<unsigned>(__builtin_clzll(k)) - kSpansPerBucketBits;
        const unsigned shift = range_bits > bucket_bits ? range_bits - bucket_bits : 0;
        const size_t buckets = size_t{1} << (range_bits - shift);
        level.summary.assign(buckets, Summary{0, 0, 0, kBoring});
        for (const Span* s = first; s < last; ++s) {
            Summary& m = level.summary[(s->offset - low) >> shift];
            ++m.count;
            m.top_offset = std::max<uint64_t>(m.top_offset, s->offset);
            m.top_end = std::max<uint64_t>(m.top_end, s->end);
        }
        // The cursor each bucket is entered with; the buckets with room.
        level.entered.clear();
        uint32_t gathered = 0;
        uint64_t cursor = walk.cursor;
        for (size_t i = 0; i < buckets; ++i) {
            Summary& m = level.summary[i];
            if (m.count == 0) continue;
            const auto aligned = checked_align_up(cursor, walk.alignment);
            if (aligned && m.top_offset >= *aligned && m.top_offset - *aligned >= walk.size) {
                level.entered.push_back({static_cast<uint32_t>(i), cursor});
                m.next = gathered;
                gathered += m.count;
            }
            cursor = std::max(cursor, m.top_end);
        }
        level.spans.resize(gathered);
        for (const Span* s = first; s < last; ++s) {
            Summary& m = level.summary[(s->offset - low) >> shift];
            if (m.next != kBoring) level.spans[m.next++] = *s;
        }
        for (const auto& [i, entry] : level.entered) {
            const Summary& m = level.summary[i];
            Span* end = level.spans.data() + m.next;
            walk.cursor = entry;
            walk_summaries(end - m.count, end, walk, depth + 1);
            if (walk.stopped) return;
        }
        walk.cursor = cursor;
    }

    // Conflicts from which walk_summaries() is used; its spans per bucket
    // (about 2^kSpansPerBucketBits), the runs it sorts outright and how
    // deep it sums up again before sorting.
    static constexpr size_t kSummariesFrom = 512;
    static constexpr unsigned kSpansPerBucketBits = 1;
    static constexpr size_t kInsertionAtMost = 16;
    static constexpr unsigned kSummaryDepth = 4;
    static constexpr uint32_t kBoring = UINT32_MAX;
    struct Summary {
        uint64_t top_offset, top_end;
        uint32_t count, next;  // next: where its next span is gathered (kBoring: not gathered)
    };
    struct Level {  // walk_summaries()'s storage at one depth, kept between calls
        std::vector<Summary> summary;
        std::vector<std::pair<uint32_t, uint64_t>> entered;  // bucket, the cursor it is entered with
        std::vector<Span> spans;                              // the gathered buckets' spans
    };

    const Buffers& b_;
    std::vector<Span> spans_;
    IndexRuns runs_;
    BasicSpanSorter<Span> sorter_;
    Level levels_[kSummaryDepth];
    std::vector<uint32_t> picked_;  // walk_in_step_with_part()'s members of one block
    std::vector<Span> head_, merged_;  // sort_spans()'s unsorted head and the merge
};
using GapFinder = BasicGapFinder<Span>;

}  // namespace emel::memory
