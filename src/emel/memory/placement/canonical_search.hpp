// The exact search's decision procedure (docs/strategies.md §5): can the
// buffers be placed under a capacity? Branch and bound over canonical
// placements, after MiniMalloc (Moffitt, ASPLOS 2023). Buffers are placed in
// non-decreasing offset order, each at the lowest offset above the conflicting
// buffers already placed — every placement can be pushed down into that form
// without growing, so the search is complete. Pruning:
//  - dominance: never place a buffer at or above the lowest top any unplaced
//    buffer could reach (that would leave a gap some buffer must fill later);
//  - section inference: in every time section, the floor plus the bytes still
//    to place there must fit under the capacity;
//  - failed states: a state already searched without a completion is not
//    searched again (failed_states.hpp);
//  - twins: of buffers the search cannot tell apart, each is placed only
//    after the one before it (one order of a stack, not all of them).
// The search is budgeted in work units (nodes, the conflicts and sections
// they touch), never in wall time. Who runs it: the preorder race
// (preorder_race.hpp), the capacity ladder (capacity_ladder.hpp) and the
// neighbourhood searches (neighbourhood_search.cpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <tuple>
#include <utility>
#include <vector>

#include "emel/memory/core/checked_math.hpp"
#include "emel/memory/placement/failed_states.hpp"
#include "emel/memory/placement/placement.hpp"
#include "emel/memory/placement/turnstile.hpp"
#include "emel/memory/placement/worker_pool.hpp"

namespace emel::memory::exact {

enum class Outcome { Found, Infeasible, OutOfBudget };

// The search recurses once per buffer placed (a few hundred bytes a level,
// more under sanitizers): deeper than this it runs on a stack of its own,
// kStackBase + kStackPerLevel per level.
constexpr size_t kCallerStackLevels = 1000;
constexpr size_t kStackBase = size_t{1} << 20, kStackPerLevel = 4096;

// A stack that holds a search `levels` deep.
inline size_t stack_bytes_for(size_t levels) { return kStackBase + kStackPerLevel * levels; }

// Runs fn() here when this thread's stack holds a search `levels` deep (up to
// kCallerStackLevels, or any depth when `deep_stack`: the thread was made
// for it), else on a thread with a stack of its own; false (fn not run) when
// the system refuses that thread.
inline bool run_with_stack_for(size_t levels, const std::function<void()>& fn, bool deep_stack = false) {
    if (deep_stack || levels <= kCallerStackLevels) {
        fn();
        return true;
    }
    return run_on_stack(stack_bytes_for(levels), fn);
}

// Work a racing search does before giving its turn to one that waits.
constexpr uint64_t kTurnWork = uint64_t{1} << 20;

// What every search of one instance shares and none changes: the buffers
// that matter, their sections and their conflicts.
struct CanonicalInstance {
    explicit CanonicalInstance(const Buffers& b_) : b(b_), n(b_.count()) {
        // A buffer that is never live or holds no bytes constrains nothing:
        // it stays at offset 0 outside the search. (A zero-size buffer in the
        // search would make its own offset the "lowest top", and dominance
        // would then cut every branch: a false infeasibility proof.)
        std::vector<uint64_t> ends;
        for (size_t x = 0; x < n; ++x)
            if (b_.searched(static_cast<uint32_t>(x))) {
                active.push_back(static_cast<uint32_t>(x));
                ends.push_back(b_.upper[x]);
            }
        std::sort(ends.begin(), ends.end());
        ends.erase(std::unique(ends.begin(), ends.end()), ends.end());
        // Sections, as MiniMalloc's sweep makes them: one per distinct end
        // time e, holding the buffers live just before e (lower < e <= upper).
        // Two buffers are live together exactly when they share a section
        // (both hold the earlier of their two ends), and every maximal set of
        // buffers live together is a section, so the section checks lose
        // nothing against one section per time step, with far fewer sections.
        sections = ends.size();
        from.assign(n, 0);
        to.assign(n, 0);
        in_section.resize(sections);
        // Each section's list sized first (a difference array over the
        // spans), then filled in buffer order.
        std::vector<uint32_t> members(sections + 1, 0);
        for (uint32_t x : active) {
            from[x] = static_cast<uint32_t>(std::upper_bound(ends.begin(), ends.end(), b_.lower[x]) - ends.begin());
            to[x] = static_cast<uint32_t>(std::lower_bound(ends.begin(), ends.end(), b_.upper[x]) - ends.begin()) + 1;
            ++members[from[x]];
            --members[to[x]];
        }
        uint32_t live = 0;
        for (size_t s = 0; s < sections; ++s) {
            live += members[s];  // a decrement wraps back, as unsigned sums do
            in_section[s].reserve(live);
        }
        for (uint32_t x : active)
            for (uint32_t s = from[x]; s < to[x]; ++s) in_section[s].push_back(x);
        // Conflicts by a sweep in start order (each pair once: a buffer meets
        // the later-starting ones that start before it ends), twice: counting
        // each list's length, then filling the lists, sized once; then each
        // list in buffer order (a bitmap of the buffers where the list is
        // long, a sort where short): O(n log n + pairs + n^2/64).
        std::vector<uint32_t> by_start = active;
        std::stable_sort(by_start.begin(), by_start.end(),
                         [&](uint32_t x, uint32_t y) { return b_.lower[x] < b_.lower[y]; });
        std::vector<uint64_t> start_of(by_start.size());
        for (size_t i = 0; i < by_start.size(); ++i) start_of[i] = b_.lower[by_start[i]];
        auto sweep = [&](auto&& meet) {
            for (size_t i = 0; i < by_start.size(); ++i) {
                const uint64_t end = b_.upper[by_start[i]];
                for (size_t j = i + 1; j < by_start.size() && start_of[j] < end; ++j) meet(by_start[i], by_start[j]);
            }
        };
        std::vector<uint32_t> filled(n, 0);
        sweep([&](uint32_t x, uint32_t y) {
            ++filled[x];
            ++filled[y];
        });
        conflicts.resize(n);
        for (uint32_t x : active) {
            conflicts[x].resize(filled[x]);
            filled[x] = 0;
        }
        sweep([&](uint32_t x, uint32_t y) {
            conflicts[x][filled[x]++] = y;
            conflicts[y][filled[y]++] = x;
        });
        std::vector<uint64_t> bits((n + 63) / 64, 0);
        for (uint32_t x : active) {
            std::vector<uint32_t>& list = conflicts[x];
            if (list.size() * 4 < bits.size()) {
                std::sort(list.begin(), list.end());
                continue;
            }
            for (uint32_t y : list) bits[y >> 6] |= uint64_t{1} << (y & 63);
            size_t k = 0;
            for (size_t w = 0; w < bits.size(); ++w) {
                for (uint64_t word = bits[w]; word != 0; word &= word - 1)
                    list[k++] = static_cast<uint32_t>(w * 64 + static_cast<unsigned>(__builtin_ctzll(word)));
                bits[w] = 0;
            }
        }
        if (b_.has_partners())
            for (uint32_t x : active)
                for (uint32_t y : b_.partners[x])
                    if (from[y] < to[y] && !b_.live_together(x, y)) conflicts[x].push_back(y);
        // Twins: buffers the search cannot tell apart (the same sections, so
        // the same conflicts; the same size and alignment; no partners). Any
        // placement stays valid with twins swapped, so a twin is placed only
        // after the one before it, and no stack is searched in two orders.
        // The preorders' fixed keys: W, the lifetime's length, and A, the area.
        length.assign(n, 0);
        area.assign(n, 0);
        for (uint32_t x : active) {
            length[x] = b_.upper[x] - b_.lower[x];
            area[x] = static_cast<unsigned __int128>(length[x]) * b_.size[x];
        }
        twin_before.assign(n, kNoTwin);
        std::vector<uint32_t> xs;
        for (uint32_t x : active)
            if (!b_.has_partners() || b_.partners[x].empty()) xs.push_back(x);
        const auto twin_key = [&](uint32_t x) { return std::tie(from[x], to[x], b_.size[x], b_.alignment[x]); };
        std::sort(xs.begin(), xs.end(), [&](uint32_t x, uint32_t y) {
            return std::tuple_cat(twin_key(x), std::tie(x)) < std::tuple_cat(twin_key(y), std::tie(y));
        });
        for (size_t i = 1; i < xs.size(); ++i)
            if (twin_key(xs[i - 1]) == twin_key(xs[i])) twin_before[xs[i]] = xs[i - 1];
        initial_total.assign(sections, 0);
        for (uint32_t x : active)
            for (uint32_t s = from[x]; s < to[x]; ++s) initial_total[s] += b_.size[x];
        initial_cuts.assign(sections > 0 ? sections - 1 : 0, 0);
        for (uint32_t x : active)
            for (uint32_t c = from[x]; c + 1 < to[x]; ++c) ++initial_cuts[c];
    }

    const Buffers& b;
    size_t n;
    size_t sections = 0;
    std::vector<uint32_t> from, to, active;
    std::vector<std::vector<uint32_t>> in_section, conflicts;
    std::vector<uint64_t> initial_total;
    std::vector<uint32_t> initial_cuts;
    static constexpr uint32_t kNoTwin = UINT32_MAX;
    std::vector<uint32_t> twin_before;  // the twin placed before each buffer, or kNoTwin
    std::vector<uint64_t> length;          // upper - lower
    std::vector<unsigned __int128> area;   // length x size
};

// One decision problem: do the buffers fit below `capacity`? A search holds
// its own state over a shared instance, so several can run at once.
class CanonicalSearch {
  public:
    explicit CanonicalSearch(const CanonicalInstance& in) : in_(in), failed_(in.active.size()) {
        // Each buffer's two random keys for the state hash (fixed seed).
        Rng rng;
        state_keys_.resize(in.n);
        for (auto& k : state_keys_) k = {rng.next(), rng.next()};
    }

    // One search in preorder `heuristic` under `capacity`: stopped once its
    // work passes `limit`, or once it can no longer settle first in the race
    // whose earliest settle so far is `earliest` (a race_key). `work` is
    // what it did; a search that settles sets its offsets when it found a
    // placement.
    Outcome run(uint64_t capacity, int heuristic, uint64_t limit, const std::atomic<uint64_t>* earliest,
                Turnstile* turns, std::vector<uint64_t>& offsets, uint64_t& work) {
        reset(capacity, heuristic, limit, earliest, turns, offsets);
        twins_ = true;
        const Outcome r = solve_from_start(Partition{in_.active, 0, static_cast<uint32_t>(in_.sections)});
        work += ops_;
        return r;
    }

    // The search of a neighbourhood: the buffers not in `free` stay where
    // `fixed` puts them, as obstacles, and the free ones are searched under
    // `capacity` around them. A free buffer's lowest offset is then the
    // lowest at or above the tops of the conflicting free buffers placed
    // before it that clears its obstacles: every pushed-down placement of the
    // free buffers is still a canonical one, and dominance and the section
    // checks (over the free bytes only) still hold. Found, or not: a failure
    // proves nothing about the instance.
    // `given`, when set, holds each buffer's obstacles from outside the
    // instance ((offset, top) pairs), for an instance of free buffers only.
    // `cancel`, when set, stops the search (out of budget) once it holds 0.
    // `by_fixed`, when set (and `given` is not), holds the searched buffers
    // sorted by their (offset, top) in `fixed`: a free buffer with many
    // conflicts then gathers its obstacles in order by one walk over it
    // instead of sorting them (the same lists, charged the same).
    Outcome run_around(uint64_t capacity, int heuristic, uint64_t limit, const std::vector<uint8_t>& free,
                       const std::vector<uint64_t>& fixed, std::vector<uint64_t>& offsets, uint64_t& work,
                       const std::vector<std::vector<std::pair<uint64_t, uint64_t>>>* given = nullptr,
                       const std::atomic<uint64_t>* cancel = nullptr,
                       const std::vector<uint32_t>* by_fixed = nullptr) {
        reset(capacity, heuristic, limit, cancel, nullptr, offsets);
        ops_ += in_.n + in_.sections;  // the state set afresh
        obstacles_.resize(in_.n);
        Partition part{{}, 0, static_cast<uint32_t>(in_.sections)};
        for (uint32_t x : in_.active) {
            if (free[x]) {
                part.buffers.push_back(x);
                continue;
            }
            placed_[x] = 1;
            set_open(x, UINT64_MAX);
            offsets[x] = fixed[x];
        }
        // The unplaced bytes of each section and the unplaced buffers across
        // each cut: the free buffers' alone, summed afresh, not the fixed
        // ones' taken off (they may span every section; the same values).
        std::fill(total_.begin(), total_.end(), 0);
        std::fill(cuts_.begin(), cuts_.end(), 0);
        for (uint32_t y : part.buffers) {
            for (uint32_t s = in_.from[y]; s < in_.to[y]; ++s) total_[s] += in_.b.size[y];
            for (uint32_t c = in_.from[y]; c + 1 < in_.to[y]; ++c) ++cuts_[c];
        }
        if (by_fixed && conflict_mark_.size() != in_.n) conflict_mark_.assign(in_.n, 0);
        for (uint32_t y : part.buffers) {
            auto& obs = obstacles_[y];
            obs.clear();
            const std::vector<uint32_t>& conflicts = in_.conflicts[y];
            // Sorting c obstacles costs about c·log2(c) steps; the walk, one a searched buffer.
            if (by_fixed && !given && conflicts.size() * 8 > by_fixed->size()) {
                ++mark_;
                for (uint32_t z : conflicts)
                    if (!free[z]) conflict_mark_[z] = mark_;
                for (uint32_t z : *by_fixed)
                    if (conflict_mark_[z] == mark_) obs.emplace_back(fixed[z], fixed[z] + in_.b.size[z]);
            } else {
                for (uint32_t z : conflicts)
                    if (!free[z]) obs.emplace_back(fixed[z], fixed[z] + in_.b.size[z]);
                if (given) obs.insert(obs.end(), (*given)[y].begin(), (*given)[y].end());
                std::sort(obs.begin(), obs.end());
            }
            ops_ += 2 * (in_.conflicts[y].size() + obs.size());
            min_offset_[y] = clear_of_obstacles(y, 0);
            set_open(y, min_offset_[y]);
        }
        with_obstacles_ = true;
        twins_ = given == nullptr;
        const Outcome r = solve_from_start(part) == Outcome::Found ? Outcome::Found : Outcome::OutOfBudget;
        with_obstacles_ = false;
        work += ops_;
        return r;
    }

    // Keeps this run's failures for the later runs (failed_states.hpp);
    // returns the work it took.
    uint64_t keep_failures() { return failed_.commit(capacity_); }

    // Which search of a race settles first: the one with the lowest key, the
    // work it did to settle, then its preorder.
    static uint64_t race_key(uint64_t work, int heuristic) {
        return work * kHeuristics + static_cast<uint64_t>(heuristic);
    }

    // MiniMalloc's default preorders "WAT", "TAW", "TWA": W = the lifetime's
    // length, A = area (size x length), T = the largest total of unplaced
    // bytes in the sections the buffer spans, taken when a partition starts.
    static constexpr int kHeuristics = 3;

  private:
    void reset(uint64_t capacity, int heuristic, uint64_t limit, const std::atomic<uint64_t>* earliest,
               Turnstile* turns, std::vector<uint64_t>& offsets) {
        capacity_ = capacity;
        heuristic_ = heuristic;
        ops_ = 0;
        ops_limit_ = limit;
        earliest_ = earliest;
        turns_ = turns;
        next_turn_ = kTurnWork;
        offsets.assign(in_.n, 0);
        key_t_.assign(in_.n, 0);
        min_offset_.assign(in_.n, 0);
        open_min_.assign(in_.n, 0);
        open_top_ = in_.b.size;  // every lowest offset 0
        placed_.assign(in_.n, 0);
        floor_.assign(in_.sections, 0);
        total_ = in_.initial_total;
        cuts_ = in_.initial_cuts;
        offsets_ = &offsets;
    }

    // The lowest offset at or above `offset` (aligned) where y clears its
    // obstacles, which are sorted by offset: one pass, since the offset only rises.
    uint64_t clear_of_obstacles(uint32_t y, uint64_t offset) {
        const uint64_t size = in_.b.size[y];
        for (const auto& [bottom, top] : obstacles_[y]) {
            ++ops_;
            if (top <= offset) continue;
            if (offset > UINT64_MAX - size || bottom >= offset + size) break;
            auto raised = checked_align_up(top, in_.b.alignment[y]);
            if (!raised) return UINT64_MAX;
            offset = *raised;
        }
        return offset;
    }

    // A set of buffers that can be placed independently of all others: no
    // unplaced buffer outside it shares a section with it.
    struct Partition {
        std::vector<uint32_t> buffers;  // in the partition's preorder
        uint32_t first, last;           // its sections [first, last)
        uint64_t order_hash = 0;        // of `buffers`: a state key holds it
    };

    // The buffers of `part`, none placed yet: checked, then split where no
    // buffer spans a time boundary (those ranges are independent from the start).
    Outcome solve_from_start(const Partition& part) {
        failed_.begin_run();
        state_ = StateKey{};
        for (uint32_t x : in_.active) toggle_state(x);
        ops_ += in_.active.size();
        if (!check(0, part)) return Outcome::Infeasible;
        std::vector<uint32_t> cutpoints{0};
        if (!in_.b.has_partners())
            for (uint32_t c = 0; c + 1 < in_.sections; ++c)
                if (cuts_[c] == 0) cutpoints.push_back(c + 1);
        return solve_pieces(part, cutpoints);
    }

    void preorder(std::vector<uint32_t>& xs) {
        std::vector<uint64_t>& t = key_t_;
        for (uint32_t x : xs) {
            t[x] = 0;
            for (uint32_t s = in_.from[x]; s < in_.to[x]; ++s) t[x] = std::max(t[x], total_[s]);
            ops_ += in_.to[x] - in_.from[x];
        }
        const int h = heuristic_;
        std::sort(xs.begin(), xs.end(), [&](uint32_t x, uint32_t y) {
            const uint64_t wx = in_.length[x], wy = in_.length[y];
            const unsigned __int128 ax = in_.area[x], ay = in_.area[y];
            const auto before = [](auto a1, auto b1, auto a2, auto b2, auto a3, auto b3) {
                if (a1 != b1) return a1 > b1 ? -1 : 1;
                if (a2 != b2) return a2 > b2 ? -1 : 1;
                if (a3 != b3) return a3 > b3 ? -1 : 1;
                return 0;
            };
            int c = 0;
            if (h == 0) c = before(wx, wy, ax, ay, t[x], t[y]);
            if (h == 1) c = before(t[x], t[y], ax, ay, wx, wy);
            if (h == 2) c = before(t[x], t[y], wx, wy, ax, ay);
            if (c != 0) return c < 0;
            return in_.b.rank[x] < in_.b.rank[y];
        });
        ops_ += xs.size() * 4;
    }

    // Solves the pieces of `part` between consecutive cutpoints one by one,
    // each with a preorder of its own (MiniMalloc's SubSolve).
    Outcome solve_pieces(const Partition& part, std::vector<uint32_t>& cutpoints) {
        cutpoints.push_back(part.last);
        // No unplaced buffer spans a cutpoint: each lies in one piece, found
        // by one pass (a piece solved leaves its buffers unplaced again on
        // its way back, so the pieces' members do not change meanwhile).
        std::vector<std::vector<uint32_t>> members(cutpoints.size());
        for (uint32_t y : part.buffers) {
            if (placed_[y]) continue;
            const size_t k = std::max<size_t>(
                std::upper_bound(cutpoints.begin(), cutpoints.end(), in_.from[y]) - cutpoints.begin(), 1);
            if (k < cutpoints.size() && in_.to[y] > cutpoints[k - 1]) members[k].push_back(y);
        }
        Outcome r = Outcome::Found;
        for (size_t k = 1; k < cutpoints.size() && r == Outcome::Found; ++k) {
            Partition piece{std::move(members[k]), cutpoints[k - 1], cutpoints[k]};
            ops_ += part.buffers.size();  // charged as a scan of the partition per piece
            if (piece.buffers.empty()) continue;
            preorder(piece.buffers);
            for (uint32_t y : piece.buffers) piece.order_hash = mix64(piece.order_hash + y + 1);
            r = search(piece, 0, 0);
        }
        return r;
    }

    bool check(uint64_t offset, const Partition& part) {
        ops_ += part.last - part.first;
        for (size_t s = part.first; s < part.last; ++s) {
            const uint64_t base = std::max(offset, floor_[s]);
            if (total_[s] > capacity_ || base > capacity_ - total_[s]) return false;
        }
        return true;
    }

    // The state hash holds, for every searched buffer, "placed" or its lowest
    // offset: what is left to search depends on nothing else (an unplaced
    // buffer goes exactly at its lowest offset when chosen; the floors only
    // prune). Toggling a buffer's term out, changing it, and toggling it
    // back in keeps the hash current.
    void toggle_state(uint32_t x) {
        const uint64_t v = placed_[x] ? UINT64_MAX : min_offset_[x];
        state_.a ^= mix64(v ^ state_keys_[x].a);
        state_.b ^= mix64(v + state_keys_[x].b);
    }

    // A node of the search: its state, and the canonical order's constraint
    // on what comes next (at or above prev_offset; at it, after prev_index in
    // this partition's preorder).
    Outcome search(const Partition& part, uint64_t prev_offset, uint32_t prev_index) {
        const uint64_t context =
            mix64(mix64(mix64(prev_offset) ^ (uint64_t{prev_index} << 32 | part.first)) ^ part.order_hash) + part.last;
        const StateKey key{state_.a ^ context, state_.b + mix64(context ^ 0x5851F42D4C957F2Dull)};
        ops_ += 2;
        // A failure kept from an earlier run holds here when it was proven
        // under this capacity or more, but never in a neighbourhood: there
        // the obstacles are part of the state.
        if (failed_.failed_in_run(key) || (!with_obstacles_ && failed_.failed_at_or_above(key, capacity_)))
            return Outcome::Infeasible;
        const Outcome r = search_node(part, prev_offset, prev_index);
        if (r == Outcome::Infeasible) failed_.insert(key);
        return r;
    }

    Outcome search_node(const Partition& part, uint64_t prev_offset, uint32_t prev_index) {
        if (ops_ > ops_limit_) return Outcome::OutOfBudget;
        if (earliest_ && race_key(ops_, heuristic_) > earliest_->load(std::memory_order_relaxed))
            return Outcome::OutOfBudget;  // another search of the race has settled sooner
        if (turns_ && ops_ >= next_turn_) {
            turns_->yield(heuristic_);
            next_turn_ = ops_ + kTurnWork;
        }
        ops_ += 4 * part.buffers.size();  // building and sorting the ordering
        uint64_t min_height = UINT64_MAX;
        for (uint32_t x : part.buffers) min_height = std::min(min_height, open_top_[x]);
        if (min_height == UINT64_MAX) {  // all placed (or a top at 2^64-1: looked at again)
            bool any_unplaced = false;
            for (uint32_t x : part.buffers) any_unplaced = any_unplaced || !placed_[x];
            if (!any_unplaced) return Outcome::Found;
        }
        // The children to try, by (lowest offset, position in the preorder):
        // canonical order (offsets never decrease; equal offsets by preorder),
        // dominance (below the lowest top any unplaced buffer could reach)
        // and the capacity leave out the rest before sorting.
        if (orderings_.size() <= depth_) orderings_.resize(depth_ + 1);
        auto& ordering = orderings_[depth_];
        ordering.clear();
        for (uint32_t k = 0; k < part.buffers.size(); ++k) {
            const uint32_t x = part.buffers[k];
            const uint64_t offset = min_offset_[x];
            if (placed_[x] || offset >= min_height) continue;
            if (twins_ && in_.twin_before[x] != CanonicalInstance::kNoTwin && !placed_[in_.twin_before[x]]) continue;
            if (offset < prev_offset || (offset == prev_offset && k < prev_index)) continue;
            if (offset > capacity_ || in_.b.size[x] > capacity_ - offset) continue;
            ordering.emplace_back(offset, k);
        }
        std::sort(ordering.begin(), ordering.end());
        ++depth_;
        struct Leave {
            size_t& depth;
            ~Leave() { --depth; }
        } leave{depth_};
        for (const auto& [offset, index] : ordering) {
            const uint32_t x = part.buffers[index];
            const size_t mark_min = min_log_.size(), mark_floor = floor_log_.size();
            const StateKey state_before = state_;
            const bool hatless = place(x, offset);
            Outcome r = Outcome::Infeasible;
            if (check(offset, part)) r = decompose(part, x, offset, index);
            unplace(x, mark_min, mark_floor);
            state_ = state_before;
            if (r != Outcome::Infeasible) return r;
            // A node's children can cost far more than the node (each placed
            // child rescans its raised neighbours' sections): the limit holds
            // between them too.
            if (ops_ > ops_limit_) return Outcome::OutOfBudget;
            // Nothing unplaced lives beside x: it constrained no one, so the
            // failure below does not depend on choosing x; other choices fail too.
            if (hatless) break;
        }
        return Outcome::Infeasible;
    }

    // After x is placed: continue in the same partition, or, when x was the
    // last buffer holding sections together, solve the pieces one by one.
    Outcome decompose(const Partition& part, uint32_t x, uint64_t offset, uint32_t index) {
        // This depth's list, kept from node to node (no allocation per node).
        if (cut_lists_.size() <= depth_) cut_lists_.resize(depth_ + 1);
        std::vector<uint32_t>& cutpoints = cut_lists_[depth_];
        cutpoints.assign(1, part.first);
        for (uint32_t c = in_.from[x]; c + 1 < in_.to[x]; ++c)
            if (--cuts_[c] == 0 && c + 1 > part.first && c + 1 < part.last) cutpoints.push_back(c + 1);
        Outcome r;
        if (cutpoints.size() == 1 || in_.b.has_partners()) {
            r = search(part, offset, index);
        } else {
            r = solve_pieces(part, cutpoints);
        }
        for (uint32_t c = in_.from[x]; c + 1 < in_.to[x]; ++c) ++cuts_[c];
        return r;
    }

    // Places x; true when no unplaced buffer conflicts with it ("hatless").
    bool place(uint32_t x, uint64_t offset) {
        const size_t mark_raised = min_log_.size();
        toggle_state(x);
        placed_[x] = 1;
        toggle_state(x);
        set_open(x, UINT64_MAX);
        (*offsets_)[x] = offset;
        const uint64_t height = offset + in_.b.size[x];
        bool hatless = true;
        for (uint32_t y : in_.conflicts[x]) {
            if (placed_[y]) continue;
            hatless = false;
            if (min_offset_[y] >= height) continue;
            min_log_.push_back({y, min_offset_[y]});
            toggle_state(y);
            auto raised = checked_align_up(height, in_.b.alignment[y]);
            min_offset_[y] = raised ? *raised : UINT64_MAX;
            if (with_obstacles_ && raised) min_offset_[y] = clear_of_obstacles(y, min_offset_[y]);
            set_open(y, min_offset_[y]);
            toggle_state(y);
        }
        {
            // x's sections, logged in one stretch (no capacity check per section).
            const uint32_t first = in_.from[x], last = in_.to[x];
            const size_t logged = floor_log_.size();
            floor_log_.resize(logged + (last - first));
            std::pair<uint32_t, uint64_t>* log = floor_log_.data() + logged;
            uint64_t* floor = floor_.data();
            uint64_t* total = total_.data();
            const uint64_t size = in_.b.size[x];
            for (uint32_t s = first; s < last; ++s, ++log) {
                *log = {s, floor[s]};
                floor[s] = height;
                total[s] -= size;
            }
        }
        ops_ += in_.conflicts[x].size() + (in_.to[x] - in_.from[x]) + 2 * (min_log_.size() - mark_raised + 1);
        // A section's floor is at least the lowest offset any unplaced buffer in
        // it can take: revisit the sections of the buffers whose offsets rose.
        ++stamp_;
        if (section_stamp_.size() != in_.sections) section_stamp_.assign(in_.sections, 0);
        auto revisit = [&](uint32_t s, uint64_t y_min) {
            // The section's lowest reachable offset is at most y's: a floor
            // already there cannot rise (the sections x spans, above all).
            if (section_stamp_[s] == stamp_ || floor_[s] >= y_min) return;
            section_stamp_[s] = stamp_;
            // Scanned only until some buffer there can go as low as the floor.
            const uint64_t lowest = lowest_open_above(s, floor_[s]);
            if (lowest != UINT64_MAX && floor_[s] < lowest) {
                floor_log_.push_back({s, floor_[s]});
                floor_[s] = lowest;
            }
        };
        for (size_t k = mark_raised; k < min_log_.size(); ++k) {
            const uint32_t y = min_log_[k].first;
            ops_ += 2 * (in_.to[y] - in_.from[y]);  // the sections looked at (two reads each)
            const uint64_t y_min = open_min_[y];
            if (y_min <= height) {
                // x's own sections hold floor `height` (or were revisited
                // already): only y's sections outside x's can rise.
                for (uint32_t s = in_.from[y]; s < std::min(in_.to[y], in_.from[x]); ++s) revisit(s, y_min);
                for (uint32_t s = std::max(in_.from[y], in_.to[x]); s < in_.to[y]; ++s) revisit(s, y_min);
            } else {
                for (uint32_t s = in_.from[y]; s < in_.to[y]; ++s) revisit(s, y_min);
            }
        }
        return hatless;
    }

    // The lowest offset an unplaced buffer of section s can take, scanned in
    // the section's order until one at or below `floor` (then that one's:
    // the floor cannot rise); the scan's length is charged. Four at a time:
    // this loop is most of the search's time.
    uint64_t lowest_open_above(size_t s, uint64_t floor) {
        const uint32_t* z = in_.in_section[s].data();
        const size_t m = in_.in_section[s].size();
        uint64_t lowest = UINT64_MAX;
        size_t i = 0;
        for (; i + 4 <= m; i += 4) {
            const uint64_t a = open_min_[z[i]], b = open_min_[z[i + 1]], c = open_min_[z[i + 2]],
                           d = open_min_[z[i + 3]];
            const uint64_t low4 = std::min(std::min(a, b), std::min(c, d));
            if (low4 <= floor) {
                ops_ += i + (a <= floor ? 1 : b <= floor ? 2 : c <= floor ? 3 : 4);
                return low4;
            }
            lowest = std::min(lowest, low4);
        }
        for (; i < m; ++i) {
            const uint64_t v = open_min_[z[i]];
            if (v <= floor) {
                ops_ += i + 1;
                return v;
            }
            lowest = std::min(lowest, v);
        }
        ops_ += m;
        return lowest;
    }

    void unplace(uint32_t x, size_t mark_min, size_t mark_floor) {
        for (size_t k = floor_log_.size(); k > mark_floor; --k) floor_[floor_log_[k - 1].first] = floor_log_[k - 1].second;
        floor_log_.resize(mark_floor);
        while (min_log_.size() > mark_min) {
            min_offset_[min_log_.back().first] = min_log_.back().second;
            set_open(min_log_.back().first, min_log_.back().second);
            min_log_.pop_back();
        }
        for (uint32_t s = in_.from[x]; s < in_.to[x]; ++s) total_[s] += in_.b.size[x];
        placed_[x] = 0;
        set_open(x, min_offset_[x]);
    }

    const CanonicalInstance& in_;
    // search state
    int heuristic_ = 0;
    uint64_t capacity_ = 0, ops_ = 0, ops_limit_ = 0, next_turn_ = 0;
    uint64_t stamp_ = 0;
    std::vector<uint64_t> section_stamp_, key_t_;
    std::vector<uint32_t> cuts_;
    std::vector<uint64_t> min_offset_, floor_, total_;
    // min_offset_ of the unplaced buffers, UINT64_MAX for the placed: a
    // section's lowest reachable offset is a plain minimum over its buffers.
    std::vector<uint64_t> open_min_;
    // open_min_ + size for the unplaced (wrapping as the sum always did),
    // UINT64_MAX for the placed: the lowest top a node looks for, one read a buffer.
    std::vector<uint64_t> open_top_;
    void set_open(uint32_t x, uint64_t v) {
        open_min_[x] = v;
        open_top_[x] = v == UINT64_MAX && placed_[x] ? UINT64_MAX : v + in_.b.size[x];
    }
    // The children of each node on the current path, by depth (a deque: growing
    // it leaves the levels above, which are being iterated, where they are).
    std::deque<std::vector<std::pair<uint64_t, uint32_t>>> orderings_;
    // decompose()'s cutpoints by depth (a deque, for the same reason).
    std::deque<std::vector<uint32_t>> cut_lists_;
    size_t depth_ = 0;
    std::vector<uint8_t> placed_;
    std::vector<std::pair<uint32_t, uint64_t>> min_log_, floor_log_;
    std::vector<uint64_t>* offsets_ = nullptr;
    const std::atomic<uint64_t>* earliest_ = nullptr;
    Turnstile* turns_ = nullptr;
    // run_around(): each free buffer's fixed conflicting buffers, (offset, top) by offset.
    bool with_obstacles_ = false;
    // Twins go in order (CanonicalInstance::twin_before), unless obstacles
    // from outside the instance can tell them apart.
    bool twins_ = true;
    // Failed states (failed_states.hpp): the current state's hash, and each
    // buffer's two random keys for it.
    FailedStates failed_;
    StateKey state_;
    std::vector<StateKey> state_keys_;
    std::vector<std::vector<std::pair<uint64_t, uint64_t>>> obstacles_;
    std::vector<uint64_t> conflict_mark_;  // run_around(): == mark_ for a free buffer's fixed conflicts
    uint64_t mark_ = 0;
};

}  // namespace emel::memory::exact
