// The exact search's capacity ladder (docs/strategies.md §5): the decision
// problem "do the buffers fit under this capacity?" asked at capacity after
// capacity, each answered by the preorder race, to narrow [lo, hi], the
// range the optimum lies in, until the budget ends or lo meets hi.
#pragma once

#include <cstdint>
#include <vector>

#include "emel/memory/placement/preorder_race.hpp"

namespace emel::memory::exact {

// The lower bound first (tight instances are often posed there), or the
// caller's target, with most of the budget: the attempt that settles these
// instances. Then sweeps of bisection between the bound and the best found,
// each attempt with a fixed share: an attempt cut by its share moves the sweep
// up, a placement found moves the best down, and a sweep that meets the best
// starts again from the bound with twice the share. Whether a capacity is
// settled quickly varies a lot from one capacity to the next (challenging J:
// 1,044,480 in 13M units, 1,048,064 not in 450M), so many cheap attempts at
// spread capacities beat few costly ones. The first share is two descents
// (each of the search's n nodes sorts the partition and checks its sections:
// 4n + sections), below which an attempt on a large instance can only fail.
class CapacityLadder {
  public:
    // `best` is the answer so far (its end is hi); `lo` a proven bound;
    // `target` the caller's first capacity (0: none); `descent` one descent
    // of the race, estimated (search_costs).
    CapacityLadder(const Buffers& b, PreorderRace& race, Placement& best, uint64_t lo, uint64_t target,
                   uint64_t descent, uint64_t work_budget);

    // Attempts until the work reaches `until`, lo meets hi, or an attempt
    // finds a placement above its capacity (which would stall the bisection).
    void climb(uint64_t until, uint64_t& work);
    // After `best` was lowered from outside: the next capacity placed again
    // under it. The attempts resume where they stopped (kept failures).
    void resume();

    uint64_t lo() const { return lo_; }
    uint64_t hi() const { return hi_; }
    void lower_hi(uint64_t end) { hi_ = end; }

  private:
    // Where the next attempt goes, once the last one is known.
    void next_capacity();

    const Buffers& b_;
    PreorderRace& race_;
    Placement& best_;
    uint64_t lo_, hi_;  // the optimum lies in [lo, hi]
    uint64_t target_, descent_, work_budget_;
    uint64_t capacity_;
    uint64_t share_;
    uint64_t tried_high_ = 0;  // attempts cut by their share: unknown below this
    bool first_ = true;
    uint64_t sweep_ = 0;
    std::vector<uint64_t> offsets_;
};

}  // namespace emel::memory::exact
