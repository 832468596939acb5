// Full packings (docs/strategies.md §5, "Full packings"): the search for a
// placement at the bound on instances whose every instant holds exactly the
// peak of live bytes, or nothing (instances cut from a full rectangle).
//
// Why a search of its own: at the bound such an instance has no free byte at
// any instant, which the canonical search (§5) does not use; it stalls from
// about 300 buffers. Here every placement is a tiling, which gives a rule
// that leaves few choices. Buffers are stacked from offset 0 up; the
// *skyline* is the height placed so far at each instant. A *valley* is a
// stretch [a, b) of the skyline lower than both its neighbours (or the ends
// of time). In a tiling, every byte just above a valley's floor is covered by
// a buffer whose offset is exactly the floor's height and whose lifetime lies
// inside [a, b): so the valley's floor is partitioned exactly by lifetimes
// of unplaced buffers that fit under the bound. Its first buffer starts at a,
// its last ends at b. The search takes, of all valleys' two ends, the one
// with the fewest buffers that can go there (a chain of lifetimes must still
// reach the valley's other end), places one, and goes on; no buffer at all is
// a dead end. Identical buffers are tried once, and a state (the buffers
// placed, and the skyline) found to be a dead end is not searched again
// while its table of dead ends still holds it. Dead ends can be deep, so
// it restarts often with node limits that grow along the Luby sequence,
// cycling through four orders of trying the buffers (the dead ends it
// proved are kept: they hold for every order). Where no tiling is found,
// the deepest partial one met, completed by first fit, is offered.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <numeric>
#include <vector>

#include "emel/memory/placement/failed_states.hpp"
#include "emel/memory/placement/placement.hpp"
#include "emel/memory/placement/worker_pool.hpp"

namespace emel::memory {

namespace {

// Work units per step of the search (a skyline segment looked at or moved,
// a buffer considered; an instant swept costs one unit), calibrated so that
// a budget takes about its milliseconds (kWorkUnitsPerMs) on the perfect
// packings of 600 buffers of bench/perfect_packing.py (about 930k units/ms
// when set; 1.07M since the smaller slots: a budget takes less time).
constexpr uint64_t kUnitsPerStep = 2;
// A look-up or insert in the table of dead ends (up to 2^18 slots): a cache
// miss, most of it hidden by reading the slot ahead.
constexpr uint64_t kLookupUnits = 30;
// Children whose table slots are read ahead when a node opens (most nodes
// have fewer).
constexpr size_t kReadAheadChildren = 8;
// The first restart's node limit: 4 a buffer, at least 500, so that one
// dive can place every buffer with room to go back (with the flush buffers
// tried first, dives run straight more often). Later restarts take Luby
// multiples of it.
constexpr uint64_t kRestartNodes = 500;
constexpr uint64_t kRestartNodesPerBuffer = 4;

struct Segment {
    uint32_t from, to;  // time indices, [from, to)
    uint64_t height;    // in grains
};

// The i-th term (from 0) of the Luby sequence 1 1 2 1 1 2 4 ...
uint64_t luby(uint64_t i) {
    for (;;) {
        uint64_t k = 1;
        while ((uint64_t{1} << k) - 1 < i + 1) ++k;
        if ((uint64_t{1} << k) - 1 == i + 1) return uint64_t{1} << (k - 1);
        i -= (uint64_t{1} << (k - 1)) - 1;
    }
}

// Dead ends of one full-packing search: a fixed table of 128-bit keys, a new
// one taking its slot over an old one. The search's state is the set of
// placed buffers (its key), and the table lives as long as the search, so
// a slot holds the key alone: 16 bytes, a third of the exact search's slots
// (FailedStates keeps a run number and a kept failure beside each key),
// which keeps more of the table in the caches and the page tables.
class DeadEnds {
  public:
    explicit DeadEnds(size_t buffers) : mask_(failed_state_slots(buffers) - 1) {}
    void prefetch(uint64_t a) const {
        if (slots_) __builtin_prefetch(&slots_.get()[a & mask_]);
    }
    bool contains(StateKey k) const {
        if (!slots_) return false;
        const StateKey& s = slots_.get()[k.a & mask_];
        return s.a == k.a && s.b == (k.b ^ kSalt);
    }
    // calloc: untouched zero pages, paid for only where the search writes.
    // Keys are stored with their second half salted, so that an all-zero
    // slot matches no key but (0, kSalt), a 2^-128 chance: nothing placed
    // is the key (0, 0).
    void insert(StateKey k) {
        if (!slots_) {
            if (failed_alloc_) return;
            slots_.reset(static_cast<StateKey*>(std::calloc(mask_ + 1, sizeof(StateKey))));
            if (!slots_) {
                failed_alloc_ = true;  // no memory: the search goes on without the table
                return;
            }
        }
        slots_.get()[k.a & mask_] = StateKey{k.a, k.b ^ kSalt};
    }

  private:
    static constexpr uint64_t kSalt = 0x9E3779B97F4A7C15ull;
    struct Free {
        void operator()(StateKey* p) const { std::free(p); }
    };
    std::unique_ptr<StateKey, Free> slots_;
    size_t mask_ = 0;
    bool failed_alloc_ = false;
};

class FullPacking {
  public:
    // `rows`: the searched buffers; `grain` divides every size and the bound;
    // `changes`: every row's start and end, ascending, and `index` each one's
    // time index.
    // `variant` (0 or 1) picks where its cycle of candidate orders starts.
    FullPacking(const Buffers& b, const std::vector<uint32_t>& rows, uint64_t bound, uint64_t grain,
                const std::vector<uint64_t>& changes, const std::vector<uint32_t>& index, unsigned variant)
        : rows_(rows), height_(bound / grain), variant_(variant), failed_(rows.size()) {
        const size_t m = rows.size();
        auto index_of = [&](uint64_t t) {
            return index[static_cast<size_t>(std::lower_bound(changes.begin(), changes.end(), t) - changes.begin())];
        };
        lower_.resize(m);
        upper_.resize(m);
        size_.resize(m);
        zobrist_.resize(m);
        Rng rng;
        for (size_t i = 0; i < m; ++i) {
            lower_[i] = index_of(b.lower[rows[i]]);
            upper_[i] = index_of(b.upper[rows[i]]);
            size_[i] = b.size[rows[i]] / grain;
            zobrist_[i] = rng.next();
        }
        zobrist2_.resize(m);
        for (size_t i = 0; i < m; ++i) zobrist2_[i] = rng.next();
        times_ = index.back() + 1;
        starting_ = lists_by(lower_, starting_at_);
        ending_ = lists_by(upper_, ending_at_);
        mark_.assign(times_ + 1, 0);
        placed_.assign(m, 0);
        offset_.assign(m, 0);
    }

    // What a search settled on, and the work it took.
    enum class Settled { Tiling, NoTiling, Neither };
    struct Result {
        Settled settled = Settled::Neither;
        uint64_t work = 0;
    };

    // A tiling within `budget` work units (offsets() then holds it); stopped
    // as soon as it can no longer settle first in the race whose earliest
    // settle so far is `earliest` (a race key, below).
    Result solve(uint64_t budget, const std::atomic<uint64_t>& earliest) {
        Result r;
        const uint64_t restart_nodes = std::max<uint64_t>(kRestartNodes, kRestartNodesPerBuffer * rows_.size());
        for (uint64_t restart = 0; r.work < budget; ++restart) {
            const Outcome o = descend(restart, restart_nodes * luby(restart), budget, earliest, r.work);
            if (o == Outcome::Found) r.settled = Settled::Tiling;
            if (o == Outcome::Exhausted) r.settled = Settled::NoTiling;  // (or a key collision)
            if (o != Outcome::OutOfNodes) break;
        }
        return r;
    }

    // Which search settles first: the one that took the least work, then
    // the lower variant.
    uint64_t race_key(uint64_t work) const { return 2 * work + variant_; }

    const std::vector<uint64_t>& offsets() const { return offset_; }
    size_t deepest_count() const { return deepest_count_; }

    // The deepest partial tiling met: offsets in grains, kUnplaced for the
    // buffers it had not placed (empty: none).
    static constexpr uint64_t kUnplaced = UINT64_MAX;
    const std::vector<uint64_t>& deepest() const { return deepest_; }

  private:
    enum class Outcome { Found, Exhausted, OutOfNodes, Beaten };

    // (index lists of buffers by a time index, CSR: begin offsets into `into`)
    std::vector<uint32_t> lists_by(const std::vector<uint32_t>& time_of, std::vector<uint32_t>& into) const {
        std::vector<uint32_t> begin(times_ + 2, 0);
        for (uint32_t t : time_of) ++begin[t + 2];
        for (size_t t = 2; t < begin.size(); ++t) begin[t] += begin[t - 1];
        into.resize(time_of.size());
        for (uint32_t i = 0; i < time_of.size(); ++i) into[begin[time_of[i] + 1]++] = i;
        begin.pop_back();
        return begin;
    }

    bool fits(uint32_t i, uint64_t h) const { return size_[i] <= height_ - h; }

    // Marks the time indices in [from, to] from which a chain of unplaced
    // lifetimes inside [from, to), each fitting above `h`, reaches `to`
    // (backward) or is reached from `from` (forward). Marks are stamps.
    void sweep(uint32_t from, uint32_t to, uint64_t h, bool backward, uint64_t& work) {
        if (++stamp_ == 0) {  // wrapped: old stamps could pass for new ones
            std::fill(mark_.begin(), mark_.end(), 0);
            stamp_ = 1;
        }
        work += to - from;  // the instants looked at
        if (backward) {
            mark_[to] = stamp_;
            for (uint32_t p = to; p > from; --p) {
                if (mark_[p] != stamp_) continue;
                for (uint32_t k = ending_[p]; k < ending_[p + 1]; ++k) {
                    const uint32_t i = ending_at_[k];
                    if (!placed_[i] && lower_[i] >= from && fits(i, h)) mark_[lower_[i]] = stamp_;
                }
                work += kUnitsPerStep * (1 + ending_[p + 1] - ending_[p]);
            }
        } else {
            mark_[from] = stamp_;
            for (uint32_t p = from; p < to; ++p) {
                if (mark_[p] != stamp_) continue;
                for (uint32_t k = starting_[p]; k < starting_[p + 1]; ++k) {
                    const uint32_t i = starting_at_[k];
                    if (!placed_[i] && upper_[i] <= to && fits(i, h)) mark_[upper_[i]] = stamp_;
                }
                work += kUnitsPerStep * (1 + starting_[p + 1] - starting_[p]);
            }
        }
    }

    // A valley of the skyline and the buffers that can go at its two ends
    // (ranges of pool_: the frames' lists, stacked as the frames are).
    struct Valley {
        uint32_t from, to;
        uint64_t height;
        size_t segment;  // its index in the skyline
        uint32_t ends_at[2], ends_count[2];
    };

    // The buffers that can go at one end of valley [a, b) at height h into
    // pool_ (the left end: they start at a and a chain reaches b from their
    // end; the right end: they end at b and a chain from a reaches their
    // start). False when the left end's own instant is not reached: no chain
    // covers the floor.
    bool valley_end(uint32_t a, uint32_t b, uint64_t h, bool left, uint64_t& work) {
        sweep(a, b, h, left, work);
        if (left && mark_[a] != stamp_) return false;
        const uint32_t p = left ? a : b;
        const auto& begin = left ? starting_ : ending_;
        const auto& at = left ? starting_at_ : ending_at_;
        for (uint32_t j = begin[p]; j < begin[p + 1]; ++j) {
            const uint32_t i = at[j];
            if (placed_[i] || !fits(i, h)) continue;
            if (left ? (upper_[i] <= b && mark_[upper_[i]] == stamp_) : (lower_[i] >= a && mark_[lower_[i]] == stamp_))
                pool_.push_back(i);
        }
        work += kUnitsPerStep * (1 + begin[p + 1] - begin[p]);
        return true;
    }

    // Whether a buffer can still cover the corner of skyline segment k
    // against its higher neighbour (left: the segment's first instant; right:
    // its last): one that starts (ends) there, fits above the segment, and
    // whose lifetime runs over no part of the skyline higher than the
    // segment (it must rest on the segment's height all along).
    bool corner_covered(size_t k, bool left, uint64_t& work) const {
        const Segment& s = skyline_[k];
        const uint32_t p = left ? s.from : s.to;
        const auto& begin = left ? starting_ : ending_;
        const auto& at = left ? starting_at_ : ending_at_;
        for (uint32_t j = begin[p]; j < begin[p + 1]; ++j) {
            const uint32_t i = at[j];
            work += kUnitsPerStep;
            if (placed_[i] || !fits(i, s.height)) continue;
            bool rests = true;  // no higher segment under its lifetime
            if (left) {
                for (size_t q = k + 1; q < skyline_.size() && skyline_[q].from < upper_[i] && rests; ++q, work += kUnitsPerStep)
                    rests = skyline_[q].height <= s.height;
            } else {
                for (size_t q = k; q-- > 0 && skyline_[q].to > lower_[i] && rests; work += kUnitsPerStep)
                    rests = skyline_[q].height <= s.height;
            }
            if (rests) return true;
        }
        return false;
    }

    // Every valley of the skyline with the buffers that can go at its ends,
    // into `valleys`; false when one end has none (a dead end). A valley the
    // parent state had unchanged (same stretch and height) keeps its lists:
    // the buffer placed since lies in another valley's stretch, and a
    // valley's lists depend only on the unplaced buffers inside its own.
    bool find_valleys(const std::vector<Valley>* parent, std::vector<Valley>& valleys, uint64_t& work) {
        size_t q = 0;
        for (size_t k = 0; k < skyline_.size(); ++k) {
            const auto [a, b, h] = skyline_[k];
            work += kUnitsPerStep;
            if (h >= height_) continue;
            const bool wall_left = k == 0 || skyline_[k - 1].height > h;
            const bool wall_right = k + 1 == skyline_.size() || skyline_[k + 1].height > h;
            if (!wall_left || !wall_right) {
                // A slope: its corner against the higher side still needs a
                // buffer there whose lifetime runs over no higher skyline.
                if ((wall_left && !corner_covered(k, true, work)) || (wall_right && !corner_covered(k, false, work)))
                    return false;
                continue;
            }
            if (parent) {
                while (q < parent->size() && (*parent)[q].from < a) ++q;
                if (q < parent->size() && (*parent)[q].from == a && (*parent)[q].to == b && (*parent)[q].height == h) {
                    valleys.push_back((*parent)[q]);
                    valleys.back().segment = k;
                    continue;
                }
            }
            Valley v{a, b, h, k, {0, 0}, {0, 0}};
            for (int side = 0; side < 2; ++side) {
                v.ends_at[side] = static_cast<uint32_t>(pool_.size());
                if (!valley_end(a, b, h, side == 0, work)) return false;
                v.ends_count[side] = static_cast<uint32_t>(pool_.size()) - v.ends_at[side];
                if (v.ends_count[side] == 0) return false;
            }
            valleys.push_back(v);
        }
        return !valleys.empty();
    }
    // Buffer i onto skyline segment k (its lifetime lies inside it).
    void place(size_t k, uint32_t i) {
        // Only segment k and its two neighbours can change (split, or merged
        // with a neighbour of the new height): that window is saved for the
        // undo, so a placement costs the same however long the skyline is.
        const size_t from = k > 0 ? k - 1 : k, to = std::min(k + 2, skyline_.size());
        const Segment s = skyline_[k];
        Segment window[5];
        size_t count = 0;
        auto add = [&](const Segment& piece) {
            if (count > 0 && window[count - 1].height == piece.height) window[count - 1].to = piece.to;
            else window[count++] = piece;
        };
        if (from < k) add(skyline_[from]);
        if (lower_[i] > s.from) add({s.from, lower_[i], s.height});
        add({lower_[i], upper_[i], s.height + size_[i]});
        if (upper_[i] < s.to) add({upper_[i], s.to, s.height});
        if (k + 1 < to) add(skyline_[k + 1]);
        trail_.push_back({i, from, to - from, count, saved_.size()});
        saved_.insert(saved_.end(), skyline_.begin() + static_cast<std::ptrdiff_t>(from),
                      skyline_.begin() + static_cast<std::ptrdiff_t>(to));
        replace(from, to - from, window, window + count);
        offset_[i] = s.height;
        placed_[i] = 1;
        placed_hash_ ^= zobrist_[i];
        placed_hash2_ ^= zobrist2_[i];
        ++placed_count_;
    }

    // skyline_[at, at + count) becomes [first, last).
    void replace(size_t at, size_t count, const Segment* first, const Segment* last) {
        const auto begin = skyline_.begin() + static_cast<std::ptrdiff_t>(at);
        skyline_.erase(begin, begin + static_cast<std::ptrdiff_t>(count));
        skyline_.insert(skyline_.begin() + static_cast<std::ptrdiff_t>(at), first, last);
    }

    void undo_to(size_t mark) {
        while (trail_.size() > mark) {
            const Trail& t = trail_.back();
            replace(t.at, t.new_count, saved_.data() + t.saved_at, saved_.data() + t.saved_at + t.old_count);
            saved_.resize(t.saved_at);
            placed_[t.buffer] = 0;
            placed_hash_ ^= zobrist_[t.buffer];
            placed_hash2_ ^= zobrist2_[t.buffer];
            --placed_count_;
            trail_.pop_back();
        }
    }

    // The deepest partial tiling so far, for the fallback when none is
    // found: kept when it is deeper by at least 1/128 of the buffers (at
    // most 128 copies).
    void keep_if_deepest() {
        if (placed_count_ < deepest_count_ + 1 + rows_.size() / 128) return;
        deepest_count_ = placed_count_;
        deepest_.assign(rows_.size(), kUnplaced);
        for (const Trail& t : trail_) deepest_[t.buffer] = offset_[t.buffer];
    }

    void remember_dead_end(const StateKey& k) { failed_.insert(k); }

    // A state's key: two independent hashes of the set of placed buffers.
    // The set is the whole state: placed buffers fill every instant from 0
    // up without a gap, so the skyline is, at each instant, the sum of the
    // sizes of the placed buffers live there.
    StateKey key() const { return {placed_hash_, placed_hash2_}; }

    // How flush buffer i would sit in valley v: two points for each wall its
    // top would meet at the same height from an end of the valley it spans
    // to, two for spanning the whole valley, and one for a top level with
    // some other part of the skyline. A flush top leaves no new corner to
    // cover, and the pieces of a cut share edges, which run on across the
    // skyline (docs/strategies.md §5, "Full packings", step 3).
    int flush_points(uint32_t i, const Valley& v, uint64_t& work) const {
        const uint64_t top = v.height + size_[i];
        const bool left_wall = v.segment > 0 && skyline_[v.segment - 1].height == top;
        const bool right_wall = v.segment + 1 < skyline_.size() && skyline_[v.segment + 1].height == top;
        bool level = false;
        for (const Segment& s : skyline_) level |= s.height == top;
        work += kUnitsPerStep * skyline_.size();
        return 2 * ((lower_[i] == v.from && left_wall) + (upper_[i] == v.to && right_wall) +
                    (lower_[i] == v.from && upper_[i] == v.to)) + level;
    }

    // The order buffers are tried in at an end of valley v: the most flush
    // first, then by restart: small first, long first, large first, or a
    // fixed-seed shuffle.
    void order_candidates(std::vector<uint32_t>& c, uint64_t restart, const Valley& v, uint64_t& work) {
        const uint64_t kind = (restart + 2 * variant_) % 4;
        auto length = [&](uint32_t i) { return upper_[i] - lower_[i]; };
        flush_.resize(size_.size());
        for (uint32_t i : c) flush_[i] = static_cast<uint8_t>(flush_points(i, v, work));
        work += kUnitsPerStep * c.size();
        std::sort(c.begin(), c.end(), [&](uint32_t x, uint32_t y) {
            if (flush_[x] != flush_[y]) return flush_[x] > flush_[y];
            switch (kind) {
                case 0:
                    if (size_[x] != size_[y]) return size_[x] < size_[y];
                    if (length(x) != length(y)) return length(x) < length(y);
                    break;
                case 1:
                    if (length(x) != length(y)) return length(x) > length(y);
                    if (size_[x] != size_[y]) return size_[x] > size_[y];
                    break;
                case 2:
                    if (size_[x] != size_[y]) return size_[x] > size_[y];
                    if (length(x) != length(y)) return length(x) > length(y);
                    break;
                default: {
                    const uint64_t turn = restart ^ (uint64_t{variant_} << 32);
                    const uint64_t kx = mix64(zobrist_[x] ^ turn), ky = mix64(zobrist_[y] ^ turn);
                    if (kx != ky) return kx < ky;
                }
            }
            return x < y;
        });
        // Identical buffers (same lifetime and size) are tried once.
        size_t kept = 0;
        for (size_t j = 0; j < c.size(); ++j) {
            bool twin = false;
            for (size_t k = 0; k < kept && !twin; ++k)
                twin = lower_[c[k]] == lower_[c[j]] && upper_[c[k]] == upper_[c[j]] && size_[c[k]] == size_[c[j]];
            if (!twin) c[kept++] = c[j];
        }
        c.resize(kept);
    }

    // One depth-first search from nothing placed, of at most `nodes` nodes.
    Outcome descend(uint64_t restart, uint64_t nodes, uint64_t limit, const std::atomic<uint64_t>& earliest,
                    uint64_t& work) {
        undo_to(0);
        pool_.clear();
        skyline_.assign(1, Segment{0, times_ - 1, 0});
        // The frames of the path, kept between nodes and restarts for their
        // vectors' room: frames_[0, depth) are live.
        size_t depth = 0;
        // The state now as the next frame: its valleys, and the valley end
        // with the fewest buffers that can go there (ties: the earliest
        // valley, its start first). False at a dead end.
        auto open = [&]() {
            if (frames_.size() == depth) frames_.emplace_back();
            Frame& f = frames_[depth];
            f.valleys.clear();
            f.next = 0;
            f.key = key();
            f.trail_mark = trail_.size();
            f.pool_mark = pool_.size();
            const std::vector<Valley>* parent = depth == 0 ? nullptr : &frames_[depth - 1].valleys;
            if (failed_.contains(f.key) || !find_valleys(parent, f.valleys, work)) {
                remember_dead_end(f.key);
                pool_.resize(f.pool_mark);
                return false;
            }
            const Valley* best = nullptr;
            int best_side = 0;
            for (const Valley& v : f.valleys)
                for (int side = 0; side < 2; ++side)
                    if (!best || v.ends_count[side] < best->ends_count[best_side]) {
                        best = &v;
                        best_side = side;
                    }
            f.segment = best->segment;
            f.candidates.assign(pool_.begin() + best->ends_at[best_side],
                                pool_.begin() + best->ends_at[best_side] + best->ends_count[best_side]);
            // The children's table slots, read ahead while they are ordered:
            // a look-up is a cache miss in a table of megabytes, and most
            // children are dead ends that hand over to the next at once.
            for (size_t c = 0; c < std::min(f.candidates.size(), kReadAheadChildren); ++c)
                failed_.prefetch(placed_hash_ ^ zobrist_[f.candidates[c]]);
            order_candidates(f.candidates, restart, *best, work);
            ++depth;
            return true;
        };
        open();
        uint64_t visited = 0;
        while (depth > 0) {
            Frame& f = frames_[depth - 1];
            undo_to(f.trail_mark);
            if (f.next == f.candidates.size()) {
                remember_dead_end(f.key);  // every way on from here was a dead end
                pool_.resize(f.pool_mark);
                --depth;
                continue;
            }
            place(f.segment, f.candidates[f.next++]);
            keep_if_deepest();
            // The skyline's segments moved, the state's table look-up.
            work += kUnitsPerStep * 2 * skyline_.size() + kLookupUnits;
            if (placed_count_ == rows_.size()) return Outcome::Found;
            if (++visited > nodes || work >= limit) {
                undo_to(0);
                return Outcome::OutOfNodes;
            }
            if (race_key(work) > earliest.load(std::memory_order_relaxed)) {
                undo_to(0);
                return Outcome::Beaten;  // the other search settled with less work
            }
            open();
        }
        return Outcome::Exhausted;
    }

    struct Frame {
        std::vector<Valley> valleys;
        std::vector<uint32_t> candidates;
        size_t next = 0, segment = 0, trail_mark = 0, pool_mark = 0;
        StateKey key{};
    };

    const std::vector<uint32_t>& rows_;
    const uint64_t height_;
    const unsigned variant_;
    uint32_t times_ = 0;
    std::vector<uint32_t> lower_, upper_;  // time indices
    std::vector<uint64_t> size_;           // in grains
    std::vector<uint64_t> zobrist_, zobrist2_;
    std::vector<uint32_t> starting_, starting_at_, ending_, ending_at_;
    std::vector<uint32_t> mark_;
    uint32_t stamp_ = 0;
    std::vector<uint8_t> placed_;
    std::vector<uint8_t> flush_;  // flush_points of the candidates being ordered
    std::vector<uint64_t> offset_;  // in grains
    uint64_t placed_hash_ = 0, placed_hash2_ = 0;
    size_t placed_count_ = 0;
    std::vector<Segment> skyline_;
    struct Trail {
        uint32_t buffer;
        size_t at, old_count, new_count;  // skyline_[at, at + new_count) was old_count segments,
        size_t saved_at;                  // saved_[saved_at, saved_at + old_count)
    };
    std::vector<Trail> trail_;
    std::vector<Segment> saved_;
    std::vector<Frame> frames_;
    std::vector<uint32_t> pool_;  // the frames' valley lists
    std::vector<uint64_t> deepest_;
    size_t deepest_count_ = 0;
    // Dead ends proven by this search, kept across its restarts (a new one
    // takes its slot over an old one, so it holds at most its slots).
    DeadEnds failed_;
};

}  // namespace

Placement place_full_packing(const Buffers& b, uint64_t work_budget) {
    Placement out;
    out.abandoned = true;
    if (b.has_partners()) return out;
    std::vector<uint32_t> rows;
    for (uint32_t x = 0; x < b.count(); ++x)
        if (b.searched(x)) rows.push_back(x);
    if (rows.empty()) return out;
    uint64_t work = sort_work(b.count());
    // Full: every instant holds the bound or nothing. First a quick probe
    // that refuses most instances in linear time, without sorting: the live
    // bytes at three instants where some row is live must agree.
    auto live_at = [&](uint64_t t) {
        unsigned __int128 sum = 0;
        for (uint32_t x : rows)
            if (b.lower[x] <= t && t < b.upper[x]) sum += b.size[x];
        return sum;
    };
    const uint32_t first = rows.front(), middle = rows[rows.size() / 2];
    const unsigned __int128 probe = live_at(b.lower[first]);
    if (live_at(b.upper[first] - 1) != probe || live_at(b.lower[middle]) != probe) return out;
    // Then the whole sweep: the live bytes change only where a row starts or
    // ends.
    std::vector<std::pair<uint64_t, uint64_t>> starts, ends;  // (time, size)
    for (uint32_t x : rows) {
        starts.emplace_back(b.lower[x], b.size[x]);
        ends.emplace_back(b.upper[x], b.size[x]);
    }
    std::sort(starts.begin(), starts.end());
    std::sort(ends.begin(), ends.end());
    unsigned __int128 live = 0, bound = 0;
    // The instants where the live bytes change, and what they are from each on.
    std::vector<uint64_t> changes;
    std::vector<unsigned __int128> level;
    for (size_t i = 0, e = 0; i < starts.size() || e < ends.size();) {
        const uint64_t t = std::min(i < starts.size() ? starts[i].first : UINT64_MAX,
                                    e < ends.size() ? ends[e].first : UINT64_MAX);
        for (; e < ends.size() && ends[e].first == t; ++e) live -= ends[e].second;
        for (; i < starts.size() && starts[i].first == t; ++i) live += starts[i].second;
        changes.push_back(t);
        level.push_back(live);
        bound = std::max(bound, live);
    }
    for (const unsigned __int128 l : level)
        if (l != 0 && l != bound) return out;  // an instant with room: not a full packing
    if (bound > UINT64_MAX) return out;
    // Stretches that hold nothing (between components) are squeezed out of
    // the search's time: a change and the next one after nothing live share
    // one index, so a valley's chains run on across them.
    std::vector<uint32_t> index(changes.size());
    for (size_t j = 1; j < changes.size(); ++j) index[j] = index[j - 1] + (level[j - 1] != 0);
    const uint64_t capacity = static_cast<uint64_t>(bound);
    // Offsets are sums of sizes: multiples of their common divisor, which
    // must satisfy every row's alignment.
    uint64_t grain = capacity;
    for (uint32_t x : rows) grain = std::gcd(grain, b.size[x]);
    for (uint32_t x : rows)
        if (grain % b.alignment[x] != 0) return out;
    // Two searches race, each with half of what is left, on a thread each
    // where there are two: their dead ends are heavy-tailed, and two
    // courses apart finish sooner than one twice as long. The first to
    // settle (with the least work, then the lower variant) answers; the
    // other stops once it can no longer settle first. Each is charged its
    // work up to the winner's, so the answer and the work are the same on
    // one thread, where they run one after the other.
    const uint64_t share = (work_budget - std::min(work, work_budget)) / 2;
    FullPacking searches[2] = {FullPacking(b, rows, capacity, grain, changes, index, 0),
                               FullPacking(b, rows, capacity, grain, changes, index, 1)};
    FullPacking::Result result[2];
    std::atomic<uint64_t> earliest{UINT64_MAX};
    auto race = [&](unsigned t) {
        result[t] = searches[t].solve(share, earliest);
        if (result[t].settled != FullPacking::Settled::Neither) lower_to(earliest, searches[t].race_key(result[t].work));
    };
    run_two(race);
    int won = -1;  // the search that settled first
    for (int t = 0; t < 2; ++t)
        if (result[t].settled != FullPacking::Settled::Neither &&
            (won < 0 || searches[t].race_key(result[t].work) < searches[won].race_key(result[won].work)))
            won = t;
    for (int t = 0; t < 2; ++t) work += won < 0 ? result[t].work : std::min(result[t].work, result[won].work);
    const FullPacking* winner = won < 0 ? nullptr : &searches[won];
    out.work = work;
    if (!winner || result[won].settled == FullPacking::Settled::NoTiling) {
        // None found: the deepest partial tiling (of the search that proved
        // there is none, else the deeper one; both ran their course), completed by first fit
        // (its buffers in the order of their offsets, which keeps each at or
        // below it, then the others largest first), an answer above the bound.
        const FullPacking& deeper =
            winner ? *winner : searches[searches[1].deepest_count() > searches[0].deepest_count() ? 1 : 0];
        const std::vector<uint64_t>& part = deeper.deepest();
        if (part.empty()) return out;
        std::vector<uint32_t> tiled, rest;
        for (size_t i = 0; i < rows.size(); ++i) (part[i] == FullPacking::kUnplaced ? rest : tiled).push_back(static_cast<uint32_t>(i));
        std::sort(tiled.begin(), tiled.end(), [&](uint32_t i, uint32_t j) {
            return part[i] != part[j] ? part[i] < part[j] : b.rank[rows[i]] < b.rank[rows[j]];
        });
        std::sort(rest.begin(), rest.end(), [&](uint32_t i, uint32_t j) {
            return b.size[rows[i]] != b.size[rows[j]] ? b.size[rows[i]] > b.size[rows[j]] : b.rank[rows[i]] < b.rank[rows[j]];
        });
        for (uint32_t& i : tiled) i = rows[i];
        for (uint32_t& i : rest) i = rows[i];
        for (uint32_t x = 0; x < b.count(); ++x)
            if (!b.searched(x)) rest.push_back(x);
        Placement p = place_first_fit_after(b, tiled, rest);
        p.work += out.work;
        p.method = "full_packing_search";
        p.proven_bound = capacity;
        p.optimal = p.end <= capacity;
        return p;
    }
    const std::vector<uint64_t>& found = winner->offsets();
    out.offset.assign(b.count(), 0);
    for (size_t i = 0; i < rows.size(); ++i) out.offset[rows[i]] = found[i] * grain;
    out.end = capacity;
    out.proven_bound = capacity;
    out.optimal = true;
    out.method = "full_packing_search";
    out.abandoned = false;
    return out;
}

}  // namespace emel::memory
