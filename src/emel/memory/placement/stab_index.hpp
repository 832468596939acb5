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
#include <array>
#include <cstdint>
#include <vector>

#include "emel/memory/core/strategy.hpp"
#include "emel/memory/placement/placed_index.hpp"
#include "emel/memory/placement/placement.hpp"
#include "emel/memory/placement/union_index.hpp"
#include "emel/memory/placement/worker_pool.hpp"

namespace emel::memory {

// At most this many stab instants; each must hold at least 1/kStabShare of
// the live buffers, and together they must hold half of them for a pass to
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

    // Whether a pass should take StabIndex: the stabs hold half of the live
    // buffers. From there a pass takes less time with it than with rows, even
    // rows on two threads, or the union index (bursts of starts, random
    // lifetimes; docs/strategies.md §2, "Crowds").
    bool crowded() const { return !instant.empty() && 2 * members >= live; }
};

// Placed buffers by offset: blocks of at most 2 * kBlock, each sorted, in
// order. A query walks every one in turn and keeps those live with it: one
// stretch of memory, in order, where copying the ones it keeps out of an
// index and ordering them costs some ten times more a buffer (a near-clique
// of 10^5: its 5,000 short buffers each live with about half the crowd, and
// each of its members with about half the short buffers: most of a pass).
template <class Entry>
class ByOffset {
  public:
    void insert(const Entry& e) {
        if (blocks_.empty()) {
            blocks_.emplace_back();
            first_.push_back(e.offset);
        }
        size_t i = static_cast<size_t>(std::upper_bound(first_.begin(), first_.end(), e.offset) - first_.begin());
        i -= i > 0;
        std::vector<Entry>& block = blocks_[i];
        block.insert(std::upper_bound(block.begin(), block.end(), e.offset,
                                      [](uint64_t at, const Entry& q) { return at < q.offset; }),
                     e);
        first_[i] = block.front().offset;
        if (block.size() >= 2 * kBlock) {  // split in halves
            std::vector<Entry> upper(block.begin() + kBlock, block.end());
            block.resize(kBlock);
            first_.insert(first_.begin() + static_cast<std::ptrdiff_t>(i) + 1, upper.front().offset);
            blocks_.insert(blocks_.begin() + static_cast<std::ptrdiff_t>(i) + 1, std::move(upper));
        }
        ++count_;
    }
    const std::vector<std::vector<Entry>>& blocks() const { return blocks_; }
    size_t size() const { return count_; }

  private:
    static constexpr size_t kBlock = 256;
    std::vector<std::vector<Entry>> blocks_;
    std::vector<uint64_t> first_;  // each block's lowest offset
    size_t count_ = 0;
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
        for (Crowd& c : crowd_) {
            c.placed_by_lower.assign(c.by_lower.size() + 1, 0);
            c.placed_by_upper.assign(c.by_upper.size() + 1, 0);
            // Its zone: from its earliest lower to its latest upper (by_upper
            // is descending).
            c.zone_lo = c.by_lower.front().time;
            c.zone_hi = c.by_upper.front().time;
        }
    }

    // A crowd's placed members in offset order (Crowd::by_offset), each with
    // its places in the crowd's two orders; and a zone's placed rows
    // (Crowd::rows), each with its times.
    struct MemberEntry {
        uint64_t offset, end;
        uint32_t at_lower, at_upper;
    };
    using CrowdByOffset = ByOffset<MemberEntry>;
    struct RowEntry {
        uint64_t offset, end, lower, upper;
    };
    // A part of a crowd lent to a query: the members whose place in the
    // order `by_upper` names is below `below`, `count` of them placed.
    struct LentMembers {
        const CrowdByOffset* members = nullptr;
        bool by_upper = false;
        uint32_t below = 0;
        size_t count = 0;
    };

    template <class Ahead>
    void read_ahead(Ahead ahead, size_t left) const {
        rows_.read_ahead(ahead, left);
    }

    // Returns the work of the upkeep: a step per union added to.
    uint64_t insert(uint32_t x, uint64_t offset) {
        const uint32_t s = stabs_.stab_of[x];
        if (s == Stabs::kNoStab) {
            const uint64_t upkeep = rows_.insert(x, offset);
            if (b_.lower[x] < b_.upper[x])
                for (Crowd& c : crowd_)
                    if (b_.lower[x] < c.zone_hi && b_.upper[x] > c.zone_lo)
                        c.rows.insert({offset, offset + b_.size[x], b_.lower[x], b_.upper[x]});
            return upkeep;
        }
        const uint64_t end = offset + b_.size[x];  // no wrap: GapFinder::find() checked it
        Crowd& c = crowd_[s];
        c.by_lower[at_lower_[x]].span = c.by_upper[at_upper_[x]].span = Span{offset, end};
        c.bytes.add(offset, end);
        c.by_offset.insert({offset, end, at_lower_[x], at_upper_[x]});
        count_placed(c.placed_by_lower, at_lower_[x]);
        count_placed(c.placed_by_upper, at_upper_[x]);
        return kGreedyUnitsPerStep;
    }

    // Appends byte ranges whose union is that of every placed buffer with
    // lower < hi and upper > lo, but for what it lends, never both: the
    // first crowd's union the query reads whole (`lent`: sorted, disjoint,
    // no two touching), else the largest part of a crowd it reads in part
    // (`part_lent`), where walking the crowd's placed members by offset
    // beats copying that part out (kLendPartFrom). A member of a crowd of
    // 10^5 reads some 10,000 ranges of its union, which the gap search walks
    // in step with the other spans sorted (BasicGapFinder::find). Returns the work of the
    // crowds' members looked at (those a copying query reads: the same
    // either way). Safe to call from several threads at once while nothing
    // is inserted.
    uint64_t collect_lending(uint64_t lo, uint64_t hi, std::vector<Span>& out, Runs& runs,
                             const std::vector<Span>*& lent, LentMembers& part_lent, size_t& sorted_from) const {
        lent = nullptr;
        part_lent = LentMembers{};
        uint64_t steps = 0;
        bool whole = false;  // some crowd lives at an instant of the query: lent whole
        for (uint64_t t : stabs_.instant) whole = whole || (lo <= t && t < hi);
        // A part: the first `ahead` members of one of a crowd's orders, `placed` of them placed.
        struct Part {
            size_t crowd, ahead, placed;
            bool by_upper;
        };
        Part lend{0, 0, 0, false};
        std::array<Part, kMostStabs> copied;
        size_t parts = 0;
        for (size_t s = 0; s < crowd_.size(); ++s) {
            const uint64_t t = stabs_.instant[s];
            const Crowd& c = crowd_[s];
            ++steps;
            if (lo <= t && t < hi) {  // every member lives at t, with the query
                if (!lent) lent = &c.bytes.ranges();
                else out.insert(out.end(), c.bytes.ranges().begin(), c.bytes.ranges().end());
                continue;
            }
            // hi <= t: members live past t > lo, so those begun before hi;
            // t < lo: members live from t < hi, so those ending after lo.
            const bool by_upper = t < lo;
            const std::vector<Member>& order = by_upper ? c.by_upper : c.by_lower;
            const auto in = [by_upper, lo, hi](const Member& m) { return by_upper ? m.time > lo : m.time < hi; };
            const auto ahead =
                static_cast<size_t>(std::partition_point(order.begin(), order.end(), in) - order.begin());
            steps += ahead;
            const size_t placed = placed_before(by_upper ? c.placed_by_upper : c.placed_by_lower, ahead);
            const Part part{s, ahead, placed, by_upper};
            if (!whole && part.placed >= kLendPartFrom && part.placed * kLendPartShare >= c.by_offset.size() &&
                part.placed > lend.placed) {
                if (lend.placed > 0) copied[parts++] = lend;
                lend = part;
            } else if (part.placed > 0) {
                copied[parts++] = part;
            }
        }
        for (size_t k = 0; k < parts; ++k) {
            const Crowd& c = crowd_[copied[k].crowd];
            append_placed(copied[k].by_upper ? c.by_upper : c.by_lower, copied[k].ahead, out);
        }
        if (lend.placed > 0)
            part_lent = LentMembers{&crowd_[lend.crowd].by_offset, lend.by_upper,
                                    static_cast<uint32_t>(lend.ahead), lend.placed};
        // The rows last: where the query lives within a crowd's zone and
        // with a good share of the zone's placed rows (a crowd member, live
        // over half a near-clique), all of those walked by offset and kept
        // when live with it, which leaves them in order (`sorted_from`: out
        // is sorted from there on); else through the rows' time index, in
        // no order.
        const ByOffset<RowEntry>* rows = nullptr;  // the fewest placed rows of a zone holding the query
        for (const Crowd& c : crowd_)
            if (c.zone_lo <= lo && hi <= c.zone_hi && (!rows || c.rows.size() < rows->size())) rows = &c.rows;
        if (!rows || rows->size() > kRowsWalkedShare * rows_.candidates(lo, hi)) {
            const uint64_t rows_work = rows_.collect(lo, hi, out, runs);
            sorted_from = out.size();  // nothing in order
            return kGreedyUnitsPerStep * steps + rows_work;
        }
        sorted_from = out.size();
        size_t kept = out.size();
        out.resize(kept + rows->size());
        Span* to = out.data();
        for (const auto& block : rows->blocks())
            for (const RowEntry& e : block) {
                to[kept] = Span{e.offset, e.end};
                kept += (e.lower < hi) & (e.upper > lo);
            }
        out.resize(kept);
        return kGreedyUnitsPerStep * steps;
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
        CrowdByOffset by_offset;               // its placed members
        // Placed members counted by place in each order (Fenwick trees):
        // how many of a leading run are placed, in O(log n).
        std::vector<uint32_t> placed_by_lower, placed_by_upper;
        // Its zone, [its earliest lower, its latest upper), and the placed
        // rows live in it by offset: every row a query within the zone
        // lives with is one of them.
        uint64_t zone_lo = 0, zone_hi = 0;
        ByOffset<RowEntry> rows;
    };
    // A part is lent where it has at least kLendPartFrom placed members and
    // at least 1/kLendPartShare of the crowd's: below that, copying it out
    // costs less than walking every placed member.
    static constexpr size_t kLendPartFrom = 64;
    static constexpr size_t kLendPartShare = 8;

    static void count_placed(std::vector<uint32_t>& tree, uint32_t at) {
        for (size_t i = size_t{at} + 1; i < tree.size(); i += i & (~i + 1)) ++tree[i];
    }
    static size_t placed_before(const std::vector<uint32_t>& tree, size_t ahead) {
        size_t count = 0;
        for (size_t i = ahead; i > 0; i -= i & (~i + 1)) count += tree[i];
        return count;
    }

    // Appends the spans of the placed members among the first `ahead` of
    // `members` (no branch to mispredict: each written, kept when placed).
    static void append_placed(const std::vector<Member>& members, size_t ahead, std::vector<Span>& out) {
        size_t kept = out.size();
        out.resize(kept + ahead);
        Span* to = out.data();
        for (size_t i = 0; i < ahead; ++i) {
            to[kept] = members[i].span;
            kept += members[i].span.end != 0;
        }
        out.resize(kept);
    }

    const Buffers& b_;
    Stabs stabs_;
    PlacedIndex rows_;  // every live buffer's row; only the unstabbed are inserted
    // A crowd's placed rows by offset (Crowd::rows) are walked where a
    // query lives within its zone and the rows' time index offers no more
    // than kRowsWalkedShare times fewer candidates than there are of them.
    static constexpr size_t kRowsWalkedShare = 4;
    std::vector<Crowd> crowd_;
    std::vector<uint32_t> at_lower_, at_upper_;  // a member's place in its crowd's orders
};

// The index a greedy pass over `b` takes (place_greedy()): StabIndex where
// its buffers crowd around a few instants, else UnionIndex where they live
// long (lives_long()) and each with kUnionIndexFromConflicts others or more,
// else rows (None). Both need 1,024 buffers and no live zero-size one. A
// crowd of 1/32 of the buffers lives together, so an instance with half of
// its buffers in crowds has, on average, at least some n/64 conflicts per
// buffer: the sample (a cheap pass, made once for both rules) rules out the
// others before the stabs are looked for (sorts of the buffers). One just
// at half may be sampled below that and keep rows: the same placement.
enum class DenseIndex { None, Unions, Stabs };
inline DenseIndex dense_index_for(const Buffers& b) {
    if (b.count() < kUnionIndexFrom || has_live_zero_size(b)) return DenseIndex::None;
    const uint64_t conflicts = sampled_conflicts_per_buffer(b);
    if (conflicts * 2 * kStabShare >= b.count() && Stabs(b).crowded()) return DenseIndex::Stabs;
    return lives_long(b) && conflicts >= kUnionIndexFromConflicts ? DenseIndex::Unions : DenseIndex::None;
}

}  // namespace emel::memory
