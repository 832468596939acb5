#include "emel/memory/placement/capacity_ladder.hpp"

#include <algorithm>

namespace emel::memory::exact {

namespace {

// Where sweep k of the capacity ladder cuts the gap, in 64ths: the middle
// first, then fractions spread over [1/4, 3/4] by the golden ratio. Whether
// a capacity settles within a share is erratic (a capacity may be found
// where a smaller and a larger one were not, challenging D), so each sweep
// tries capacities the earlier ones did not (docs/strategies.md §5).
uint64_t sweep_cut(uint64_t sweep) {
    return sweep == 0 ? 32 : 16 + (sweep * 40503u % 65536u) / 2048u;
}

}  // namespace

CapacityLadder::CapacityLadder(const Buffers& b, PreorderRace& race, Placement& best, uint64_t lo,
                               uint64_t target, uint64_t descent, uint64_t work_budget)
    : b_(b), race_(race), best_(best), lo_(lo), hi_(best.end), target_(target), descent_(descent),
      work_budget_(work_budget),
      capacity_(target != 0 && target < best.end ? std::max(target, lo) : lo),
      share_(std::max<uint64_t>(descent, uint64_t{1} << 20)) {}

void CapacityLadder::next_capacity() {
    uint64_t from = std::max(lo_, tried_high_);
    // A sweep ends within 1/32 of the gap below the best (what is left
    // there is crumbs): again from the bound, with twice the share.
    if (from >= hi_ || hi_ - from < (hi_ - lo_) / 32) {
        tried_high_ = 0;
        share_ = std::min(share_ * 2, work_budget_);
        from = lo_;
        ++sweep_;
    }
    capacity_ = from + static_cast<uint64_t>(static_cast<unsigned __int128>(hi_ - from) * sweep_cut(sweep_) / 64);
}

void CapacityLadder::resume() { next_capacity(); }

void CapacityLadder::climb(uint64_t until, uint64_t& work) {
    while (lo_ < hi_ && capacity_ < hi_ && work < until) {
        const uint64_t left = until - work;
        uint64_t asked = std::min(left, share_);
        if (first_) {  // untargeted, the bound keeps room for two descents after it
            asked = target_ ? left / 4 * 3 : std::max(left / 8, left / 2 - std::min(left / 2, descent_));
            first_ = false;
        }
        uint64_t spent = 0;
        const Outcome r = race_.solve(capacity_, std::max<uint64_t>(asked, 1), offsets_, spent);
        work += spent;
        if (r == Outcome::Found) {
            uint64_t end = 0;
            for (size_t x = 0; x < b_.count(); ++x)
                if (b_.lower[x] < b_.upper[x]) end = std::max(end, offsets_[x] + b_.size[x]);
            // A placement found under `capacity` ends there or below; anything
            // else would stall the bisection, so it is never taken.
            if (end > capacity_) return;
            best_.offset = offsets_;
            best_.end = end;
            best_.method = "optimal_search";
            hi_ = end;
        } else if (r == Outcome::Infeasible) {
            lo_ = capacity_ + 1;
        } else {
            tried_high_ = std::max(tried_high_, capacity_ + 1);
        }
        next_capacity();
    }
}

}  // namespace emel::memory::exact
