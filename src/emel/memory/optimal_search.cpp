// optimal (docs/strategies.md §5): branch and bound over canonical placements,
// after MiniMalloc (Moffitt, ASPLOS 2023). Buffers are placed in
// non-decreasing offset order, each at the lowest offset above the conflicting
// buffers already placed — every placement can be pushed down into that form
// without growing, so the search is complete. Pruning:
//  - dominance: never place a buffer at or above the lowest top any unplaced
//    buffer could reach (that would leave a gap some buffer must fill later);
//  - section inference: in every time section, the floor plus the bytes still
//    to place there must fit under the capacity.
// The search is budgeted in nodes (work units), never in wall time.
#include <algorithm>
#include <numeric>

#include "emel/memory/checked_math.hpp"
#include "emel/memory/placement.hpp"

namespace emel::memory {

namespace {

enum class Outcome { Found, Infeasible, OutOfBudget };

// One decision problem: do the buffers fit below `capacity`?
class CanonicalSearch {
  public:
    explicit CanonicalSearch(const Buffers& b) : b_(b), n_(b.count()) {
        std::vector<uint64_t> times;
        for (size_t x = 0; x < n_; ++x) {
            times.push_back(b.lower[x]);
            times.push_back(b.upper[x]);
        }
        std::sort(times.begin(), times.end());
        times.erase(std::unique(times.begin(), times.end()), times.end());
        auto at = [&](uint64_t t) {
            return static_cast<uint32_t>(std::lower_bound(times.begin(), times.end(), t) -
                                         times.begin());
        };
        sections_ = times.empty() ? 0 : times.size() - 1;
        from_.resize(n_);
        to_.resize(n_);
        in_section_.resize(sections_);
        for (size_t x = 0; x < n_; ++x) {
            from_[x] = at(b.lower[x]);
            to_[x] = at(b.upper[x]);
            // A buffer that is never live or holds no bytes constrains nothing:
            // it stays at offset 0 outside the search. (A zero-size buffer in the
            // search would make its own offset the "lowest top", and dominance
            // would then cut every branch: a false infeasibility proof.)
            if (from_[x] >= to_[x] || b.size[x] == 0) continue;
            active_.push_back(static_cast<uint32_t>(x));
            for (uint32_t s = from_[x]; s < to_[x]; ++s) in_section_[s].push_back(static_cast<uint32_t>(x));
        }
        conflicts_.resize(n_);
        for (size_t i = 0; i < active_.size(); ++i)
            for (size_t j = i + 1; j < active_.size(); ++j) {
                const uint32_t x = active_[i], y = active_[j];
                if (b.live_together(x, y)) {
                    conflicts_[x].push_back(y);
                    conflicts_[y].push_back(x);
                }
            }
        if (b.has_partners())
            for (uint32_t x : active_)
                for (uint32_t y : b.partners[x])
                    if (from_[y] < to_[y] && !b.live_together(x, y)) conflicts_[x].push_back(y);
        // Static preorders (MiniMalloc's "TWA", "WAT", "TAW"): T = the largest
        // section total the buffer spans, W = its lifetime's length, A = area.
        std::vector<uint64_t> total(sections_, 0);
        for (uint32_t x : active_)
            for (uint32_t s = from_[x]; s < to_[x]; ++s) total[s] += b.size[x];
        key_t_.assign(n_, 0);
        for (uint32_t x : active_)
            for (uint32_t s = from_[x]; s < to_[x]; ++s) key_t_[x] = std::max(key_t_[x], total[s]);
        // W is taken two ways, as the lifetime's length and as the number of
        // sections it spans: each helps on different instances.
        for (int h = 0; h < 6; ++h) {
            std::vector<uint32_t> order = active_;
            const bool by_sections = h >= 3;
            std::sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
                const unsigned __int128 ax = static_cast<unsigned __int128>(to_[x] - from_[x]) * b.size[x];
                const unsigned __int128 ay = static_cast<unsigned __int128>(to_[y] - from_[y]) * b.size[y];
                const uint64_t wx = by_sections ? to_[x] - from_[x] : b.upper[x] - b.lower[x];
                const uint64_t wy = by_sections ? to_[y] - from_[y] : b.upper[y] - b.lower[y];
                const auto cmp3 = [](auto a1, auto b1, auto a2, auto b2, auto a3, auto b3) {
                    if (a1 != b1) return a1 > b1 ? -1 : 1;
                    if (a2 != b2) return a2 > b2 ? -1 : 1;
                    if (a3 != b3) return a3 > b3 ? -1 : 1;
                    return 0;
                };
                int c = 0;
                if (h % 3 == 0) c = cmp3(key_t_[x], key_t_[y], wx, wy, ax, ay);
                if (h % 3 == 1) c = cmp3(wx, wy, ax, ay, key_t_[x], key_t_[y]);
                if (h % 3 == 2) c = cmp3(key_t_[x], key_t_[y], ax, ay, wx, wy);
                if (c != 0) return c < 0;
                return b.rank[x] < b.rank[y];
            });
            preorders_.push_back(std::move(order));
        }
    }

    size_t active() const { return active_.size(); }

    // Round robin over the preorders with doubling node limits (MiniMalloc's
    // schedule), until a placement is found, infeasibility is proven, or the
    // work budget is spent.
    Outcome solve(uint64_t capacity, uint64_t budget, std::vector<uint64_t>& offsets,
                  uint64_t& work) {
        offsets.assign(n_, 0);
        if (active_.empty()) return Outcome::Found;
        uint64_t limit = active_.size();
        while (true) {
            limit *= 2;
            bool all_exhausted = true;
            for (const auto& preorder : preorders_) {
                const uint64_t left = budget > work ? budget - work : 0;
                const Outcome r = run(capacity, preorder, limit, left, offsets, work);
                if (r != Outcome::OutOfBudget) return r;
                if (work >= budget) return Outcome::OutOfBudget;
                all_exhausted = all_exhausted && nodes_left_ == 0;
            }
            if (!all_exhausted) return Outcome::OutOfBudget;
        }
    }

  private:
    // Outcome::OutOfBudget when the node limit or the work budget ran out.
    Outcome run(uint64_t capacity, const std::vector<uint32_t>& preorder, uint64_t node_limit,
                uint64_t work_left, std::vector<uint64_t>& offsets, uint64_t& work) {
        capacity_ = capacity;
        nodes_left_ = node_limit;
        ops_ = 0;
        ops_limit_ = work_left;
        preorder_ = &preorder;
        preorder_index_.assign(n_, 0);
        for (size_t k = 0; k < preorder.size(); ++k) preorder_index_[preorder[k]] = static_cast<uint32_t>(k);
        min_offset_.assign(n_, 0);
        placed_.assign(n_, 0);
        floor_.assign(sections_, 0);
        total_.assign(sections_, 0);
        for (uint32_t x : active_)
            for (uint32_t s = from_[x]; s < to_[x]; ++s) total_[s] += b_.size[x];
        offsets_ = &offsets;
        // cuts_[s]: unplaced buffers spanning the boundary between sections s and s+1.
        cuts_.assign(sections_ > 0 ? sections_ - 1 : 0, 0);
        for (uint32_t x : active_)
            for (uint32_t c = from_[x]; c + 1 < to_[x]; ++c) ++cuts_[c];
        Partition whole{preorder, 0, static_cast<uint32_t>(sections_)};
        const Outcome r = check(0, whole) ? search(whole, 0, 0) : Outcome::Infeasible;
        work += ops_;
        return r;
    }

    // A set of buffers that can be placed independently of all others: no
    // unplaced buffer outside it shares a section with it.
    struct Partition {
        std::vector<uint32_t> buffers;  // in preorder
        uint32_t first, last;           // its sections [first, last)
    };

    bool check(uint64_t offset, const Partition& part) {
        ops_ += part.last - part.first;
        for (size_t s = part.first; s < part.last; ++s) {
            const uint64_t base = std::max(offset, floor_[s]);
            if (total_[s] > capacity_ || base > capacity_ - total_[s]) return false;
        }
        return true;
    }

    Outcome search(const Partition& part, uint64_t prev_offset, uint32_t prev_index) {
        if (nodes_left_ == 0 || ops_ > ops_limit_) return Outcome::OutOfBudget;
        --nodes_left_;
        ops_ += 4 * part.buffers.size();  // building and sorting the ordering
        // Unplaced buffers by (lowest offset, preorder).
        std::vector<std::pair<uint64_t, uint32_t>> ordering;
        uint64_t min_height = UINT64_MAX;
        for (uint32_t x : part.buffers) {
            if (placed_[x]) continue;
            ordering.emplace_back(min_offset_[x], preorder_index_[x]);
            min_height = std::min(min_height, min_offset_[x] + b_.size[x]);
        }
        if (ordering.empty()) return Outcome::Found;
        std::sort(ordering.begin(), ordering.end());
        for (const auto& [offset, index] : ordering) {
            // Canonical order: offsets never decrease; equal offsets by preorder.
            if (offset < prev_offset || (offset == prev_offset && index < prev_index)) continue;
            if (offset >= min_height) break;  // dominance (offsets only grow from here)
            const uint32_t x = (*preorder_)[index];
            if (offset > capacity_ || b_.size[x] > capacity_ - offset) continue;
            const size_t mark_min = min_log_.size(), mark_floor = floor_log_.size();
            const bool hatless = place(x, offset);
            Outcome r = Outcome::Infeasible;
            if (check(offset, part)) r = decompose(part, x, offset, index);
            unplace(x, mark_min, mark_floor);
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
        std::vector<uint32_t> cutpoints{part.first};
        for (uint32_t c = from_[x]; c + 1 < to_[x]; ++c)
            if (--cuts_[c] == 0 && c + 1 > part.first && c + 1 < part.last) cutpoints.push_back(c + 1);
        Outcome r = Outcome::Found;
        if (cutpoints.size() == 1 || b_.has_partners()) {
            r = search(part, offset, index);
        } else {
            cutpoints.push_back(part.last);
            for (size_t k = 1; k < cutpoints.size() && r == Outcome::Found; ++k) {
                Partition piece{{}, cutpoints[k - 1], cutpoints[k]};
                for (uint32_t y : part.buffers)
                    if (!placed_[y] && from_[y] < piece.last && piece.first < to_[y])
                        piece.buffers.push_back(y);
                ops_ += part.buffers.size();
                if (!piece.buffers.empty()) r = search(piece, 0, 0);
            }
        }
        for (uint32_t c = from_[x]; c + 1 < to_[x]; ++c) ++cuts_[c];
        return r;
    }

    // Places x; true when no unplaced buffer conflicts with it ("hatless").
    bool place(uint32_t x, uint64_t offset) {
        mark_raised_ = min_log_.size();
        placed_[x] = 1;
        (*offsets_)[x] = offset;
        const uint64_t height = offset + b_.size[x];
        bool hatless = true;
        for (uint32_t y : conflicts_[x]) {
            if (placed_[y]) continue;
            hatless = false;
            if (min_offset_[y] >= height) continue;
            min_log_.push_back({y, min_offset_[y]});
            auto raised = checked_align_up(height, b_.alignment[y]);
            min_offset_[y] = raised ? *raised : UINT64_MAX;
        }
        for (uint32_t s = from_[x]; s < to_[x]; ++s) {
            floor_log_.push_back({s, floor_[s]});
            floor_[s] = height;
            total_[s] -= b_.size[x];
        }
        ops_ += conflicts_[x].size() + (to_[x] - from_[x]);
        // A section's floor is at least the lowest offset any unplaced buffer in
        // it can take: revisit the sections of the buffers whose offsets rose.
        ++stamp_;
        if (section_stamp_.size() != sections_) section_stamp_.assign(sections_, 0);
        for (size_t k = mark_raised_; k < min_log_.size(); ++k) {
            const uint32_t y = min_log_[k].first;
            for (uint32_t s = from_[y]; s < to_[y]; ++s) {
                if (section_stamp_[s] == stamp_) continue;
                section_stamp_[s] = stamp_;
                uint64_t lowest = UINT64_MAX;
                for (uint32_t z : in_section_[s])
                    if (!placed_[z]) lowest = std::min(lowest, min_offset_[z]);
                ops_ += in_section_[s].size();
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
            min_log_.pop_back();
        }
        for (uint32_t s = from_[x]; s < to_[x]; ++s) total_[s] += b_.size[x];
        placed_[x] = 0;
    }

    const Buffers& b_;
    size_t n_;
    size_t sections_ = 0;
    std::vector<uint32_t> from_, to_, active_;
    std::vector<std::vector<uint32_t>> in_section_, conflicts_, preorders_;
    std::vector<uint64_t> key_t_;
    // search state
    uint64_t capacity_ = 0, nodes_left_ = 0, ops_ = 0, ops_limit_ = 0;
    size_t mark_raised_ = 0;
    uint64_t stamp_ = 0;
    std::vector<uint64_t> section_stamp_;
    const std::vector<uint32_t>* preorder_ = nullptr;
    std::vector<uint32_t> preorder_index_;
    std::vector<uint32_t> cuts_;
    std::vector<uint64_t> min_offset_, floor_, total_;
    std::vector<uint8_t> placed_;
    std::vector<std::pair<uint32_t, uint64_t>> min_log_, floor_log_;
    std::vector<uint64_t>* offsets_ = nullptr;
};

}  // namespace

Placement place_optimal(const Buffers& b, uint64_t work_budget, uint64_t target) {
    // The best quick heuristic: an upper bound and the fallback.
    Placement best = place_greedy(b, order_by_size(b), Fit::Best);
    uint64_t work = best.work;
    uint64_t lo = buffers_lower_bound(b), hi = best.end;  // the optimum lies in [lo, hi]
    // The search recurses once per buffer placed: keep its depth modest.
    if (b.count() > 5000 || hi <= lo) {
        best.optimal = hi <= lo;
        best.lower_bound = lo;
        if (!best.optimal) best.method = "greedy_by_size (too many buffers to search)";
        best.work = work;
        return best;
    }
    CanonicalSearch search(b);
    std::vector<uint64_t> offsets;
    uint64_t tried_high = 0;
    // The lower bound first (tight instances are often posed there), then bisection.
    uint64_t capacity = target != 0 && target < hi ? std::max(target, lo) : lo;
    bool first = true;
    while (lo < hi && capacity < hi && work < work_budget) {
        // The first attempt gets half the budget (three quarters when it is the
        // caller's target capacity); later ones a third of what is left.
        const uint64_t left = work_budget - work;
        const uint64_t share = first ? (target ? left / 4 * 3 : left / 2) : left / 3;
        first = false;
        uint64_t spent = 0;
        const Outcome r = search.solve(capacity, std::max<uint64_t>(share, 1), offsets, spent);
        work += spent;
        if (r == Outcome::Found) {
            uint64_t end = 0;
            for (size_t x = 0; x < b.count(); ++x)
                if (b.lower[x] < b.upper[x]) end = std::max(end, offsets[x] + b.size[x]);
            // A placement found under `capacity` ends there or below; anything
            // else would stall the bisection, so it is never taken.
            if (end > capacity) break;
            best.offset = offsets;
            best.end = end;
            best.method = "optimal_search";
            hi = end;
        } else if (r == Outcome::Infeasible) {
            lo = capacity + 1;
        } else {
            tried_high = std::max(tried_high, capacity + 1);  // unknown below capacity + 1
        }
        // Next: halfway between what is proven (or was given up on) and the best found.
        const uint64_t from = std::max(lo, tried_high);
        if (from >= hi) break;
        capacity = from + (hi - from) / 2;
    }
    best.lower_bound = lo;
    best.optimal = lo >= hi;
    best.work = work;
    return best;
}

}  // namespace emel::memory
