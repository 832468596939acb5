// auto (docs/strategies.md §4): the best of the heuristics, improved by a
// bounded, deterministic search over greedy placement orders.
#include <algorithm>
#include <numeric>
#include <memory>
#include <optional>
#include <system_error>
#include <thread>

#include "emel/memory/placement/placement.hpp"
#include "emel/memory/placement/worker_pool.hpp"

namespace emel::memory {

namespace {

// Instances from which one-thread passes run side by side: the start's two,
// and greedy by size with best fit ahead of its turn (SidePass) where the
// passes run on one thread. Below, a pass takes milliseconds.
constexpr size_t kSideBySideFrom = 16384;
// Peak windows are tried on instances of more than this many buffers.
constexpr size_t kPeakWindowsFrom = 2000;
// A peak window's search costs at most this many greedy passes.
constexpr uint64_t kWindowSearchPasses = 4;
// The time sections' search (try_sections): one pass's worth. Uncounted where
// it loses, this cap alone bounds its wall time there; more did not change an
// answer on the workload or idealloc traces (docs/strategies.md §4 has the
// figures).
constexpr uint64_t kSectionsPasses = 1;
// The default-budget policy (docs/strategies.md §4): what auto and optimal
// spend when no budget is given.
constexpr uint64_t kDefaultBudgetMs = 4000;
constexpr uint64_t kEasyBudgetMs = 200;  // first answer within 0.5% of the bound
// Under the policy, a run with fewer than this many greedy passes' worth
// left after its first window neighbourhoods skips the later passes and
// ends after the wider peak windows (AutoRun::few_passes_left).
constexpr uint64_t kFewPassesLeft = 16;
// Under the policy's full budget, a run on more buffers than the exact search
// takes whole whose first pass leaves fewer than this many passes' worth is
// bound by its passes (AutoRun::pass_bound): it spends most of what is left
// on window neighbourhoods, whose cost does not grow with the instance.
constexpr uint64_t kPassBoundPasses = 4;
// Such a run's windows get at least this much, even where the first pass took
// the whole budget (10^6 random buffers: 3.4G units, the 4,000 ms).
constexpr uint64_t kWindowAllowanceMs = 1000;
// The exact search at the bound, tried first on small instances, spends at
// most this (and a quarter of the budget): about a millisecond.
constexpr uint64_t kEarlyProofWork = uint64_t{1} << 20;

std::vector<uint32_t> order_by_offset(const Buffers& b, const Placement& p) {
    std::vector<uint32_t> order(b.count());
    std::iota(order.begin(), order.end(), 0u);
    std::sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
        if (p.offset[x] != p.offset[y]) return p.offset[x] < p.offset[y];
        if (b.size[x] != b.size[y]) return b.size[x] > b.size[y];
        return b.rank[x] < b.rank[y];
    });
    return order;
}

// Buffers that reach the top of the placement: the ones to move.
std::vector<uint32_t> peak_buffers(const Buffers& b, const Placement& p) {
    std::vector<uint32_t> top;
    for (uint32_t x = 0; x < b.count(); ++x)
        if (b.size[x] && p.offset[x] + b.size[x] == p.end) top.push_back(x);
    return top;
}

std::vector<uint32_t> moved_to_front(std::vector<uint32_t> order, const std::vector<uint32_t>& first) {
    std::vector<uint8_t> is_first(order.size(), 0);
    for (uint32_t x : first) is_first[x] = 1;
    std::stable_partition(order.begin(), order.end(), [&](uint32_t x) { return is_first[x] != 0; });
    return order;
}

// A pass that passes 2^64-1 loses to every pass that places: tmmu's slots
// can overflow where offsets fit (issue 31). It comes back abandoned, so auto
// is refused only when no pass places, naming the buffer of the first pass
// that overflowed (`overflowed` starts at kNoOverflow).
constexpr uint32_t kNoOverflow = UINT32_MAX;

template <class Pass>
Placement unless_overflow(Pass&& pass, uint32_t& overflowed) {
    try {
        return pass();
    } catch (const PlacementOverflow& e) {
        if (overflowed == kNoOverflow) overflowed = e.buffer;
        Placement p;
        p.end = UINT64_MAX;
        p.abandoned = true;
        return p;
    }
}

// A greedy pass run ahead of its turn on a thread of its own, while the run
// goes on (docs/strategies.md §4, "Side pass"). Where the passes run on one
// thread (dense traces) the second core is otherwise idle through them. When
// its turn comes, the pass is taken as if it had been given up above the
// limit the run gives it then (given_up_above()): the same answer and work
// as running it then, so the run's answer and work are unchanged; only the
// wall time shrinks. Where it failed (an overflow, no thread), the run
// places it itself, as before.
class SidePass {
  public:
    // `b` and `order` must outlive the side pass; `limit`: the most the run
    // will give it up above (the run's limits only fall: lower_limit()).
    SidePass(const Buffers& b, const std::vector<uint32_t>& order, Fit fit, uint64_t limit) : limit_(limit) {
        record_.cancel = &cancel_;
        record_.give_up_above = &limit_;
        try {
            thread_ = std::thread([this, &b, &order, fit] {
                try {
                    full_ = place_greedy_recorded(b, order, fit, record_);
                } catch (...) {
                    failed_ = true;
                }
            });
        } catch (const std::system_error&) {
            failed_ = true;
        }
    }
    ~SidePass() {
        cancel_ = true;
        if (thread_.joinable()) thread_.join();
    }
    SidePass(const SidePass&) = delete;
    SidePass& operator=(const SidePass&) = delete;

    // The run will give the pass a limit of at most `limit`: it is given up
    // at its first check above, as the run would give it up there (that
    // check is recorded; later ones are not needed).
    void lower_limit(uint64_t limit) { lower_to(limit_, limit); }

    // The pass as place_greedy(b, order, fit, limit) gives it (abandoned:
    // its end and work at the first check past the limit); none where the
    // side pass failed. Taken once.
    std::optional<Placement> given_up_above(uint64_t limit) {
        lower_limit(limit);
        if (thread_.joinable()) thread_.join();
        if (failed_) return std::nullopt;
        for (const GreedyRecord::Check& c : record_.checks) {
            if (c.end <= limit) continue;
            Placement p;
            p.end = c.end;
            p.work = c.work;
            p.method = full_.method;
            p.abandoned = true;
            return p;
        }
        // Whole, or (never: it stops only past a limit not below this one)
        // stopped short of it.
        if (full_.abandoned) return std::nullopt;
        return std::move(full_);
    }

  private:
    std::atomic<bool> cancel_{false};
    std::atomic<uint64_t> limit_;
    GreedyRecord record_;
    Placement full_;
    bool failed_ = false;
    std::thread thread_;
};

}  // namespace

uint64_t default_work_budget(const Buffers& b, uint64_t best_end, uint64_t bound) {
    (void)b;
    // Within 0.5% of the bound already: no budget can gain more than that.
    if (best_end <= bound + bound / 200) return kEasyBudgetMs * kWorkUnitsPerMs;
    // Else the full budget: smaller ones leave random lifetimes of every size
    // measurably above it (docs/strategies.md §4, "The default budget").
    // Where it is proven optimal sooner, the run stops there.
    return kDefaultBudgetMs * kWorkUnitsPerMs;
}

namespace {

// auto without a capacity target: the portfolio, the exact search on small
// instances, then local search over greedy orders. One run, in named phases
// (place_auto_untargeted below calls them in order); what they share is the
// best answer so far, the order that produced it and the work spent.
class AutoRun {
  public:
    // `work_budget` is the caller's: the default-budget policy sets it (start()).
    AutoRun(const Buffers& b, uint64_t& work_budget)
        : b_(b), work_budget_(work_budget), bound_(peak_live_bytes(b)), proven_(bound_) {}

    void start();
    void prove_bound_early();
    void live_peak_pass();
    void try_peak_window(size_t max_buffers);
    bool sections_may_run() const;
    void try_sections();
    void try_full_packing();
    void try_windows(uint64_t share);
    bool pass_bound() const;
    void sections_where_split();
    void spend_on_windows();
    bool few_passes_left() const;
    bool gained_since_start() const;
    void end_here() { work_budget_ = std::min(work_budget_, work_); }
    void offset_order_pass();
    void later_passes();
    bool exact_search();
    void local_search();
    void last_single_pass();
    Placement finish();

    uint64_t left() const { return work_budget_ - std::min(work_, work_budget_); }

  private:
    // A placement of the portfolio, kept when it is smaller than the best so
    // far; `order` is what produced it (null: no order).
    void consider(Placement&& p, const std::vector<uint32_t>* order) {
        work_ += p.work;
        if (!p.abandoned && (p.end < best_.end || best_.abandoned)) {
            best_ = std::move(p);
            if (order) best_order_ = *order;
            else best_order_.clear();
            // The side pass will be given up above to_win() or lower.
            if (size_best_fit_ahead_) size_best_fit_ahead_->lower_limit(to_win());
            if (size_best_fit_parts_) size_best_fit_parts_->lower_limit(to_win());
        }
    }
    // Every pass after the first costs about what the first did (pass_):
    // a cheap one stays on one thread (place_greedy).
    Placement greedy(const std::vector<uint32_t>& order, Fit fit, uint64_t give_up_above) {
        return greedy_noting(order, fit, give_up_above, overflowed_);
    }
    // The same, the first buffer that overflows noted in `overflowed` (a
    // pass on another thread notes its own, taken in turn).
    Placement greedy_noting(const std::vector<uint32_t>& order, Fit fit, uint64_t give_up_above,
                            uint32_t& overflowed) const {
        return unless_overflow([&] { return place_greedy(b_, order, fit, give_up_above, pass_); }, overflowed);
    }
    bool room_for_a_pass() const { return work_ + pass_ <= work_budget_; }
    // At the bound nothing can be smaller: no pass is worth its work. The
    // exact search may prove more than the peak of live bytes.
    bool done() const { return best_.end <= std::max(proven_, good_enough_); }
    bool worth_a_pass() const { return !done() && room_for_a_pass(); }
    // Greedy by size with best fit, given up above `limit`: the side pass's
    // where one ran ahead (then done with), else run here.
    // `uncounted`: the caller counts no work for it where it loses
    // (last_single_pass), so the pass in parts may answer.
    Placement size_best_fit(uint64_t limit, bool uncounted = false) {
        if (size_best_fit_parts_) {
            std::optional<Placement> p;
            if (uncounted) p = size_best_fit_parts_->unless_above(limit);
            size_best_fit_parts_.reset();
            if (p) return std::move(*p);
        }
        if (size_best_fit_ahead_) {
            std::optional<Placement> p = size_best_fit_ahead_->given_up_above(limit);
            size_best_fit_ahead_.reset();
            if (p) return std::move(*p);
        }
        return greedy(by_size_, Fit::Best, limit);
    }
    // A later pass wins only below the best so far (ties keep the earlier):
    // it is given up as soon as its end reaches the best's, which on large
    // traces saves most of a losing pass (the first pass is always whole: it
    // measures what a pass costs).
    uint64_t to_win() const { return best_.end - 1; }
    // The live-peak pass (best fit) given up above `limit`, run once per
    // limit: on a trace of one component the sections' pass over it is this
    // one (place_by_sections), and where they do not win, live_peak_pass()
    // asks for it again with the same limit (random lifetimes up to 2,000
    // steps, 10^5 buffers: 0.4 s each).
    Placement live_peak_over(uint64_t limit) {
        if (by_live_peak_.empty()) by_live_peak_ = order_by_live_peak(b_);
        if (!live_peak_ || live_peak_limit_ != limit) {
            // Crowded lifetimes follow one another in this order, so its
            // pass may run on one thread where the size order's does not.
            run_size_best_fit_ahead_beside(by_live_peak_);
            live_peak_ = greedy(by_live_peak_, Fit::Best, limit);
            live_peak_limit_ = limit;
        }
        return *live_peak_;
    }
    // Greedy by size with best fit, which the run takes later unless it
    // proves its answer optimal, runs ahead on a side thread from here
    // (SidePass) where passes in `order`, about to run, take one thread:
    // 16,384 buffers or more, two threads or more, and not running or
    // taken already.
    void run_size_best_fit_ahead_beside(const std::vector<uint32_t>& order) {
        if (size_best_fit_ahead_ || size_best_fit_ran_ || size_best_fit_parts_ || by_size_.empty() ||
            b_.count() < kSideBySideFrom ||
            placement_threads() < 2 || !greedy_runs_on_one_thread(b_, order))
            return;
        size_best_fit_ahead_ = std::make_unique<SidePass>(b_, by_size_, Fit::Best, to_win());
    }

    const Buffers& b_;
    uint64_t& work_budget_;
    const uint64_t bound_;
    uint64_t proven_;
    uint64_t good_enough_ = 0;
    uint64_t pass_ = 1;  // what a greedy pass costs: the first pass's work
    bool policy_ = false;         // the budget is the policy's (none was given)
    uint64_t start_end_ = 0;      // the start's answer (gained_since_start())
    bool windows_ran_ = false;    // try_windows() searched
    uint64_t work_ = 0;
    uint32_t overflowed_ = kNoOverflow;
    Placement best_;
    // The order that produced `best_`; empty for the answers that came from
    // no order (slots, best_fit, the exact search), which stand for their
    // buffers by offset, sorted only if the local search gets that far.
    std::vector<uint32_t> best_order_;
    std::vector<uint32_t> by_size_, by_live_peak_;
    std::optional<Placement> live_peak_;  // live_peak_over()'s pass, given up above live_peak_limit_
    uint64_t live_peak_limit_ = 0;
    bool size_best_fit_ran_ = false;
    // Greedy by size with best fit, run ahead on a side thread from start()
    // where the passes run on one thread (declared after its order:
    // destroyed first).
    std::unique_ptr<SidePass> size_best_fit_ahead_;
    // Or in time parts, beside a first pass that takes them, for a run
    // bound by its passes, whose last_single_pass alone takes it (start()).
    std::unique_ptr<PartsPass> size_best_fit_parts_;
    std::optional<Placement> first_pass_;  // the first pass, where it lost to slots or best_fit
    std::optional<PeakWindows> windows_;  // the sweep, made for the first window
    size_t last_window_ = 0;              // buffers in the last window tried
};

// The portfolio's start, in tie-break order: slots, the online best fit and
// the first pass, which sets the policy's budget.
void AutoRun::start() {
    // Slots and the online best fit are passes on one thread each, neither
    // reading the other: on large instances (10^6 random buffers: 0.3 s and 0.7 s)
    // they run side by side. Taken in this order after, as if run in turn:
    // the same answer, work and first overflow named.
    Placement slots, online;
    uint32_t slots_overflow = kNoOverflow, online_overflow = kNoOverflow;
    run_two(
        [&](unsigned t) {
            if (t == 0) slots = unless_overflow([&] { return place_slots(b_); }, slots_overflow);
            else online = unless_overflow([&] { return place_online_best_fit(b_); }, online_overflow);
        },
        b_.count() >= kSideBySideFrom);
    overflowed_ = slots_overflow != kNoOverflow ? slots_overflow : online_overflow;
    best_ = std::move(slots);
    work_ = best_.work;
    consider(std::move(online), nullptr);
    const bool policy = work_budget_ == kPolicyBudget;
    // Slots or the online best fit at the bound: proven optimal, so no pass
    // can win and the run ends here, at once. The first pass would have cost
    // the square of the buffers where all of them live together (a clique
    // of 20,000: 4 s), for the same answer (ties keep the earlier).
    if (!best_.abandoned && best_.end <= bound_) {
        if (policy) work_budget_ = default_work_budget(b_, best_.end, bound_);
        return;
    }
    by_size_ = order_by_size(b_);
    // Beside the first pass and what follows (on dense traces of 10^5
    // buffers each pass by size takes seconds). Where the first pass takes
    // the threads part by part (a trace that falls apart in time) and the
    // run may be bound by its passes (the policy, more than 16,384
    // buffers), part by part instead (PartsPass; kept only where the run
    // is bound by its passes, below).
    if (policy && b_.count() > kSearchUpTo && greedy_takes_parts(b_, by_size_))
        size_best_fit_parts_ = std::make_unique<PartsPass>(b_, by_size_, Fit::Best);
    else
        run_size_best_fit_ahead_beside(by_size_);
    // The first pass is the one huge traces may be left with (a pass over
    // Y_1 or 10^6 buffers takes seconds): first fit by size, which is never
    // worse than best fit by size on the idealloc traces and the synthetic
    // ones and clearly better on random lifetimes (docs/benchmarks.md).
    // (Its cost is not known yet: it may take the threads.)
    Placement first_pass =
        unless_overflow([&] { return place_greedy(b_, by_size_, Fit::First, UINT64_MAX); }, overflowed_);
    // Every later step starts from a placed answer.
    if (best_.abandoned && first_pass.abandoned) throw PlacementOverflow(overflowed_);
    // Every later greedy pass costs about what this one did: one is started
    // only when it still fits in the budget, so the wall time stays within the
    // budget plus this first pass, whatever the instance's size.
    pass_ = std::max<uint64_t>(first_pass.work, 1);
    // No budget given: the default-budget policy, from the instance and its
    // first answer (deterministic: both are the same on every machine).
    if (policy) work_budget_ = default_work_budget(b_, std::min(best_.end, first_pass.end), bound_);
    policy_ = policy;
    // Under the policy's full budget the run also ends once the answer is
    // within 0.5% of the bound: no budget can gain more than that (S_1 ends
    // after its live-peak pass; docs/strategies.md §4).
    good_enough_ = policy && work_budget_ > kEasyBudgetMs * kWorkUnitsPerMs ? bound_ + bound_ / 200 : 0;
    // Where slots or the online best fit beat it, the first pass is kept for
    // a run bound by its passes (which only these runs can be): its windows
    // start from it (spend_on_windows).
    if (policy && b_.count() > kSearchUpTo && !first_pass.abandoned && first_pass.end >= best_.end &&
        !best_.abandoned)
        first_pass_ = first_pass;
    consider(std::move(first_pass), &by_size_);
    start_end_ = best_.end;
    // A run bound by its passes takes greedy by size with best fit only at
    // its end, and only to check that it does not win: it goes on part by
    // part (PartsPass), given up as soon as one part passes the answer.
    // Any other run takes it in the later passes, where its work counts up
    // to where it is given up: the side pass, from here.
    if (size_best_fit_parts_ && !pass_bound()) {
        size_best_fit_parts_.reset();
        run_size_best_fit_ahead_beside(by_size_);
    }
}

// Small instances the first passes leave above the bound (most models'
// arenas): a short exact search at the bound, before the rest of the
// portfolio. Found,
// it ends the run at once (nothing is smaller); not found, its work is not
// counted, so the run then goes on exactly as without it (answer and work).
void AutoRun::prove_bound_early() {
    if (done() || b_.count() > kPeakWindowsFrom) return;
    const uint64_t cap = std::min(kEarlyProofWork, work_budget_ / 4);
    if (search_costs(b_).descent * 2 > cap) return;
    Placement p = unless_overflow([&] { return place_within(b_, bound_, cap); }, overflowed_);
    if (!p.abandoned && p.end <= bound_) consider(std::move(p), nullptr);
}

// Second: the most crowded lifetimes first (by the peak of live bytes while
// the buffer lives, then the longest; MiniMalloc's "T" key), best fit. Where
// sizes alone mislead (random lifetimes, the idealloc traces) it wins by far
// (docs/benchmarks.md).
void AutoRun::live_peak_pass() {
    if (!worth_a_pass()) return;
    Placement p = live_peak_over(to_win());
    p.work += kGreedyUnitsPerStep * 2 * b_.count();  // the order: a sweep and a range maximum per buffer
    p.method = "greedy_by_live_peak";
    consider(std::move(p), &by_live_peak_);
}

// The peak window ladder (on instances the exact search does not take
// whole): windows of 1024, 2048 and 4096 buffers around the peak of live
// bytes, each solved by the exact search with a third of what is left after
// its pass (at most kWindowSearchPasses passes' worth), then extended by
// first fit (docs/strategies.md §4). The first comes right after the first
// pass: where it works it reaches the bound and ends the run (pangu_2.6B,
// Y_1; docs/benchmarks.md), and where it does not its pass
// is soon given up (S_1). The wider ones, whose search costs more, wait until
// the portfolio is done.
void AutoRun::try_peak_window(size_t max_buffers) {
    if (b_.count() <= kPeakWindowsFrom || !worth_a_pass()) return;
    if (!windows_) windows_.emplace(b_);
    const PeakWindow w = windows_->around_peak(max_buffers);
    work_ += kGreedyUnitsPerStep * 4 * b_.count();  // the sweep's share and the window's counts
    // Every live buffer (no smaller instance), or the same window again.
    if (w.whole || w.members.size() == last_window_ || !room_for_a_pass()) return;
    last_window_ = w.members.size();
    const uint64_t share = std::min((work_budget_ - work_ - pass_) / 3, kWindowSearchPasses * pass_);
    // The bound first: the window holds the peak instant, so its own bound
    // is the instance's.
    const Placement inside =
        unless_overflow([&] { return place_optimal(w.instance, share, bound_); }, overflowed_);
    work_ += inside.work;
    if (inside.abandoned) return;
    // Its pass costs about what the first did (pass_): a cheap one stays on
    // one thread, as auto's other passes (place_greedy).
    consider(unless_overflow([&] { return place_around_window(b_, w, inside, by_size_, to_win(), pass_); },
                             overflowed_),
             nullptr);
}

// Instances too large to search whole: the exact search by time sections
// (sections.cpp; docs/strategies.md §5) aimed at the bound, with half of what
// is left, at most kSectionsPasses greedy passes' worth. Even when the answer
// is within 0.5% of the bound: this is where it can be proven. Counted only
// when it wins or proves more (else the run goes on exactly as without it),
// so the cap is what bounds its wall time where it loses.
bool AutoRun::sections_may_run() const {
    return b_.count() > kSearchUpTo && best_.end > proven_ && work_ < work_budget_;
}
void AutoRun::try_sections() {
    if (!sections_may_run()) return;
    const uint64_t share = std::min(left() / 2, kSectionsPasses * pass_);
    Placement p = unless_overflow(
        [&] {
            return place_by_sections(b_, best_, bound_, share, {}, pass_,
                                     [this](uint64_t limit) { return live_peak_over(limit); });
        },
        overflowed_);
    if (p.abandoned || (p.end >= best_.end && p.proven_bound <= proven_)) return;
    work_ += p.work;
    proven_ = std::max(proven_, p.proven_bound);
    if (p.end < best_.end) {
        best_ = std::move(p);
        best_order_.clear();
    }
}

// Instances whose every instant holds the bound or nothing (cut from a full
// rectangle): the full-packing search (full_packing.cpp) at the bound, with
// most of what is left (full_packing_share). Found, the answer is proven
// optimal and the run ends; not found, the rest of the run has the rest.
// Any other instance is refused at once (three probes of the live bytes,
// else one sweep), and not charged: there the run is what it was. auto's
// later exact searches do not run it again (place_optimal's default).
void AutoRun::try_full_packing() {
    if (done() || work_ >= work_budget_) return;
    Placement p = unless_overflow([&] { return place_full_packing(b_, full_packing_share(left())); }, overflowed_);
    work_ += p.work;  // 0 where the instance is not full
    if (p.abandoned || p.end >= best_.end) return;
    proven_ = std::max(proven_, p.proven_bound);
    best_ = std::move(p);
    best_order_.clear();
}

// Window neighbourhoods (docs/strategies.md §5): on random lifetimes they
// beat every later pass by far; where the buffer at the top lives too long
// to free around it (the idealloc traces) they give up at once.
void AutoRun::try_windows(uint64_t share) {
    if (b_.count() <= kPeakWindowsFrom || done() || work_ >= work_budget_) return;
    windows_ran_ = true;
    const uint64_t before = best_.end;
    improve_by_windows(b_, best_, share, work_);
    if (best_.end < before) best_order_.clear();
}

// Under the policy's full budget, on instances the exact search does not
// take whole: whether the first pass left fewer than kPassBoundPasses passes'
// worth. The portfolio's next steps each cost a pass or more (the live-peak
// pass, the time sections', the peak windows'), so such a run would spend
// its budget on one or two of them and leave the window neighbourhoods a
// fraction of a pass. Random lifetimes of 2*10^5 to 10^6 buffers: the
// windows with everything left reach 1.0061 where those steps left 1.0225
// (3*10^5), and the bound where they left 1.0224 (10^6; docs/strategies.md
// §4, "A run bound by its passes"). The steps that win elsewhere keep their
// place where they cost little: the time sections where the trace falls
// apart (sections_where_split), and the wider peak windows with what the
// windows leave.
bool AutoRun::pass_bound() const {
    return policy_ && good_enough_ != 0 && b_.count() > kSearchUpTo && !done() &&
           left() < kPassBoundPasses * pass_;
}

// A run bound by its passes: the time sections only where the trace falls
// apart into components (bursty starts, 80,000 buffers: 1.0081 -> 1.0049).
// On one component they can only roll a section at a time, which won on
// none of 60 traces and took random lifetimes of 3*10^5 buffers 0.8 s.
void AutoRun::sections_where_split() {
    if (!sections_may_run()) return;
    work_ += sort_work(b_.count());  // the sort by start
    if (falls_apart_in_time(b_)) try_sections();
}

// A run bound by its passes: window neighbourhoods with everything left, at
// least kWindowAllowanceMs' worth (the budget grows to hold it:
// deterministic, from the first pass's work). Where the best is still the
// start's and slots or the online best fit gave it, they start from the
// first pass instead, whose size order they lower far more (random
// lifetimes, 10^6 buffers, seed 2: from the online best fit's 1.0802 to
// 1.0797, from the first pass's 1.0829 to 1.0216). Where they stop first
// (having failed around every top buffer), what is left goes to the wider
// peak windows (log-normal sizes, 80,000 buffers: 1.0326 -> 1.0293); then
// the run ends.
void AutoRun::spend_on_windows() {
    work_budget_ = std::max(work_budget_, work_ + kWindowAllowanceMs * kWorkUnitsPerMs);
    if (first_pass_ && best_.end == start_end_ && !done()) {
        Placement from = std::move(*first_pass_);
        first_pass_.reset();
        windows_ran_ = true;
        improve_by_windows(b_, from, left(), work_);
        from.work = 0;  // counted in work_ already
        consider(std::move(from), nullptr);
    } else {
        try_windows(left());
    }
    try_peak_window(2048);
    try_peak_window(4096);
    end_here();
}

// Under the policy's budget: whether fewer than kFewPassesLeft greedy
// passes' worth is left after the run's first steps (the live-peak pass,
// the sections, the peak window and the first window neighbourhoods, with
// half of what was left). Such a run skips the later passes: where those
// steps gained, it re-places the new best in the order of its offsets
// first (offset_order_pass), which is where such runs' later passes
// gained (bursty starts, 30,000 buffers: 1.01065 -> 1.00976; lifetimes up
// to 700 steps, 70,000: 1.07261 -> 1.06745); then it tries the wider peak
// windows (heavy-tailed sizes gained 0.56% there) and ends. Where nothing
// had gained (random lifetimes up to 2,000 steps, 10^4 to 10^5 buffers)
// the rest of a 4,000 ms budget gained at most 0.18% and took 1-1.5 s.
// The runs whose later steps gained more (an unflushed 1F1B trace, KV
// caches, smaller random traces) had 56 passes' worth left or more
// (docs/strategies.md §4, "A run with few passes left").
bool AutoRun::few_passes_left() const {
    return policy_ && windows_ran_ && !done() && left() < kFewPassesLeft * pass_;
}
bool AutoRun::gained_since_start() const { return best_.end < start_end_; }

// Re-placing the best answer's buffers in the order of their offsets
// (best fit) often closes holes its own order left (S_1; docs/strategies.md §4).
// It is the local search's first step, brought forward because on large
// traces the budget holds only a few passes.
void AutoRun::offset_order_pass() {
    if (!worth_a_pass()) return;
    auto by_offset = order_by_offset(b_, best_);
    Placement p = greedy(by_offset, Fit::Best, to_win());
    p.method = "auto_search";
    p.work += kGreedyUnitsPerStep * 2 * b_.count();  // the order, as in the search
    consider(std::move(p), &by_offset);
}

// Later passes, most often useful first (on the idealloc traces conflict
// degree x size with best fit beats size order with either fit;
// docs/strategies.md §4).
void AutoRun::later_passes() {
    std::vector<uint32_t> by_conflict;
    if (worth_a_pass()) {
        by_conflict = order_by_conflict_size(b_);
        Placement p = greedy(by_conflict, Fit::Best, to_win());
        p.method = "greedy_by_conflict_size";
        consider(std::move(p), &by_conflict);
    }
    offset_order_pass();
    if (worth_a_pass()) {
        size_best_fit_ran_ = true;
        consider(size_best_fit(to_win()), &by_size_);
    }
    if (worth_a_pass()) {
        Placement p = greedy(by_conflict, Fit::First, to_win());
        p.method = "greedy_by_conflict_size_first_fit";
        consider(std::move(p), &by_conflict);
    }
    if (worth_a_pass() && !by_live_peak_.empty()) {
        Placement p = greedy(by_live_peak_, Fit::First, to_win());
        p.method = "greedy_by_live_peak_first_fit";
        consider(std::move(p), &by_live_peak_);
    }
    if (worth_a_pass()) {
        const auto by_life = order_by_lifetime(b_);
        Placement p = greedy(by_life, Fit::Best, to_win());
        p.method = "greedy_by_lifetime";
        consider(std::move(p), &by_life);
    }
}

// Small instances, and larger ones whose budget holds building the search's
// instance and a descent: the exact search with most of what is left (on
// these it is what closes gaps), then, with a quarter of it, the
// neighbourhood search around its peak (docs/strategies.md §5: challenging
// J gains most). The local search
// keeps what they leave: all of it where they did not run. True when it ran.
bool AutoRun::exact_search() {
    const uint64_t search_budget = left();
    auto holds_a_descent = [&] {
        const SearchCosts c = search_costs(b_);
        return c.build + c.descent <= search_budget / 4 * 3;
    };
    const bool search_fits =
        b_.count() <= kPeakWindowsFrom || (b_.count() <= kSearchUpTo && holds_a_descent());
    if (done() || !search_fits || search_budget == 0) return false;
    Placement p = unless_overflow(
        [&] { return place_optimal(b_, search_budget, 0, &best_, search_budget / 4); }, overflowed_);
    work_ += p.work;
    // Its proof holds whichever answer is kept: a best answer it proves
    // optimal is not searched further.
    proven_ = std::max(proven_, p.proven_bound);
    if (!p.abandoned && p.end < best_.end) {
        best_ = std::move(p);
        best_order_.clear();
    }
    return true;
}

// Local search over greedy orders: re-place what sits on the peak first.
// From round 2 on, a round moves one buffer at the top of the best answer
// to a random earlier place in the best order, and its pass is given up
// above the best end; the next round's order depends only on the best answer
// and the generator, so where passes take one thread, two rounds run at once:
// the second assumes the first is not taken, and is dropped (its generator
// draws undone) where it is. The rounds taken, their answers and work are
// those of one round after another; only the wall time changes.
void AutoRun::local_search() {
    Rng rng;
    // Round 2 on: the best order with one of the buffers at the top, `top`,
    // moved to an earlier place.
    auto perturbed = [&](Rng& r, const std::vector<uint32_t>& top) {
        std::vector<uint32_t> order = best_order_;
        const uint32_t x = top[r.below(top.size())];
        const auto at = std::find(order.begin(), order.end(), x) - order.begin();
        const size_t to = r.below(static_cast<size_t>(at) + 1);
        std::rotate(order.begin() + to, order.begin() + at, order.begin() + at + 1);
        return order;
    };
    // Counts a round's work, and keeps its answer where it is no larger
    // (equal answers are kept: the walk goes on along the plateau).
    auto take = [&](Placement&& p, std::vector<uint32_t>&& order) {
        // Each round also builds an index and an order over every buffer.
        work_ += p.work + kGreedyUnitsPerStep * 2 * b_.count();
        if (p.abandoned || p.end > best_.end) return false;
        p.method = "auto_search";
        best_ = std::move(p);
        best_order_ = std::move(order);
        return true;
    };
    uint64_t round = 0;
    for (; round < 2 && worth_a_pass(); ++round) {
        std::vector<uint32_t> order;
        if (round == 0) {
            order = order_by_offset(b_, best_);
            // An answer that came from no order stands for this one (sorted once).
            if (best_order_.empty()) best_order_ = order;
        } else {
            order = moved_to_front(best_order_, peak_buffers(b_, best_));
        }
        Placement p = greedy(order, Fit::Best, best_.end);
        take(std::move(p), std::move(order));
    }
    if (round < 2 || best_order_.size() < 2) return;
    std::unique_ptr<WorkerPool> pool;
    if (placement_threads() >= 2 &&
        (greedy_too_small_for_threads(b_, pass_) || greedy_runs_on_one_thread(b_, best_order_))) {
        pool = std::make_unique<WorkerPool>(2);
        if (pool->size() < 2) pool.reset();
    }
    while (worth_a_pass()) {
        const auto top = peak_buffers(b_, best_);
        if (top.empty()) break;
        Rng after_first = rng;
        std::vector<uint32_t> first = perturbed(after_first, top);
        Placement first_p;
        if (!pool) {
            first_p = greedy(first, Fit::Best, best_.end);
            rng = after_first;
            take(std::move(first_p), std::move(first));
            continue;
        }
        Rng after_second = after_first;
        std::vector<uint32_t> second = perturbed(after_second, top);
        Placement second_p;
        uint32_t first_overflow = kNoOverflow, second_overflow = kNoOverflow;
        const uint64_t limit = best_.end;
        pool->run([&](unsigned t) {
            if (t == 0) first_p = greedy_noting(first, Fit::Best, limit, first_overflow);
            else second_p = greedy_noting(second, Fit::Best, limit, second_overflow);
        });
        rng = after_first;
        if (overflowed_ == kNoOverflow) overflowed_ = first_overflow;
        if (take(std::move(first_p), std::move(first)) || !worth_a_pass()) continue;
        rng = after_second;
        if (overflowed_ == kNoOverflow) overflowed_ = second_overflow;
        take(std::move(second_p), std::move(second));
    }
}

// auto is never larger than a single pass of emel's own (best_fit and greedy
// by size with first fit ran first; docs/strategies.md §4): greedy by size
// with best fit, when the budget did not reach it, runs last, outside the
// budget, given up as soon as it cannot win (S_1 at 1,000 ms is where it
// wins). Its work is counted only when it wins, so wherever
// the answer is what it was, so is the work.
void AutoRun::last_single_pass() {
    if (size_best_fit_ran_ || best_.end <= proven_) return;
    Placement p = size_best_fit(to_win(), true);
    if (p.abandoned || p.end >= best_.end) p.work = 0;
    consider(std::move(p), &by_size_);
}

Placement AutoRun::finish() {
    size_best_fit_ahead_.reset();  // not taken (the answer is proven optimal): stopped
    size_best_fit_parts_.reset();
    best_.work = work_;
    best_.proven_bound = std::max(best_.proven_bound, proven_);
    return std::move(best_);
}

Placement place_auto_untargeted(const Buffers& b, uint64_t& work_budget) {
    AutoRun run(b, work_budget);
    run.start();
    run.try_full_packing();
    // A run bound by its passes (policy only): the sections where the trace
    // falls apart, the live-peak pass where it fits, window neighbourhoods,
    // the wider peak windows with what they leave, the closing single pass,
    // and the end.
    if (run.pass_bound()) {
        run.sections_where_split();
        run.live_peak_pass();
        run.spend_on_windows();
        run.last_single_pass();
        return run.finish();
    }
    run.try_sections();
    run.live_peak_pass();
    run.prove_bound_early();
    run.try_peak_window(1024);
    run.try_windows(run.left() / 2);  // with half of what is left
    // A run with few passes left (policy only) skips the later passes (but
    // the offset-order one, where its steps gained) and, after the wider
    // peak windows, ends: its budget is what it has spent.
    const bool few_left = run.few_passes_left();
    if (!few_left) run.later_passes();
    else if (run.gained_since_start()) run.offset_order_pass();
    run.try_peak_window(2048);
    run.try_peak_window(4096);
    if (few_left) run.end_here();
    // Where the exact search did not run: window neighbourhoods again, from
    // the best of the passes, with what is left (the local search gets what
    // they do not use).
    if (!run.exact_search()) run.try_windows(run.left());
    run.local_search();
    run.last_single_pass();
    return run.finish();
}

}  // namespace

Placement place_auto(const Buffers& b, uint64_t work_budget, uint64_t target) {
    // A capacity is a target to try, never a handicap: the untargeted answer
    // is always computed, and only when it misses the target does a second
    // budget go to an exact search aimed at the target (docs/strategies.md §4).
    // With no budget given (kPolicyBudget) the policy sets it after the first
    // pass; the targeted search below gets the same.
    Placement best = place_auto_untargeted(b, work_budget);
    // Whatever the winner, the peak of live bytes is a proven bound, and an
    // answer that meets it is proven optimal.
    const uint64_t bound = peak_live_bytes(b);
    best.proven_bound = std::max(best.proven_bound, bound);
    best.optimal = best.optimal || best.end <= best.proven_bound;
    if (target == 0 || best.end <= target || best.optimal) return best;
    uint32_t overflowed = kNoOverflow;
    Placement aimed =
        unless_overflow([&] { return place_optimal(b, work_budget, target); }, overflowed);
    const uint64_t work = best.work + aimed.work;
    const uint64_t proven = std::max(best.proven_bound, aimed.proven_bound);
    if (!aimed.abandoned && aimed.end < best.end) best = std::move(aimed);
    best.proven_bound = proven;
    best.optimal = best.end <= proven;
    best.work = work;
    return best;
}

}  // namespace emel::memory
