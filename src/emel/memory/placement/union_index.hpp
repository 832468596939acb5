// Placed buffers as the union of their bytes over ranges of time: the index
// greedy passes use on dense instances (docs/strategies.md §2), where a
// buffer is live together with thousands of others and reading each of them
// (PlacedIndex) makes a pass quadratic.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "emel/memory/core/strategy.hpp"
#include "emel/memory/placement/placed_index.hpp"
#include "emel/memory/placement/placement.hpp"
#include "emel/memory/placement/worker_pool.hpp"

namespace emel::memory {

// A set of byte ranges kept as its union: sorted, disjoint, none touching
// another (a range touching or overlapping an added one is merged into it).
// A zero-size range stays as a point unless it touches or lies in another.
class ByteUnion {
  public:
    using Span = BasicSpan<uint64_t>;
    // Adds [offset, end).
    void add(uint64_t offset, uint64_t end) {
        // Ends increase with offsets: the first range that can touch the new
        // one is the first ending at or after its offset.
        auto first = std::lower_bound(ranges_.begin(), ranges_.end(), offset,
                                      [](const Span& r, uint64_t at) { return r.end < at; });
        auto last = first;
        for (; last != ranges_.end() && last->offset <= end; ++last) {
            offset = std::min(offset, last->offset);
            end = std::max(end, last->end);
        }
        for (auto r = first; r != last; ++r) bytes_ -= r->end - r->offset;
        bytes_ += end - offset;
        if (first == last) {
            ranges_.insert(first, Span{offset, end});
        } else {
            *first = Span{offset, end};
            ranges_.erase(first + 1, last);
        }
    }
    const std::vector<Span>& ranges() const { return ranges_; }
    uint64_t bytes() const { return bytes_; }  // the union's size

  private:
    std::vector<Span> ranges_;
    uint64_t bytes_ = 0;
};

// Time is cut at every buffer's lower and upper into slots, and a segment
// tree stands over the slots. A placed buffer's bytes are added to the
// `covered` union of the few nodes whose slots make up its lifetime (the
// canonical nodes) and to the `within` union of those nodes and of every
// node above them. A query's conflicts are then, as bytes: `within` of the
// canonical nodes of its lifetime (buffers placed inside them) and `covered`
// of the nodes on the paths to its first and last slot that stick out of
// its lifetime (buffers placed over them). Their union is the union of the
// conflicting buffers' bytes, which is all a greedy gap choice for a buffer
// holding bytes reads: its gaps are that union's gaps, and its top is the
// union's end (BasicGapFinder's walk meets the same fitting gaps in the same
// order). A zero-size buffer can land where two spans touch, which a union
// hides: an instance with one is given PlacedIndex (dense_index_for()).
// Dense placements coalesce into a few ranges per node, so a query reads a
// few ranges per node instead of every conflict.
class UnionIndex {
  public:
    using Span = BasicSpan<uint64_t>;
    using Runs = IndexRuns;

    explicit UnionIndex(const Buffers& b, WorkerPool* = nullptr) : b_(b) {
        for (size_t x = 0; x < b.count(); ++x)
            if (b.lower[x] < b.upper[x]) {
                cut_.push_back(b.lower[x]);
                cut_.push_back(b.upper[x]);
            }
        std::sort(cut_.begin(), cut_.end());
        cut_.erase(std::unique(cut_.begin(), cut_.end()), cut_.end());
        const size_t slots = cut_.size() > 1 ? cut_.size() - 1 : 1;
        while (leaves_ < slots) leaves_ *= 2;
        covered_.resize(2 * leaves_);
        within_.resize(2 * leaves_);
        stamp_.assign(2 * leaves_, 0);
    }

    template <class Ahead>
    void read_ahead(Ahead, size_t) const {}

    // Returns the work of the unions' upkeep: a step per union added to
    // (per node: the same in any order of inserts, so the threads' batches,
    // which insert a level at a time, charge what one thread does).
    uint64_t insert(uint32_t x, uint64_t offset) {
        if (b_.lower[x] >= b_.upper[x]) return 0;
        const uint64_t end = offset + b_.size[x];  // no wrap: GapFinder::find() checked it
        const auto [first, last] = slots_of(b_.lower[x], b_.upper[x]);
        uint64_t steps = 0;
        ++stamped_;
        // A canonical node gets the span in both unions, every node above
        // it in `within` (once: the nodes above two canonical nodes meet).
        auto put = [&](size_t v) {
            covered_[v].add(offset, end);
            within_[v].add(offset, end);
            steps += 2;
            for (v >>= 1; v && stamp_[v] != stamped_; v >>= 1) {
                stamp_[v] = stamped_;
                within_[v].add(offset, end);
                ++steps;
            }
        };
        for (size_t l = first + leaves_, r = last + leaves_ + 1; l < r; l >>= 1, r >>= 1) {
            if (l & 1) put(l++);
            if (r & 1) put(--r);
        }
        return kGreedyUnitsPerStep * steps;
    }

    // Appends byte ranges whose union is that of every placed buffer with
    // lower < hi and upper > lo; returns the work of the nodes visited and
    // the binary searches made. Safe to call from several threads at once
    // while nothing is inserted.
    uint64_t collect(uint64_t lo, uint64_t hi, std::vector<Span>& out, Runs&) const {
        if (cut_.size() < 2 || hi <= cut_.front() || lo >= cut_.back()) return 0;
        // Slots meeting [lo, hi): from the one holding lo to the last starting before hi.
        const size_t first = static_cast<size_t>(std::upper_bound(cut_.begin(), cut_.end(), lo) - cut_.begin());
        const size_t first_slot = first ? first - 1 : 0;
        const size_t past = static_cast<size_t>(std::lower_bound(cut_.begin(), cut_.end(), hi) - cut_.begin());
        if (past == 0) return 0;
        const size_t last_slot = std::min(past - 1, cut_.size() - 2);
        if (first_slot > last_slot) return 0;
        // `within` of the canonical nodes, `covered` of the nodes above them
        // (on the paths to the first and the last slot, reaching outside).
        Unions& read = unions_of_query();
        read.clear();
        for (size_t l = first_slot + leaves_, r = last_slot + leaves_ + 1; l < r; l >>= 1, r >>= 1) {
            if (l & 1) read.push_back(&within_[l++]);
            if (r & 1) read.push_back(&within_[--r]);
        }
        size_t a = first_slot + leaves_, z = last_slot + leaves_;
        for (unsigned height = 0; a; a >>= 1, z >>= 1, ++height) {
            if (sticks_out(a, height, first_slot, last_slot)) read.push_back(&covered_[a]);
            if (z != a && sticks_out(z, height, first_slot, last_slot)) read.push_back(&covered_[z]);
        }
        return kGreedyUnitsPerStep * (read.size() + append_union(read, out));
    }

  private:
    using Unions = std::vector<const ByteUnion*>;
    // Each querying thread's list of unions to read.
    static Unions& unions_of_query() {
        thread_local Unions unions;
        return unions;
    }

    // Appends ranges whose union is that of `read`; returns the binary
    // searches it made. The union covering the most bytes is appended
    // whole; of the others only the ranges reaching into its gaps, found
    // gap by gap (a range inside one of its ranges, ends included, changes
    // no gap: not even a zero-size one). Dense placements stack most
    // buffers into a few ranges, so the others add little. Where that union
    // has many gaps every range is appended instead.
    static uint64_t append_union(const Unions& read, std::vector<Span>& out) {
        const ByteUnion* most = nullptr;
        size_t total = 0;
        for (const ByteUnion* u : read) {
            total += u->ranges().size();
            if (!u->ranges().empty() &&
                (!most || u->bytes() > most->bytes() ||
                 (u->bytes() == most->bytes() && u->ranges().size() < most->ranges().size())))
                most = u;
        }
        if (!most) return 0;
        const std::vector<Span>& base = most->ranges();
        // Gaps times unions, each a binary search, against reading every range.
        if (base.size() * read.size() * 8 > total) {
            for (const ByteUnion* u : read) out.insert(out.end(), u->ranges().begin(), u->ranges().end());
            return 0;
        }
        out.insert(out.end(), base.begin(), base.end());
        uint64_t searches = 0;
        for (const ByteUnion* u : read) {
            if (u == most) continue;
            const std::vector<Span>& ranges = u->ranges();
            size_t next = 0;  // ranges before it are appended or inside a base range
            // Gap g lies strictly between base[g - 1].end and base[g].offset
            // (below the first range, above the last: open-ended).
            for (size_t g = 0; g <= base.size() && next < ranges.size(); ++g) {
                const uint64_t above = g ? base[g - 1].end : 0;
                const bool bottom = g == 0;
                const bool top = g == base.size();
                ++searches;
                auto from = std::lower_bound(ranges.begin() + static_cast<std::ptrdiff_t>(next), ranges.end(),
                                             above, [bottom](const Span& r, uint64_t at) {
                                                 return bottom ? false : r.end <= at;
                                             });
                auto to = from;
                for (; to != ranges.end() && (top || to->offset < base[g].offset); ++to) out.push_back(*to);
                next = static_cast<size_t>(to - ranges.begin());
            }
        }
        return searches;
    }

    // A buffer's slots [first, last] (its lower and upper are cuts).
    std::pair<size_t, size_t> slots_of(uint64_t lower, uint64_t upper) const {
        const size_t first = static_cast<size_t>(std::lower_bound(cut_.begin(), cut_.end(), lower) - cut_.begin());
        const size_t past = static_cast<size_t>(std::lower_bound(cut_.begin(), cut_.end(), upper) - cut_.begin());
        return {first, past - 1};
    }
    // Node v, `height` levels above the leaves, holds slots outside [first, last].
    bool sticks_out(size_t v, unsigned height, size_t first, size_t last) const {
        const size_t from = (v << height) - leaves_, to = ((v + 1) << height) - leaves_ - 1;
        return from < first || to > last;
    }

    const Buffers& b_;
    std::vector<uint64_t> cut_;  // every live buffer's lower and upper, sorted, distinct
    size_t leaves_ = 1;
    std::vector<ByteUnion> covered_, within_;
    std::vector<uint32_t> stamp_;  // insert(): nodes above already given the span
    uint32_t stamped_ = 0;
};

// Conflicts per buffer, estimated from a sample, from which a greedy pass
// uses UnionIndex (docs/strategies.md §2), on instances of at least
// kUnionIndexFrom buffers (smaller passes take milliseconds either way).
constexpr uint64_t kUnionIndexFromConflicts = 512;
constexpr size_t kUnionIndexFrom = 1024;
// ... and whose buffers live, on average, at least this share of the time
// line (1/16): long lifetimes fall into few nodes of the time tree, whose
// unions coalesce. Short random ones (10^5 buffers of up to 2,000 steps)
// leave the unions ragged, and reading rows is up to twice as fast there.
constexpr unsigned kUnionIndexLifetimeShareBits = 4;

// Whether a live buffer of `b` holds no bytes: a union hides where two
// spans touch, where such a buffer can land, so the dense indexes refuse it.
inline bool has_live_zero_size(const Buffers& b) {
    for (size_t x = 0; x < b.count(); ++x)
        if (b.lower[x] < b.upper[x] && b.size[x] == 0) return true;
    return false;
}

// Buffers each buffer lives together with, estimated from a sample: how
// many of up to 2,048 evenly spaced buffers each of 16 others lives with,
// scaled to n (deterministic, and some 32,000 checks).
inline uint64_t sampled_conflicts_per_buffer(const Buffers& b) {
    const size_t n = b.count();
    if (n == 0) return 0;
    constexpr size_t kQueries = 16, kOthers = 2048;
    const size_t others = std::min(n, kOthers);
    uint64_t together = 0;
    for (size_t q = 0; q < kQueries; ++q) {
        const size_t x = (2 * q + 1) * n / (2 * kQueries);
        const uint64_t lo = b.lower[x], hi = b.upper[x];
        for (size_t i = 0; i < others; ++i) {
            const size_t y = i * n / others;
            together += (b.lower[y] < hi) & (b.upper[y] > lo) & (y != x);
        }
    }
    // The sample's share of pairs live together, times n.
    return together * n / (kQueries * others);
}

// Whether the live buffers of `b` live, on average, at least 1/16 of the
// time line: one of UnionIndex's conditions (dense_index_for(), with 1,024
// buffers, no live zero-size one and kUnionIndexFromConflicts sampled
// conflicts per buffer).
inline bool lives_long(const Buffers& b) {
    uint64_t first = UINT64_MAX, last = 0, live = 0;
    unsigned __int128 lifetimes = 0;  // times may reach 2^64-1
    for (size_t x = 0; x < b.count(); ++x) {
        if (b.lower[x] >= b.upper[x]) continue;
        first = std::min(first, b.lower[x]);
        last = std::max(last, b.upper[x]);
        lifetimes += b.upper[x] - b.lower[x];
        ++live;
    }
    // Mean lifetime >= time line / 16, without dividing.
    return live &&
           (lifetimes << kUnionIndexLifetimeShareBits) >= static_cast<unsigned __int128>(live) * (last - first);
}

}  // namespace emel::memory
