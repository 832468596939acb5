// Placed buffers on dense traces whose lifetimes crowd around a few
// instants (docs/strategies.md §2): most buffers live at one of a few
// *stab* instants, the rest briefly. Each stab keeps the union of its
// members' bytes; the others stay in rows (PlacedIndex).
//
// Why: on such a trace (the saved activations of a training step, all live
// at the backward's start, beside short temporaries) a query's conflicts
// are nearly every buffer of the crowd. UnionIndex splits them over the
// nodes of its time tree, each node's union a ragged part of one stack, so a
// query reads some thousands of ranges; here the crowd's union is one
// stack, read whole by a query live at its instant.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "emel/memory/core/strategy.hpp"
#include "emel/memory/placement/placed_index.hpp"
#include "emel/memory/placement/placement.hpp"
#include "emel/memory/placement/union_index.hpp"
#include "emel/memory/placement/worker_pool.hpp"

namespace emel::memory {

// At most this many stab instants; each must hold at least 1/kStabShare of
// the live buffers, and together they must hold 3/4 of them for a pass to
// take StabIndex (Stabs::crowded()).
constexpr size_t kMostStabs = 16;
constexpr size_t kStabShare = 32;

// The stab instants of `b` and each live buffer's stab (kNoStab: in rows).
struct Stabs {
    static constexpr uint32_t kNoStab = UINT32_MAX;
    std::vector<uint64_t> instant;   // by stab
    std::vector<uint32_t> stab_of;   // by buffer
    size_t members = 0, live = 0;    // stabbed buffers, live buffers
    // The live buffers by lower and by upper (ascending; ties: index).
    std::vector<uint32_t> by_lower, by_upper;

    // Greedily: the instant (the earliest lower) where the most live
    // buffers not yet stabbed live, its buffers stabbed there; again while
    // an instant holds enough of them.
    explicit Stabs(const Buffers& b) : stab_of(b.count(), kNoStab) {
        for (uint32_t x = 0; x < b.count(); ++x)
            if (b.lower[x] < b.upper[x]) by_lower.push_back(x);
        live = by_lower.size();
        by_upper = by_lower;
        std::sort(by_lower.begin(), by_lower.end(), [&](uint32_t p, uint32_t q) {
            return b.lower[p] != b.lower[q] ? b.lower[p] < b.lower[q] : p < q;
        });
        std::sort(by_upper.begin(), by_upper.end(), [&](uint32_t p, uint32_t q) {
            return b.upper[p] != b.upper[q] ? b.upper[p] < b.upper[q] : p < q;
        });
        const size_t enough = std::max<size_t>(1, live / kStabShare);
        while (instant.size() < kMostStabs) {
            // Live buffers not stabbed, at each lower in turn: those begun
            // at or before it less those ended at or before it.
            size_t count = 0, best = 0, e = 0;
            uint64_t at = 0;
            for (size_t s = 0; s < by_lower.size();) {
                const uint64_t t = b.lower[by_lower[s]];
                for (; e < by_upper.size() && b.upper[by_upper[e]] <= t; ++e) count -= stab_of[by_upper[e]] == kNoStab;
                for (; s < by_lower.size() && b.lower[by_lower[s]] == t; ++s) count += stab_of[by_lower[s]] == kNoStab;
                if (count > best) {
                    best = count;
                    at = t;
                }
            }
            if (best < enough) break;
            const auto stab = static_cast<uint32_t>(instant.size());
            instant.push_back(at);
            for (uint32_t x : by_lower) {
                if (b.lower[x] > at) break;
                if (stab_of[x] == kNoStab && b.upper[x] > at) {
                    stab_of[x] = stab;
                    ++members;
                }
            }
        }
    }

    // Whether a pass should take StabIndex: the stabs hold 3/4 of the live buffers.
    bool crowded() const { return !instant.empty() && 4 * members >= 3 * live; }
};

class StabIndex {
  public:
    using Span = BasicSpan<uint64_t>;
    using Runs = IndexRuns;

    explicit StabIndex(const Buffers& b, WorkerPool* pool = nullptr)
        : b_(b), stabs_(b), rows_(b, pool), at_lower_(b.count(), 0), at_upper_(b.count(), 0) {
        // Each crowd's members in the stabs' orders (by upper: from the last).
        crowd_.resize(stabs_.instant.size());
        for (uint32_t x : stabs_.by_lower)
            if (stabs_.stab_of[x] != Stabs::kNoStab) {
                auto& by = crowd_[stabs_.stab_of[x]].by_lower;
                at_lower_[x] = static_cast<uint32_t>(by.size());
                by.push_back(Member{b.lower[x], Span{0, 0}});
            }
        for (auto x = stabs_.by_upper.rbegin(); x != stabs_.by_upper.rend(); ++x)
            if (stabs_.stab_of[*x] != Stabs::kNoStab) {
                auto& by = crowd_[stabs_.stab_of[*x]].by_upper;
                at_upper_[*x] = static_cast<uint32_t>(by.size());
                by.push_back(Member{b.upper[*x], Span{0, 0}});
            }
    }

    template <class Ahead>
    void read_ahead(Ahead ahead, size_t left) const {
        rows_.read_ahead(ahead, left);
    }

    // Returns the work of the upkeep: a step per union added to.
    uint64_t insert(uint32_t x, uint64_t offset) {
        const uint32_t s = stabs_.stab_of[x];
        if (s == Stabs::kNoStab) return rows_.insert(x, offset);
        const uint64_t end = offset + b_.size[x];  // no wrap: GapFinder::find() checked it
        Crowd& c = crowd_[s];
        c.by_lower[at_lower_[x]].span = c.by_upper[at_upper_[x]].span = Span{offset, end};
        c.bytes.add(offset, end);
        return kGreedyUnitsPerStep;
    }

    // Appends byte ranges whose union is that of every placed buffer with
    // lower < hi and upper > lo, but for the first crowd's union the query
    // reads whole: that one is lent (`lent`: sorted, disjoint, no two
    // touching; null where none is read whole), not copied. A member of a
    // crowd of 10^5 reads some 10,000 ranges of it, which the gap search
    // walks in step with the other spans sorted (BasicGapFinder::find).
    // Returns the work of the crowds' members looked at. Safe to call from
    // several threads at once while nothing is inserted.
    uint64_t collect_lending(uint64_t lo, uint64_t hi, std::vector<Span>& out, Runs& runs,
                             const std::vector<Span>*& lent) const {
        lent = nullptr;
        uint64_t steps = 0;
        for (size_t s = 0; s < crowd_.size(); ++s) {
            const uint64_t t = stabs_.instant[s];
            const Crowd& c = crowd_[s];
            ++steps;
            if (lo <= t && t < hi) {  // every member lives at t, with the query
                if (!lent) lent = &c.bytes.ranges();
                else out.insert(out.end(), c.bytes.ranges().begin(), c.bytes.ranges().end());
            } else if (hi <= t) {  // members live past t > lo: those begun before hi
                steps += append_placed(c.by_lower, out, [hi](uint64_t lower) { return lower < hi; });
            } else {  // t < lo: members live from t < hi: those ending after lo
                steps += append_placed(c.by_upper, out, [lo](uint64_t upper) { return upper > lo; });
            }
        }
        return kGreedyUnitsPerStep * steps + rows_.collect(lo, hi, out, runs);
    }

  private:
    // A member in one of its crowd's orders: the time that order is by (its
    // lower, or its upper) and its bytes, {0, 0} until placed (a member holds
    // bytes: the index serves no live zero-size buffer). Kept in the order,
    // so a query reads its members in one stretch, not scattered over the
    // buffers' arrays (a near-clique of 10^5: a third of a pass was those
    // scattered reads).
    struct Member {
        uint64_t time;
        Span span;
    };
    struct Crowd {
        ByteUnion bytes;                       // its placed members' bytes
        std::vector<Member> by_lower, by_upper;  // by lower (ascending), by upper (descending)
    };

    // Appends the spans of the placed members of the leading run of
    // `members` whose time is `in` the query (no branch to mispredict: each
    // written, kept when placed); returns the members looked at.
    template <class In>
    static size_t append_placed(const std::vector<Member>& members, std::vector<Span>& out, In in) {
        size_t kept = out.size(), i = 0;
        out.resize(kept + members.size());
        Span* to = out.data();
        for (; i < members.size() && in(members[i].time); ++i) {
            to[kept] = members[i].span;
            kept += members[i].span.end != 0;
        }
        out.resize(kept);
        return i;
    }

    const Buffers& b_;
    Stabs stabs_;
    PlacedIndex rows_;  // every live buffer's row; only the unstabbed are inserted
    std::vector<Crowd> crowd_;
    std::vector<uint32_t> at_lower_, at_upper_;  // a member's place in its crowd's orders
};

// The index a greedy pass over `b` takes (place_greedy()): StabIndex where
// its buffers crowd around a few instants, else UnionIndex where they live
// long (lives_long()) and each with kUnionIndexFromConflicts others or more,
// else rows (None). Both need 1,024 buffers and no live zero-size one. A
// crowd of 1/32 of the buffers lives together, so a crowded instance has,
// on average, some n/43 conflicts per buffer: the sample (a cheap pass,
// made once for both rules) rules out the others before the stabs are
// looked for (sorts of the buffers).
enum class DenseIndex { None, Unions, Stabs };
inline DenseIndex dense_index_for(const Buffers& b) {
    if (b.count() < kUnionIndexFrom || has_live_zero_size(b)) return DenseIndex::None;
    const uint64_t conflicts = sampled_conflicts_per_buffer(b);
    if (conflicts * 2 * kStabShare >= b.count() && Stabs(b).crowded()) return DenseIndex::Stabs;
    return lives_long(b) && conflicts >= kUnionIndexFromConflicts ? DenseIndex::Unions : DenseIndex::None;
}

}  // namespace emel::memory
