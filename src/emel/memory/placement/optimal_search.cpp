// optimal (docs/strategies.md §5): branch and bound over canonical placements,
// after MiniMalloc (Moffitt, ASPLOS 2023). Buffers are placed in
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
// they touch), never in wall time.
#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <numeric>
#include <tuple>

#include "emel/memory/core/checked_math.hpp"
#include "emel/memory/placement/failed_states.hpp"
#include "emel/memory/placement/placement.hpp"
#include "emel/memory/placement/worker_pool.hpp"

namespace emel::memory {

namespace {

enum class Outcome { Found, Infeasible, OutOfBudget };

// Instances with fewer buffers to search race their preorders on one thread
// (restarting them with doubling limits); larger ones on a thread each. The
// environment variable EMEL_SEARCH_THREADS_FROM moves the line, so that tests
// can check that both ways give the same answer.
size_t search_threads_from() {
    return static_cast<size_t>(env_count("EMEL_SEARCH_THREADS_FROM", 0, SIZE_MAX).value_or(64));
}
// The search recurses once per buffer placed (a few hundred bytes a level,
// more under sanitizers): deeper than this it runs on a stack of its own,
// kStackBase + kStackPerLevel per level.
constexpr size_t kCallerStackLevels = 1000;
constexpr size_t kStackBase = size_t{1} << 20, kStackPerLevel = 4096;
// Window neighbourhoods (improve_by_windows): at most this many buffers
// freed, and a window reaches at most 2^(this - 1) lifetimes past its top
// buffer's on each side.
constexpr size_t kWindowFreed = 2048;
constexpr unsigned kWidenings = 4;
// Work a racing search does before giving its turn to one that waits.
constexpr uint64_t kTurnWork = uint64_t{1} << 20;

// Lets at most `permits` racing searches run at once, in turns: a search that
// has used its turn queues behind the ones waiting.
class Turnstile {
  public:
    explicit Turnstile(unsigned permits) : free_(permits) {}
    void enter(int who) {
        std::unique_lock<std::mutex> lock(mutex_);
        queue_.push_back(who);
        turn_.wait(lock, [&] { return free_ > 0 && queue_.front() == who; });
        queue_.pop_front();
        --free_;
        turn_.notify_all();  // the next in line may find a permit free too
    }
    void leave() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            ++free_;
        }
        turn_.notify_all();
    }
    void yield(int who) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (queue_.empty()) return;
        }
        leave();
        enter(who);
    }

  private:
    std::mutex mutex_;
    std::condition_variable turn_;
    std::deque<int> queue_;
    unsigned free_;
};

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
        for (uint32_t x : active) {
            from[x] = static_cast<uint32_t>(std::upper_bound(ends.begin(), ends.end(), b_.lower[x]) - ends.begin());
            to[x] = static_cast<uint32_t>(std::lower_bound(ends.begin(), ends.end(), b_.upper[x]) - ends.begin()) + 1;
            for (uint32_t s = from[x]; s < to[x]; ++s) in_section[s].push_back(x);
        }
        // Conflicts by a sweep in start order (each pair once: a buffer meets
        // the later-starting ones that start before it ends), each list then
        // in buffer order: O(n log n + pairs), not n^2.
        conflicts.resize(n);
        std::vector<uint32_t> by_start = active;
        std::stable_sort(by_start.begin(), by_start.end(),
                         [&](uint32_t x, uint32_t y) { return b_.lower[x] < b_.lower[y]; });
        for (size_t i = 0; i < by_start.size(); ++i)
            for (size_t j = i + 1; j < by_start.size() && b_.lower[by_start[j]] < b_.upper[by_start[i]]; ++j) {
                conflicts[by_start[i]].push_back(by_start[j]);
                conflicts[by_start[j]].push_back(by_start[i]);
            }
        for (uint32_t x : active) std::sort(conflicts[x].begin(), conflicts[x].end());
        if (b_.has_partners())
            for (uint32_t x : active)
                for (uint32_t y : b_.partners[x])
                    if (from[y] < to[y] && !b_.live_together(x, y)) conflicts[x].push_back(y);
        // Twins: buffers the search cannot tell apart (the same sections, so
        // the same conflicts; the same size and alignment; no partners). Any
        // placement stays valid with twins swapped, so a twin is placed only
        // after the one before it, and no stack is searched in two orders.
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
    Outcome run_around(uint64_t capacity, int heuristic, uint64_t limit, const std::vector<uint8_t>& free,
                       const std::vector<uint64_t>& fixed, std::vector<uint64_t>& offsets, uint64_t& work,
                       const std::vector<std::vector<std::pair<uint64_t, uint64_t>>>* given = nullptr) {
        reset(capacity, heuristic, limit, nullptr, nullptr, offsets);
        ops_ += in_.n + in_.sections;  // the state set afresh
        obstacles_.resize(in_.n);
        Partition part{{}, 0, static_cast<uint32_t>(in_.sections)};
        for (uint32_t x : in_.active) {
            if (free[x]) {
                part.buffers.push_back(x);
                continue;
            }
            placed_[x] = 1;
            open_min_[x] = UINT64_MAX;
            offsets[x] = fixed[x];
            for (uint32_t s = in_.from[x]; s < in_.to[x]; ++s) total_[s] -= in_.b.size[x];
            for (uint32_t c = in_.from[x]; c + 1 < in_.to[x]; ++c) --cuts_[c];
        }
        for (uint32_t y : part.buffers) {
            auto& obs = obstacles_[y];
            obs.clear();
            for (uint32_t z : in_.conflicts[y])
                if (!free[z]) obs.emplace_back(fixed[z], fixed[z] + in_.b.size[z]);
            if (given) obs.insert(obs.end(), (*given)[y].begin(), (*given)[y].end());
            std::sort(obs.begin(), obs.end());
            ops_ += 2 * (in_.conflicts[y].size() + obs.size());
            min_offset_[y] = open_min_[y] = clear_of_obstacles(y, 0);
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
            const uint64_t wx = in_.b.upper[x] - in_.b.lower[x], wy = in_.b.upper[y] - in_.b.lower[y];
            const unsigned __int128 ax = static_cast<unsigned __int128>(wx) * in_.b.size[x];
            const unsigned __int128 ay = static_cast<unsigned __int128>(wy) * in_.b.size[y];
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
        bool any_unplaced = false;
        for (uint32_t x : part.buffers) {
            if (placed_[x]) continue;
            any_unplaced = true;
            min_height = std::min(min_height, min_offset_[x] + in_.b.size[x]);
        }
        if (!any_unplaced) return Outcome::Found;
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
        open_min_[x] = UINT64_MAX;
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
            open_min_[y] = min_offset_[y];
            toggle_state(y);
        }
        for (uint32_t s = in_.from[x]; s < in_.to[x]; ++s) {
            floor_log_.push_back({s, floor_[s]});
            floor_[s] = height;
            total_[s] -= in_.b.size[x];
        }
        ops_ += in_.conflicts[x].size() + (in_.to[x] - in_.from[x]) + 2 * (min_log_.size() - mark_raised + 1);
        // A section's floor is at least the lowest offset any unplaced buffer in
        // it can take: revisit the sections of the buffers whose offsets rose.
        ++stamp_;
        if (section_stamp_.size() != in_.sections) section_stamp_.assign(in_.sections, 0);
        for (size_t k = mark_raised; k < min_log_.size(); ++k) {
            const uint32_t y = min_log_[k].first;
            ops_ += 2 * (in_.to[y] - in_.from[y]);  // the sections looked at (two reads each)
            for (uint32_t s = in_.from[y]; s < in_.to[y]; ++s) {
                // The section's lowest reachable offset is at most y's: a
                // floor already there cannot rise (the sections x spans, above all).
                if (section_stamp_[s] == stamp_ || floor_[s] >= open_min_[y]) continue;
                section_stamp_[s] = stamp_;
                // Scanned only until some buffer there can go as low as the floor.
                uint64_t lowest = UINT64_MAX;
                size_t scanned = 0;
                for (uint32_t z : in_.in_section[s]) {
                    ++scanned;
                    lowest = std::min(lowest, open_min_[z]);
                    if (lowest <= floor_[s]) break;
                }
                ops_ += scanned;
                if (lowest != UINT64_MAX && floor_[s] < lowest) {
                    floor_log_.push_back({s, floor_[s]});
                    floor_[s] = lowest;
                }
            }
        }
        return hatless;
    }

    void unplace(uint32_t x, size_t mark_min, size_t mark_floor) {
        while (floor_log_.size() > mark_floor) {
            floor_[floor_log_.back().first] = floor_log_.back().second;
            floor_log_.pop_back();
        }
        while (min_log_.size() > mark_min) {
            min_offset_[min_log_.back().first] = min_log_.back().second;
            open_min_[min_log_.back().first] = min_log_.back().second;
            min_log_.pop_back();
        }
        for (uint32_t s = in_.from[x]; s < in_.to[x]; ++s) total_[s] += in_.b.size[x];
        placed_[x] = 0;
        open_min_[x] = min_offset_[x];
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
};

// One decision problem, "do the buffers fit under the capacity?", answered
// by MiniMalloc's three preorders racing: they search side by side at equal
// speed in work units, without restarts, and the first to settle (with a
// placement, or a proof that none exists) answers. First is measured in each
// search's own work, ties to the lower preorder, so the answer and the work
// charged (each search's work up to the winner's) are the same however the
// searches are scheduled: on a thread each, taking turns on up to
// EMEL_THREADS cores, or, below search_threads_from() buffers, one after another
// with doubling limits (each restart replays the same search further).
class PreorderRace {
  public:
    static constexpr int kSearches = CanonicalSearch::kHeuristics;

    explicit PreorderRace(const CanonicalInstance& instance) : instance_(instance) {
        for (int h = 0; h < kSearches; ++h) searches_.emplace_back(instance);
        // The search recurses once per buffer placed (a few hundred bytes a
        // level, more under sanitizers): deep ones run on stacks of their own.
        if (instance.active.size() > kCallerStackLevels)
            stack_bytes_ = kStackBase + kStackPerLevel * instance.active.size();
        may_thread_ = instance.active.size() >= search_threads_from();
        // A round below one descent (every searched buffer placed once, each
        // node looking at its partition and sections) can settle nothing but
        // the smallest instances: the restarts start at one.
        const uint64_t n = instance.active.size();
        while (first_limit_ < n * (4 * n + instance.sections) && first_limit_ < kThreadsAfter) first_limit_ *= 2;
    }

    // Each search may do `budget / kSearches` units; `work` gets what was charged.
    Outcome solve(uint64_t capacity, uint64_t budget, std::vector<uint64_t>& offsets, uint64_t& work) {
        if (stack_bytes_ == 0) return solve_here(capacity, budget, offsets, work);
        Outcome r = Outcome::OutOfBudget;
        if (run_on_stack(stack_bytes_, [&] { r = solve_here(capacity, budget, offsets, work); })) return r;
        work = budget;  // no thread with a deep enough stack: given up, as if cut by the budget
        return Outcome::OutOfBudget;
    }

  private:
    Outcome solve_here(uint64_t capacity, uint64_t budget, std::vector<uint64_t>& offsets, uint64_t& work) {
        offsets.assign(instance_.n, 0);
        work = 0;
        if (instance_.active.empty()) return Outcome::Found;
        const uint64_t share = std::max<uint64_t>(budget / kSearches, 1);
        std::atomic<uint64_t> earliest{UINT64_MAX};
        std::array<Outcome, kSearches> outcome{};
        std::array<uint64_t, kSearches> spent{};
        std::array<std::vector<uint64_t>, kSearches> found;
        // Enters a settled search in the race; one that settled past its
        // share counts as cut by the budget.
        auto settle = [&](int h) {
            if (outcome[h] == Outcome::OutOfBudget) return;
            if (spent[h] > share) {
                outcome[h] = Outcome::OutOfBudget;
                return;
            }
            const uint64_t key = CanonicalSearch::race_key(spent[h], h);
            uint64_t seen = earliest.load();
            while (key < seen && !earliest.compare_exchange_weak(seen, key)) {
            }
        };
        // Each search on a thread of its own, or all on this one by restarts
        // with doubling limits. Threads cost their start (more than a whole
        // search on a model's hundred buffers): they start only for a race
        // that its first rounds of restarts, up to kThreadsAfter each, did
        // not settle, which is then run again from the start on them (the
        // same race: its answer and work are those of the restarts).
        bool threaded = false, raced = false;
        auto rounds = [&](uint64_t up_to) {
            std::array<bool, kSearches> open;
            open.fill(true);
            for (uint64_t limit = std::min(first_limit_, up_to);; limit = std::min(limit * 2, up_to)) {
                bool any_open = false;
                for (int h = 0; h < kSearches; ++h) {
                    if (!open[h]) continue;
                    spent[h] = 0;
                    outcome[h] = searches_[h].run(capacity, h, limit, &earliest, nullptr, found[h], spent[h]);
                    settle(h);
                    // Still open only when cut by this round's limit: not
                    // settled, not out of the race, not out of its share.
                    open[h] = outcome[h] == Outcome::OutOfBudget && limit < share &&
                              CanonicalSearch::race_key(spent[h], h) <= earliest.load() && spent[h] <= share;
                    any_open = any_open || open[h];
                }
                if (!any_open) return true;
                if (limit >= up_to) return false;
            }
        };
        if (may_thread_ && share > kThreadsAfter && !(raced = rounds(kThreadsAfter))) {
            if (!pool_tried_) {
                pool_tried_ = true;
                pool_ = std::make_unique<WorkerPool>(kSearches, stack_bytes_);
                if (pool_->size() < static_cast<unsigned>(kSearches)) pool_.reset();  // no threads: restarts below
                permits_ = std::min<unsigned>(placement_threads(), kSearches);
            }
            threaded = pool_ != nullptr;
            if (threaded) {  // the race again from the start, on the threads
                earliest.store(UINT64_MAX);
                outcome.fill(Outcome::Infeasible);
                spent.fill(0);
            }
        }
        if (threaded) {
            std::unique_ptr<Turnstile> turns;
            if (permits_ < static_cast<unsigned>(kSearches)) turns = std::make_unique<Turnstile>(permits_);
            pool_->run([&](unsigned t) {
                const int h = static_cast<int>(t);
                struct Turn {  // holds a permit for the whole search, even when it throws
                    Turnstile* turns;
                    Turn(Turnstile* t_, int h_) : turns(t_) {
                        if (turns) turns->enter(h_);
                    }
                    ~Turn() {
                        if (turns) turns->leave();
                    }
                } turn(turns.get(), h);
                outcome[h] = searches_[h].run(capacity, h, share, &earliest, turns.get(), found[h], spent[h]);
                settle(h);
            });
        } else if (!raced) {
            rounds(share);
        }
        const uint64_t won = earliest.load();
        const uint64_t charged_up_to = won == UINT64_MAX ? share : won / kSearches;
        for (int h = 0; h < kSearches; ++h) work += std::min(spent[h], charged_up_to);
        // Failures kept for the later attempts, from the searches whose
        // course did not depend on the threads' timing: all of them when none
        // settled (each ran to its share), else the winner only (a loser
        // stops wherever the winner's news found it).
        if (won == UINT64_MAX) {
            for (auto& search : searches_) work += search.keep_failures();
            return Outcome::OutOfBudget;
        }
        const int winner = static_cast<int>(won % kSearches);
        work += searches_[winner].keep_failures();
        if (outcome[winner] == Outcome::Found) offsets = std::move(found[winner]);
        return outcome[winner];
    }

    // The first round's limit when the searches take turns by restarting.
    static constexpr uint64_t kFirstLimit = uint64_t{1} << 14;
    uint64_t first_limit_ = kFirstLimit;  // doubled up to one descent's work
    // Restarts up to this limit come before threads (about 0.1 ms a search).
    static constexpr uint64_t kThreadsAfter = uint64_t{1} << 17;

    const CanonicalInstance& instance_;
    std::vector<CanonicalSearch> searches_;
    std::unique_ptr<WorkerPool> pool_;  // started by the first race that needs it
    bool may_thread_ = false, pool_tried_ = false;
    unsigned permits_ = 1;
    size_t stack_bytes_ = 0;  // 0: the searches run on the caller's stack
};

// Large neighbourhood search from a placement: a few buffers around its
// peak are freed, everything else stays where it is, and the exact search
// places the freed ones again under the best end minus one, into any hole
// the others leave. Two neighbourhoods take turns: the `m` buffers nearest in
// time to a buffer that reaches the top (its start), and the `m` highest
// tops. Sizes from 16 buffers, doubling through both neighbourhoods and the
// three preorders while nothing is found, again from 16 after a success.
// It returns after a round through every size that found nothing: another
// round would search the same neighbourhoods again (the highest tops are
// the same, and few buffers reach the top), while the ladder's attempts,
// which keep their failures, resume where they stopped.
void improve_peak(const CanonicalInstance& in, Placement& best, uint64_t lo, uint64_t budget, uint64_t& work) {
    const Buffers& b = in.b;
    const size_t n = in.active.size();
    if (n < 2) return;
    CanonicalSearch search(in);
    std::vector<uint64_t> offsets;
    std::vector<uint8_t> free(b.count(), 0);
    std::vector<std::pair<uint64_t, uint32_t>> ranked;  // (key, buffer): the lowest keys are freed
    Rng rng;
    size_t m = 16;
    int step = 0;  // neighbourhood x preorder
    const uint64_t start = work;
    while (best.end > lo && work - start < budget) {
        const uint64_t capacity = best.end - 1;
        const int kind = step % 2, heuristic = step / 2;
        // What reaches above the capacity cannot stay: always freed.
        std::vector<uint32_t> top;
        for (uint32_t x : in.active)
            if (best.offset[x] + b.size[x] > capacity) top.push_back(x);
        if (top.empty()) return;  // the end is a row's outside the search: nothing here lowers it
        ranked.clear();
        if (kind == 0) {
            const uint64_t t = b.lower[top[rng.below(top.size())]];
            for (uint32_t x : in.active) {
                const uint64_t distance = b.lower[x] > t ? b.lower[x] - t : b.upper[x] <= t ? t - b.upper[x] + 1 : 0;
                ranked.emplace_back(distance, x);
            }
        } else {
            for (uint32_t x : in.active) ranked.emplace_back(UINT64_MAX - (best.offset[x] + b.size[x]), x);
        }
        const size_t k = std::min(m, n);
        std::nth_element(ranked.begin(), ranked.begin() + (k - 1), ranked.end());
        std::fill(free.begin(), free.end(), 0);
        for (size_t i = 0; i < k; ++i) free[ranked[i].second] = 1;
        for (uint32_t x : top) free[x] = 1;
        work += 4 * n;  // the ranking, its partial sort and the marks
        if (work - start >= budget) break;
        const uint64_t share =
            std::min<uint64_t>(budget - (work - start), std::max<uint64_t>(uint64_t{1} << 16, 256 * k * k));
        uint64_t spent = 0;
        const Outcome r = search.run_around(capacity, heuristic, share, free, best.offset, offsets, spent);
        work += std::min(spent, share);  // as the race charges: a search stops within a node of its share
        if (r == Outcome::Found) {
            uint64_t end = 0;
            for (uint32_t x : in.active) end = std::max(end, offsets[x] + b.size[x]);
            best.offset = offsets;  // the rows outside the search at 0, as the ladder leaves them
            best.end = end;
            best.method = "neighbourhood_search";
            m = 16;
            step = 0;
            continue;
        }
        if (++step == 2 * CanonicalSearch::kHeuristics) {
            step = 0;
            if (m >= n) return;  // a whole round found nothing
            m *= 2;
        }
    }
}

}  // namespace

void improve_by_windows(const Buffers& b, Placement& best, uint64_t budget, uint64_t& work) {
    // Partners may live outside any window: their constraint would be lost.
    if (b.has_partners() || b.count() == 0) return;
    const size_t n = b.count();
    const uint64_t start = work;
    size_t next_top = 0;   // which top buffer to lower next (round robin)
    unsigned widen = 0;    // how far the window reaches past the buffer's lifetime
    unsigned failures = 0;
    // Wider around the same top buffer, or (too wide, or told to) the next
    // top buffer's own lifetime; true when it moved to the next top buffer.
    auto next_window = [&](bool next_top_now) {
        if (next_top_now || widen >= kWidenings) {
            widen = 0;
            ++next_top;
            return true;
        }
        ++widen;
        return false;
    };
    while (work - start < budget) {
        // The buffers that reach the end: each must come down for the end to.
        std::vector<uint32_t> tops;
        uint64_t end = 0;
        for (uint32_t x = 0; x < n; ++x)
            if (b.searched(x)) end = std::max(end, best.offset[x] + b.size[x]);
        for (uint32_t x = 0; x < n; ++x)
            if (b.searched(x) && best.offset[x] + b.size[x] == end) tops.push_back(x);
        work += 2 * n;
        if (end < best.end) {  // every top came down: a smaller arena
            best.end = end;
            best.method = "window_neighbourhood_search";
            for (uint32_t x = 0; x < n; ++x)  // rows outside every search at 0, as the exact search leaves them
                if (!b.searched(x)) best.offset[x] = 0;
        }
        if (tops.empty() || end == 0) return;
        const uint32_t p = tops[next_top % tops.size()];
        const uint64_t length = b.upper[p] - b.lower[p];
        const uint64_t reach = widen == 0 ? 0 : length << (widen - 1);
        const uint64_t from = b.lower[p] > reach ? b.lower[p] - reach : 0;
        const uint64_t to = b.upper[p] > UINT64_MAX - reach ? UINT64_MAX : b.upper[p] + reach;
        // Free: the buffers live only inside the window. Their obstacles:
        // the others live with them, all of which are live in the window.
        std::vector<uint32_t> freed_rows, crossing;
        bool top_fixed = false;
        for (uint32_t x = 0; x < n; ++x) {
            if (!b.searched(x) || b.lower[x] >= to || b.upper[x] <= from) continue;
            if (b.lower[x] >= from && b.upper[x] <= to) {
                freed_rows.push_back(x);
            } else {
                crossing.push_back(x);
                top_fixed = top_fixed || best.offset[x] + b.size[x] == end;
            }
        }
        work += n;
        const size_t freed = freed_rows.size();
        const bool too_large = freed > kWindowFreed;
        if (top_fixed || too_large) {  // this window cannot lower the end: the next one
            if (next_window(too_large) && ++failures > tops.size() * (kWidenings + 1)) return;
            continue;
        }
        const Buffers sub = cut_to_window(b, freed_rows, from, to);  // nothing cut: they live inside
        const SearchCosts costs = search_costs(sub);
        if (work - start + costs.build + freed * crossing.size() >= budget) return;
        work += costs.build;
        // Each freed buffer's obstacles: the crossing buffers live with it.
        std::vector<std::vector<std::pair<uint64_t, uint64_t>>> obstacles(freed);
        for (uint32_t k = 0; k < freed; ++k) {
            const uint32_t x = freed_rows[k];
            for (uint32_t z : crossing)
                if (b.lower[z] < b.upper[x] && b.lower[x] < b.upper[z])
                    obstacles[k].emplace_back(best.offset[z], best.offset[z] + b.size[z]);
        }
        work += freed * crossing.size();
        const CanonicalInstance instance(sub);
        CanonicalSearch search(instance);
        std::vector<uint8_t> free(freed, 1);
        std::vector<uint64_t> fixed(freed, 0), offsets;
        const uint64_t share = std::min<uint64_t>(budget - (work - start),
                                                  std::max<uint64_t>(uint64_t{1} << 16, 256 * freed * freed));
        uint64_t spent = 0;
        Outcome r = Outcome::OutOfBudget;
        auto run = [&] {
            r = search.run_around(end - 1, static_cast<int>(failures % CanonicalSearch::kHeuristics), share, free, fixed, offsets, spent, &obstacles);
        };
        if (freed <= kCallerStackLevels) run();
        else if (!run_on_stack(kStackBase + kStackPerLevel * freed, run)) return;
        work += std::min(spent, share);
        if (r == Outcome::Found) {
            for (size_t k = 0; k < freed; ++k) best.offset[freed_rows[k]] = offsets[k];
            widen = 0;
            failures = 0;
            continue;  // the same top index now names the next buffer still at the end
        }
        next_window(false);
        if (++failures > tops.size() * (kWidenings + 1) * 3) return;
    }
}

SearchCosts search_costs(const Buffers& b) {
    // The searched buffers: live, holding bytes.
    std::vector<uint64_t> starts, ends;
    for (size_t x = 0; x < b.count(); ++x)
        if (b.searched(static_cast<uint32_t>(x))) {
            starts.push_back(b.lower[x]);
            ends.push_back(b.upper[x]);
        }
    std::sort(starts.begin(), starts.end());
    std::sort(ends.begin(), ends.end());
    SearchCosts c;
    // Pairs live together, each once: a buffer meets every buffer started
    // before it that has not ended by its start.
    for (size_t i = 0, e = 0; i < starts.size(); ++i) {
        while (e < ends.size() && ends[e] <= starts[i]) ++e;
        c.conflict_pairs += i - std::min(i, e);
    }
    // Building: two sorts of every buffer (by start; twins) and each conflict pair twice.
    c.build = 2 * b.count() * (64 - static_cast<uint64_t>(__builtin_clzll(b.count() | 1))) + 2 * c.conflict_pairs;
    // A descent: each of the race's searches places every searched buffer
    // once; each node sorts its partition's buffers and checks its sections
    // (one per distinct end): 4n + sections.
    const uint64_t n = starts.size();
    const uint64_t sections = static_cast<uint64_t>(std::unique(ends.begin(), ends.end()) - ends.begin());
    c.descent = 3 * n * (4 * n + sections);
    return c;
}

namespace {

// Where sweep k of the capacity ladder cuts the gap, in 64ths: the middle
// first, then fractions spread over [1/4, 3/4] by the golden ratio. Whether
// a capacity settles within a share is erratic (challenging D at 8,000 ms:
// 1,028,000, 1,030,000 and 1,036,000 found, 1,038,000 not), so each sweep
// tries capacities the earlier ones did not: D 1.0540 -> 1.0457 of the bound
// at 10,000 ms.
uint64_t sweep_cut(uint64_t sweep) {
    return sweep == 0 ? 32 : 16 + (sweep * 40503u % 65536u) / 2048u;
}

}  // namespace

Placement place_within(const Buffers& b, uint64_t capacity, uint64_t work_budget) {
    Placement out;
    out.abandoned = true;
    if (b.count() > kSearchUpTo) return out;
    const SearchCosts costs = search_costs(b);
    if (costs.conflict_pairs > kSearchMaxConflicts || costs.build >= work_budget) return out;
    const CanonicalInstance instance(b);
    PreorderRace race(instance);
    std::vector<uint64_t> offsets;
    uint64_t spent = 0;
    const Outcome r = race.solve(capacity, work_budget - costs.build, offsets, spent);
    out.work = costs.build + spent;
    if (r != Outcome::Found) return out;
    uint64_t end = 0;
    for (size_t x = 0; x < b.count(); ++x)
        if (b.lower[x] < b.upper[x]) end = std::max(end, offsets[x] + b.size[x]);
    if (end > capacity) return out;
    out.offset = std::move(offsets);
    out.end = end;
    out.method = "optimal_search";
    out.abandoned = false;
    return out;
}

Placement place_optimal(const Buffers& b, uint64_t work_budget, uint64_t target, const Placement* incumbent,
                        uint64_t neighbourhood_budget) {
    // The best quick heuristic, or the caller's better answer: an upper bound and the fallback.
    Placement best = place_greedy(b, order_by_size(b), Fit::Best);
    uint64_t work = best.work;
    // No budget given: the default-budget policy (docs/strategies.md §4).
    if (work_budget == kPolicyBudget)
        work_budget = default_work_budget(b, std::min(best.end, incumbent ? incumbent->end : best.end),
                                          buffers_lower_bound(b));
    if (incumbent && incumbent->end < best.end) {
        best.offset = incumbent->offset;
        best.end = incumbent->end;
        best.method = incumbent->method;
    }
    uint64_t lo = buffers_lower_bound(b), hi = best.end;  // the optimum lies in [lo, hi]
    // The instance's conflict lists take memory, and building them time, in
    // the square of the buffers: larger instances are not searched.
    const SearchCosts costs = b.count() > kSearchUpTo ? SearchCosts{} : search_costs(b);
    const bool too_large = b.count() > kSearchUpTo || costs.conflict_pairs > kSearchMaxConflicts;
    // Building the instance is charged first; a budget it would exceed is not spent on it.
    if (too_large || work + costs.build > work_budget || hi <= lo) {
        best.optimal = hi <= lo;
        best.lower_bound = lo;
        if (!best.optimal)
            best.method = too_large ? "greedy_by_size (too many buffers to search)"
                                    : "greedy_by_size (budget too small to search)";
        best.work = work;
        return best;
    }
    const CanonicalInstance instance(b);
    work += costs.build;
    PreorderRace race(instance);
    std::vector<uint64_t> offsets;
    // The lower bound first (tight instances are often posed there), or the
    // caller's target, with most of the budget: the attempt that settles
    // these instances.
    uint64_t capacity = target != 0 && target < hi ? std::max(target, lo) : lo;
    // Then sweeps of bisection between the bound and the best found, each
    // attempt with a fixed share: an attempt cut by its share moves the sweep
    // up, a placement found moves the best down, and a sweep that meets the
    // best starts again from the bound with twice the share. Whether a
    // capacity is settled quickly varies a lot from one capacity to the next
    // (challenging J: 1,044,480 in 13M units, 1,048,064 not in 450M), so
    // many cheap attempts at spread capacities beat few costly ones. The
    // first share is two descents (each of the search's n nodes sorts the
    // partition and checks its sections: 4n + sections), below which an
    // attempt on a large instance can only fail.
    const uint64_t descent = 2 * costs.descent;
    uint64_t share = std::max<uint64_t>(descent, uint64_t{1} << 20);
    uint64_t tried_high = 0;  // attempts cut by their share: unknown below this
    bool first = true;
    uint64_t sweep = 0;
    // Where the next attempt goes, once the last one is known.
    auto next_capacity = [&] {
        uint64_t from = std::max(lo, tried_high);
        // A sweep ends within 1/32 of the gap below the best (what is left
        // there is crumbs): again from the bound, with twice the share.
        if (from >= hi || hi - from < (hi - lo) / 32) {
            tried_high = 0;
            share = std::min(share * 2, work_budget);
            from = lo;
            ++sweep;
        }
        capacity = from + static_cast<uint64_t>(static_cast<unsigned __int128>(hi - from) * sweep_cut(sweep) / 64);
    };
    auto climb = [&](uint64_t until) {
        while (lo < hi && capacity < hi && work < until) {
            const uint64_t left = until - work;
            uint64_t asked = std::min(left, share);
            if (first) {  // untargeted, the bound keeps room for two descents after it
                asked = target ? left / 4 * 3 : std::max(left / 8, left / 2 - std::min(left / 2, descent));
                first = false;
            }
            uint64_t spent = 0;
            const Outcome r = race.solve(capacity, std::max<uint64_t>(asked, 1), offsets, spent);
            work += spent;
            if (r == Outcome::Found) {
                uint64_t end = 0;
                for (size_t x = 0; x < b.count(); ++x)
                    if (b.lower[x] < b.upper[x]) end = std::max(end, offsets[x] + b.size[x]);
                // A placement found under `capacity` ends there or below; anything
                // else would stall the bisection, so it is never taken.
                if (end > capacity) return;
                best.offset = offsets;
                best.end = end;
                best.method = "optimal_search";
                hi = end;
            } else if (r == Outcome::Infeasible) {
                lo = capacity + 1;
            } else {
                tried_high = std::max(tried_high, capacity + 1);
            }
            next_capacity();
        }
    };
    climb(work_budget - std::min(work_budget - work, neighbourhood_budget));  // the ladder's part
    if (lo < hi && work < work_budget) {
        // Deep neighbourhoods recurse as deep as the ladder's searches: on a stack as large.
        const size_t levels = instance.active.size();
        auto improve = [&] { improve_peak(instance, best, lo, work_budget - work, work); };
        if (levels <= kCallerStackLevels) improve();
        else run_on_stack(kStackBase + kStackPerLevel * levels, improve);  // no thread: the ladder's answer stands
        hi = best.end;
        // What a fruitless round of neighbourhoods leaves goes back to the
        // ladder, whose attempts resume where they stopped (kept failures),
        // from a capacity placed again under the best they may have lowered.
        if (lo < hi && work < work_budget) {
            next_capacity();
            climb(work_budget);
        }
    }
    best.lower_bound = lo;
    best.optimal = lo >= hi;
    best.work = work;
    return best;
}

}  // namespace emel::memory
