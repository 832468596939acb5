// The exact search's memory of failures (docs/strategies.md §5): a search
// state from which no completion exists fails the same way whenever it comes
// back, and in the canonical search it does come back: different placements
// of the buffers below often leave the buffers still to place the same
// lowest offsets. Such a state is remembered by a 128-bit key, so it is
// recognised again without searching it (a false match needs two
// independent 64-bit hashes to collide at once).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "emel/memory/placement/placement.hpp"  // mix64

namespace emel::memory {

struct StateKey {
    uint64_t a = 0, b = 0;
};

// A fixed-size table: a new failure takes its slot over whatever was there.
// Its size depends on the instance only, never on a search's budget, so a
// search finds the same failures whether it runs once or is restarted with
// growing limits (the race's two schedules must agree).
class FailedStates {
  public:
    explicit FailedStates(size_t searched_buffers) {
        // 256 slots a buffer, 2^10..2^18 (16 KiB..4 MiB): challenging D (213
        // buffers) and J settle capacities 1.4-8x sooner than without the table,
        // and a quarter of the slots loses some of that.
        size_t slots = size_t{1} << 10;
        while (slots < (size_t{1} << 18) && slots < searched_buffers * 256) slots *= 2;
        mask_ = slots - 1;
    }

    // A new search: earlier entries no longer match (the run number is in
    // every key), so nothing needs clearing.
    void begin_run() { ++run_; }

    bool contains(StateKey k) const {
        if (!slots_) return false;
        const Slot& s = slots_.get()[k.a & mask_];
        return s.a == k.a && s.b == (k.b ^ mix64(run_));
    }

    void insert(StateKey k) {
        if (!slots_) {
            // calloc: large tables come as untouched zero pages, paid for
            // only where a search writes.
            slots_.reset(static_cast<Slot*>(std::calloc(mask_ + 1, sizeof(Slot))));
            if (!slots_) return;  // no memory: the search goes on without the table
        }
        slots_.get()[k.a & mask_] = Slot{k.a, k.b ^ mix64(run_)};
    }

  private:
    struct Slot {
        uint64_t a, b;
    };
    struct Free {
        void operator()(Slot* p) const { std::free(p); }
    };
    std::unique_ptr<Slot, Free> slots_;
    size_t mask_ = 0;
    uint64_t run_ = 0;
};

}  // namespace emel::memory
