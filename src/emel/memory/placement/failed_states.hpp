// The exact search's memory of failures (docs/strategies.md §5): a search
// state from which no completion exists fails the same way whenever it comes
// back, and in the canonical search it does come back: different placements
// of the buffers below often leave the buffers still to place the same
// lowest offsets. Such a state is remembered by a 128-bit key, so it is
// recognised again without searching it (a false match needs two
// independent 64-bit hashes to collide at once).
//
// Two kinds of entry: the current run's failures, and those kept from
// earlier runs (`commit`), each with the capacity it was proven under. A
// state that cannot be completed below a capacity cannot be completed below
// a smaller one either, so a kept failure holds for every later run at that
// capacity or below.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

namespace emel::memory {

struct StateKey {
    uint64_t a = 0, b = 0;
};

// The slots of a table of failed states: 256 a buffer, 2^10..2^18 (48
// KiB..12 MiB here): challenging D (213 buffers) and J settle capacities
// 1.4-8x sooner than without the table, and a quarter of the slots loses
// some of that. The full-packing search's table has as many.
inline size_t failed_state_slots(size_t searched_buffers) {
    size_t slots = size_t{1} << 10;
    while (slots < (size_t{1} << 18) && slots < searched_buffers * 256) slots *= 2;
    return slots;
}

// A fixed-size table: a new failure takes its slot over whatever was there.
// Its size depends on the instance only, never on a search's budget, so a
// search finds the same failures whether it runs once or is restarted with
// growing limits (the race's two schedules must agree).
class FailedStates {
  public:
    explicit FailedStates(size_t searched_buffers) : mask_(failed_state_slots(searched_buffers) - 1) {}

    // A new search: the current run's earlier entries no longer match (the
    // run number is in every slot), so nothing needs clearing.
    void begin_run() {
        ++run_;
        written_.clear();
    }

    // Starts reading the slot of a key whose first hash is `a`.
    void prefetch(uint64_t a) const {
        if (slots_) __builtin_prefetch(&slots_.get()[a & mask_]);
    }

    bool failed_in_run(StateKey k) const {
        const Slot* s = find(k.a & mask_);
        return s && s->run == run_ && s->a == k.a && s->b == k.b;
    }

    // Failed in a committed run under `capacity` or more.
    bool failed_at_or_above(StateKey k, uint64_t capacity) const {
        const Slot* s = find(k.a & mask_);
        return s && s->kept_a == k.a && s->kept_b == k.b && s->kept_capacity >= capacity;
    }

    void insert(StateKey k) {
        const size_t i = k.a & mask_;
        Slot* s = slot(i);
        if (!s) return;  // no memory: the search goes on without the table
        s->a = k.a;
        s->b = k.b;
        s->run = run_;
        if (written_.size() <= mask_) written_.push_back(static_cast<uint32_t>(i));
    }

    // Keeps the current run's failures, proven under `capacity`, for later
    // runs. Only a run whose course does not depend on the threads' timing
    // may be kept (the race commits those), or the table, and with it every
    // later search, would differ from one run of the program to the next.
    // Returns the work it took: a visit to each slot the run wrote, or to
    // all of them when it wrote more than that.
    uint64_t commit(uint64_t capacity) {
        if (!slots_ && sparse_.empty()) return 0;
        auto keep = [&](Slot& s) {
            if (s.run != run_) return;
            if (s.kept_a == s.a && s.kept_b == s.b && s.kept_capacity >= capacity) return;
            s.kept_a = s.a;
            s.kept_b = s.b;
            s.kept_capacity = capacity;
        };
        uint64_t visits = 0;
        if (written_.size() <= mask_) {
            for (uint32_t i : written_) keep(*slot(i));
            visits = written_.size();
        } else {
            if (slots_)
                for (size_t i = 0; i <= mask_; ++i) keep(slots_.get()[i]);
            else
                for (Sparse& e : sparse_)
                    if (e.index != kEmpty) keep(e.slot);
            visits = mask_ + 1;
        }
        written_.clear();
        return visits;
    }

  private:
    // A slot holds the current run's failure and the kept one beside it:
    // both are looked up at the same key, within one cache line.
    struct Slot {
        uint64_t a, b, run;
        uint64_t kept_a, kept_b, kept_capacity;
    };
    struct Free {
        void operator()(Slot* p) const { std::free(p); }
    };
    // The table's slots as a small open-addressed map, by slot index, while
    // few are written: a search that settles in a few hundred nodes (the
    // models' arenas) then never clears megabytes. It holds exactly what the
    // full table would, so the search is the same either way; past a sixteenth
    // of the slots it moves into the full table.
    struct Sparse {
        uint32_t index = kEmpty;
        Slot slot{};
    };
    static constexpr uint32_t kEmpty = UINT32_MAX;

    static size_t spread(size_t i) { return (i * 0x9E3779B97F4A7C15ull) >> 20; }

    const Slot* find(size_t i) const {
        if (slots_) return &slots_.get()[i];
        if (sparse_.empty()) return nullptr;
        const size_t m = sparse_.size() - 1;
        for (size_t h = spread(i) & m;; h = (h + 1) & m) {
            if (sparse_[h].index == i) return &sparse_[h].slot;
            if (sparse_[h].index == kEmpty) return nullptr;
        }
    }

    // Slot i, made when missing (all zero: it matches no key, as a calloc'd
    // one); null only when there is no memory for the full table.
    Slot* slot(size_t i) {
        if (slots_) return &slots_.get()[i];
        if (sparse_.empty()) sparse_.resize(64);
        for (;;) {
            const size_t m = sparse_.size() - 1;
            size_t h = spread(i) & m;
            while (sparse_[h].index != kEmpty && sparse_[h].index != i) h = (h + 1) & m;
            if (sparse_[h].index == i) return &sparse_[h].slot;
            if (2 * (sparse_used_ + 1) <= sparse_.size()) {
                sparse_[h].index = static_cast<uint32_t>(i);
                ++sparse_used_;
                return &sparse_[h].slot;
            }
            if (!grow()) return nullptr;
            if (slots_) return &slots_.get()[i];
        }
    }

    // Twice the sparse map, or the full table once the map would hold more
    // than a sixteenth of its slots. False when the full table has no memory.
    bool grow() {
        if (sparse_.size() * 8 <= mask_ + 1) {
            std::vector<Sparse> old(sparse_.size() * 2);
            old.swap(sparse_);
            sparse_used_ = 0;
            const size_t m = sparse_.size() - 1;
            for (const Sparse& e : old) {
                if (e.index == kEmpty) continue;
                size_t h = spread(e.index) & m;
                while (sparse_[h].index != kEmpty) h = (h + 1) & m;
                sparse_[h] = e;
                ++sparse_used_;
            }
            return true;
        }
        // calloc: large tables come as untouched zero pages, paid for only
        // where a search writes. An all-zero slot matches no key: runs count
        // from 1, and a kept key is (0, 0) by a 2^-128 chance.
        slots_.reset(static_cast<Slot*>(std::calloc(mask_ + 1, sizeof(Slot))));
        if (!slots_) return false;
        for (const Sparse& e : sparse_)
            if (e.index != kEmpty) slots_.get()[e.index] = e.slot;
        std::vector<Sparse>().swap(sparse_);
        sparse_used_ = 0;
        return true;
    }

    std::unique_ptr<Slot, Free> slots_;
    std::vector<Sparse> sparse_;  // while slots_ is not made (power-of-two size)
    size_t sparse_used_ = 0;
    std::vector<uint32_t> written_;  // the slots this run wrote, while fewer than the slots
    size_t mask_ = 0;
    uint64_t run_ = 0;
};

}  // namespace emel::memory
