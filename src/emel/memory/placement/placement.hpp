// Offset placement: buffers (live intervals with sizes) in, byte offsets out.
// Shared by plan() for the offset strategies and by the low-level place() API.
// docs/strategies.md is the specification.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "emel/memory/core/strategy.hpp"

namespace emel::memory {

// The placement problem: one row per buffer, half-open [lower, upper).
struct Buffers {
    std::vector<uint64_t> lower;
    std::vector<uint64_t> upper;
    std::vector<uint64_t> size;       // already rounded up to `alignment`
    std::vector<uint64_t> alignment;  // power of two >= 1
    std::vector<uint32_t> rank;       // tie-break order ("id order"), a permutation
    std::vector<std::vector<uint32_t>> partners;  // must never overlap (may be empty)

    size_t count() const { return size.size(); }
    bool has_partners() const { return !partners.empty(); }
    bool live_together(uint32_t a, uint32_t b) const {
        return lower[a] < upper[b] && lower[b] < upper[a];
    }
    // Live at some instant and holding bytes: the rows the exact search
    // places (the others constrain nothing and stay at offset 0).
    bool searched(uint32_t x) const { return lower[x] < upper[x] && size[x] > 0; }
};

// Lifetimes grouped by length, doubling: 1, 2, 3-4, 5-8, ... (classes 0, 1,
// 2, 3, ...). A row of a class whose longest lifetime is L and that lives
// after instant t starts after t - L: the index of placed buffers and the
// window neighbourhoods look rows up by class so.
inline unsigned length_class(uint64_t length) {
    return length <= 1 ? 0u : static_cast<unsigned>(64 - __builtin_clzll(length - 1));
}

// What sorting n rows is charged, in work units: two a row per level of
// comparisons (n log2 n).
inline uint64_t sort_work(uint64_t n) { return 2 * n * (64 - static_cast<uint64_t>(__builtin_clzll(n | 1))); }

struct Placement {
    std::vector<uint64_t> offset;
    uint64_t end = 0;        // max(offset + size), before rounding to the arena alignment
    uint64_t work = 0;       // deterministic work units spent
    std::string method;      // which heuristic produced it (auto/optimal report it)
    bool optimal = false;    // proven optimal (optimal strategy)
    // The best lower bound on `end` proven (the peak of live bytes, or more
    // where the exact search proved it); place()'s "proven_bound".
    uint64_t proven_bound = 0;
    // A greedy pass given up once its end passed the caller's limit: its
    // offsets are partial and must not be used (place_greedy).
    bool abandoned = false;
};

// A placement whose offset or end passes 2^64-1 while placing buffer
// `buffer`. Placements see bare rows, so they throw this; the caller that
// knows the rows' tensors and arena turns it into ALLOCATION_OVERFLOW naming
// them (offsets.cpp).
struct PlacementOverflow : std::exception {
    uint32_t buffer;
    explicit PlacementOverflow(uint32_t buffer_) : buffer(buffer_) {}
    const char* what() const noexcept override { return "placement exceeds 2^64-1 bytes"; }
};

// splitmix64's finaliser: spreads every input bit over the output.
inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// splitmix64: a fixed-seed generator, so every run makes the same choices.
struct Rng {
    uint64_t state = 0x9E3779B97F4A7C15ull;
    uint64_t next() { return mix64(state += 0x9E3779B97F4A7C15ull); }
    size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(next() % n); }
};

// Orders of docs/strategies.md.
std::vector<uint32_t> order_by_size(const Buffers& b);      // §2
std::vector<uint32_t> order_by_lifetime(const Buffers& b);  // §4
std::vector<uint32_t> order_by_conflict_size(const Buffers& b);  // §4
std::vector<uint32_t> order_by_live_peak(const Buffers& b);  // §4

class WorkerPool;
// The buffers `rows` of `b` as an instance of their own, in that order
// (`into`'s vectors reused), on `pool`'s threads where given: lifetimes,
// sizes, alignments and b's ranks (not renumbered); no partners.
void copy_rows(const Buffers& b, const std::vector<uint32_t>& rows, Buffers& into, WorkerPool* pool = nullptr);
// §2: greedy placement in a given order (greedy_by_size.cpp). A pass whose
// end passes `give_up_above` stops there, `abandoned` (auto's passes that can
// no longer win: their work is charged up to that point). `expected_work`:
// what the caller knows a pass over `b` costs (auto: its first pass), which
// keeps cheap passes on one thread; the answer and work never depend on it.
Placement place_greedy(const Buffers& b, const std::vector<uint32_t>& order, Fit fit,
                       uint64_t give_up_above = UINT64_MAX, uint64_t expected_work = UINT64_MAX);
// What a greedy pass run ahead of its turn (auto's side pass, auto_search.cpp)
// records so that it answers as if it had been given up above any limit: its
// end and work at every check where the end grew (a pass given up above L
// stops at the first check whose end passes L).
struct GreedyRecord {
    struct Check {
        uint64_t end, work;
    };
    std::vector<Check> checks;
    // Set by the caller: the pass stops (abandoned) at its next buffer; its
    // answer is not wanted.
    const std::atomic<bool>* cancel = nullptr;
    // Lowered by the caller as it learns the limit it will give the pass
    // (never below it): the pass is given up at the first check past it.
    const std::atomic<uint64_t>* give_up_above = nullptr;
};
// place_greedy on the calling thread, given up only above
// `record.give_up_above`, recording its checks.
Placement place_greedy_recorded(const Buffers& b, const std::vector<uint32_t>& order, Fit fit,
                                GreedyRecord& record);
// Whether place_greedy in `order` runs on one thread: most buffers of its
// batches wait on an earlier one, in levels too narrow for the threads
// (dense traces; judged on a sample of batches), or the pass is too small
// or has partners to take in batches.
bool greedy_runs_on_one_thread(const Buffers& b, const std::vector<uint32_t>& order);
// Whether a place_greedy expected to cost `expected_work` runs on one thread
// whatever its order: too small, or with partners, to take in batches.
bool greedy_too_small_for_threads(const Buffers& b, uint64_t expected_work);
// Whether a whole place_greedy in `order` takes the threads part by part:
// a trace that falls apart in time, whose parts are placed at once, each on
// its own (greedy_by_size.cpp; docs/strategies.md §2, "Time parts").
bool greedy_takes_parts(const Buffers& b, const std::vector<uint32_t>& order);
// A greedy pass over such a trace's parts run ahead on a thread of its own,
// for a caller that charges nothing for a pass given up (auto's closing
// pass): the part with the highest peak of live bytes at once, the others,
// highest first, once the caller gives a limit (lower_limit: it only
// falls); each is given up, and the rest not run, once one ends past it.
// `b` and `order` must outlive it.
class PartsPass {
  public:
    PartsPass(const Buffers& b, const std::vector<uint32_t>& order, Fit fit);
    ~PartsPass();
    PartsPass(const PartsPass&) = delete;
    PartsPass& operator=(const PartsPass&) = delete;
    void lower_limit(uint64_t limit);
    // Within `limit`, place_greedy(b, order, fit)'s answer (offsets, end,
    // work); past it, abandoned (no end or work of use); none where the
    // pass failed (the caller runs it). Taken once.
    std::optional<Placement> unless_above(uint64_t limit);

  private:
    std::atomic<uint64_t> limit_{UINT64_MAX};
    std::atomic<bool> cancel_{false};
    std::atomic<uint64_t> highest_{0};  // the highest end of the parts done
    std::mutex mutex_;  // limit_known_, and cancel_ and limit_ as told_ waits on them
    std::condition_variable told_;
    bool limit_known_ = false;
    std::optional<Placement> answer_;
    std::thread thread_;
};
// §3: the online best-fit allocator, the best_fit strategy (online_best_fit.cpp):
// not greedy's best-fit gap choice (Fit::Best in place_greedy).
Placement place_online_best_fit(const Buffers& b);
// tmmu on bare buffers: slot colouring, aligned prefix sums (tmmu.cpp).
Placement place_slots(const Buffers& b);
// §4: portfolio + bounded search (auto_search.cpp). A work_budget of
// kPolicyBudget (none given) follows default_work_budget.
Placement place_auto(const Buffers& b, uint64_t work_budget, uint64_t target = 0);
// §4, the default-budget policy: the work budget of auto and optimal when none
// is given, from the instance's size, its first greedy answer `best_end` and
// its lower bound. Deterministic: the same instance gets the same budget on
// every machine.
uint64_t default_work_budget(const Buffers& b, uint64_t best_end, uint64_t bound);
// §5: branch and bound (optimal_search.cpp). `target`: a capacity to try first
// (0: start at the lower bound); `incumbent`: a placement to beat. Instances of
// more than kSearchUpTo buffers, or more than kSearchMaxConflicts pairs live
// together (the search's memory), get the greedy answer unsearched.
constexpr size_t kSearchUpTo = 16384;
constexpr uint64_t kSearchMaxConflicts = 30000000;
// What the search would cost on `b`, from one sweep: the pairs of searched
// buffers live together, the work units charged for building its instance
// (a sort and the conflict pairs), and one descent of its race, estimated.
struct SearchCosts {
    uint64_t conflict_pairs = 0, build = 0, descent = 0;
};
SearchCosts search_costs(const Buffers& b);
// `full_packing`: try the full-packing search first (the `optimal` strategy
// does; auto tries it after its first pass, so its own searches and the time
// sections do not).
Placement place_optimal(const Buffers& b, uint64_t work_budget, uint64_t target = 0,
                        const Placement* incumbent = nullptr, uint64_t neighbourhood_budget = 0,
                        bool full_packing = false);

// §5: the exact search under `capacity` alone, its preorders one after
// another, with `work_budget` (building its instance included): a placement
// ending at or below the capacity, or, abandoned, none found within the
// budget (or none exists).
Placement place_within(const Buffers& b, uint64_t capacity, uint64_t work_budget);

// §5, "Time sections" (sections.cpp): `start` (a placement of `b`) improved
// where the instance falls apart in time. Components (no row spans the
// instant between them) above `capacity` (at least the lower bound) are
// searched on their own with it as their target; components too large to
// search whole are placed section by section in time order around the rows
// of the sections before (a rolling horizon). The result is never larger
// than `start`; `proven_bound` and `optimal` say what it proved (every
// component at or under the bound proves the whole). Within about
// `work_budget`; abandoned (nothing done) on instances with partners.
// `sizes`: components of up to `search_whole_up_to` rows are searched whole,
// larger ones rolled through in sections of about `section_rows` rows (tests
// make both tiny).
struct SectionSizes {
    size_t search_whole_up_to = 4096;
    size_t section_rows = 1024;
};
// `pass_work`: what a greedy pass over all of `b` is known to cost (0: not
// known); a component's greedy passes start only where its share holds them.
// `live_peak_pass`: where given, the caller's greedy pass over all of `b` in
// live-peak order with best fit, given up above the limit it is called with,
// which a component of every buffer takes instead of running that pass
// itself (auto runs it once for both: AutoRun::live_peak_over()).
using WholePass = std::function<Placement(uint64_t give_up_above)>;
Placement place_by_sections(const Buffers& b, const Placement& start, uint64_t capacity, uint64_t work_budget,
                            SectionSizes sizes = {}, uint64_t pass_work = 0, const WholePass& live_peak_pass = {});
// Whether the searched rows fall apart into more than one component: some
// instant between two of them is spanned by none (the sections then solve
// each component on its own). O(n log n).
bool falls_apart_in_time(const Buffers& b);

// §5, "Full packings" (full_packing.cpp): on instances whose every instant
// holds exactly the peak of live bytes or nothing (cut from a full
// rectangle), a search for a placement at that bound, which then has no free
// byte at any instant. Within about `work_budget`; abandoned when the
// instance is not full, rows' alignments do not divide the sizes' common
// divisor, partners exist (work 0: refused by one sweep), or no placement
// was found (work: what the search spent).
Placement place_full_packing(const Buffers& b, uint64_t work_budget);
// The share of what is left of a budget that `auto` and `optimal` give it:
// 7/8. On such an instance only a tiling reaches the bound, and nothing else
// in emel finds one (the canonical search stalls near 1.2 of the bound from
// 300 buffers); the rest keeps an answer where none is found.
inline uint64_t full_packing_share(uint64_t left) { return left - left / 8; }

// §5: lowers `best` by re-searching, one window of time at a time around a
// buffer that reaches its end, the buffers that live only inside the window,
// the others kept where they are (for instances the exact search does not
// take whole). `work` grows by what it spends: about `budget` at most.
// `searched` (tests): every window searched, in turn.
struct WindowSearched {
    uint64_t from, to;
    size_t freed;
    bool found;
    uint64_t share, charged;  // the search's share and the work charged for it
};
void improve_by_windows(const Buffers& b, Placement& best, uint64_t budget, uint64_t& work,
                        std::vector<WindowSearched>* searched = nullptr);

// §4: the buffers live around the peak of live bytes, over the widest window
// of instants [from, to) around the peak instant in which at most
// `max_buffers` are live (never fewer than the peak instant's own), as an
// instance of their own with lifetimes cut to the window (peak_window.cpp).
struct PeakWindow {
    uint64_t from = 0, to = 0;
    bool whole = false;             // [from, to) spans every instant: all live rows are in
    std::vector<uint32_t> members;  // the rows of `b` in the window, ascending
    Buffers instance;               // row k is members[k], cut to [from, to)
};
// The rows `members` of `b` as an instance of their own, with lifetimes cut
// to [from, to) (every member must be live there), ranks renumbered in the
// same order, and partners kept among the members.
Buffers cut_to_window(const Buffers& b, const std::vector<uint32_t>& members, uint64_t from, uint64_t to);
// The sweep over an instance's instants is done once; each window is grown
// from it.
class PeakWindows {
  public:
    explicit PeakWindows(const Buffers& b);  // `b` must outlive it
    PeakWindow around_peak(size_t max_buffers) const;

  private:
    // Rows live at some instant of [instants_[from], instants_[to]).
    size_t live_in(size_t from, size_t to) const;
    const Buffers& b_;
    std::vector<uint64_t> lowers_, uppers_;  // of the rows live at all, sorted
    std::vector<uint64_t> instants_;         // where liveness changes, ascending
    size_t peak_at_ = 0;                     // the earliest instant of the peak
};
// Every buffer placed by first fit around `inside`, a placement of the
// window's instance: the window's buffers in the order of their offsets there
// (which keeps each at or below it), then the others in `rest_order`.
// `expected_work`: what the pass is expected to cost, as for place_greedy.
Placement place_around_window(const Buffers& b, const PeakWindow& w, const Placement& inside,
                              const std::vector<uint32_t>& rest_order, uint64_t give_up_above = UINT64_MAX,
                              uint64_t expected_work = UINT64_MAX);
// Every buffer by first fit: `first` in its order, then the others in
// `rest_order` (peak_window.cpp; the peak window's and the full-packing
// search's completion). `first` in the order of offsets some placement gave
// them keeps each at or below its offset there.
Placement place_first_fit_after(const Buffers& b, const std::vector<uint32_t>& first,
                                const std::vector<uint32_t>& rest_order, uint64_t give_up_above = UINT64_MAX,
                                uint64_t expected_work = UINT64_MAX);

// One strategy on bare buffers (offsets.cpp). `target`: auto/optimal's first
// capacity to try (0: none).
Placement place_by(const Buffers& b, Strategy s, Fit fit, uint64_t work_budget, uint64_t target);

// The place() API (docs/strategies.md §6): rows checked (lower <= upper),
// sizes rounded up to `alignment`, placed by `s`; the arena size is the end
// rounded up to `alignment`. Throws PlanError naming the row.
struct RowPlacement {
    Placement placed;
    uint64_t arena_size = 0;
    uint64_t peak_live_bytes = 0;  // of the live rows: place()'s "lower_bound" key
};
RowPlacement place_rows(std::vector<uint64_t> lower, std::vector<uint64_t> upper,
                        std::vector<uint64_t> size, uint64_t alignment, Strategy s, Fit fit,
                        uint64_t work_budget, uint64_t target);

// The peak of live bytes (sizes as given) over all instants: no placement can
// end below it, so it is the bound every strategy starts from
// (peak_live_bytes.cpp).
uint64_t peak_live_bytes(const Buffers& b);

// Times spread over no more instants than twice the rows (a graph's steps,
// most traces) are cheaper to sort or sweep by counting, with a table as
// long as the spread, than by comparison.
inline bool times_fit_a_table(uint64_t spread, size_t rows) { return spread <= 2 * static_cast<uint64_t>(rows); }

}  // namespace emel::memory
