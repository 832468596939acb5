// auto (docs/strategies.md §4): the best of the heuristics, improved by a
// bounded, deterministic search over greedy placement orders.
#include <algorithm>
#include <numeric>
#include <optional>

#include "emel/memory/placement/placement.hpp"

namespace emel::memory {

namespace {

// Peak windows are tried on instances of more than this many buffers.
constexpr size_t kPeakWindowsFrom = 2000;
// A peak window's search costs at most this many greedy passes.
constexpr uint64_t kWindowSearchPasses = 4;
// The default-budget policy (docs/strategies.md §4): what auto and optimal
// spend when no budget is given.
constexpr uint64_t kDefaultBudgetMs = 4000;
constexpr uint64_t kEasyBudgetMs = 200;  // first answer within 0.5% of the bound
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

}  // namespace

uint64_t default_work_budget(const Buffers& b, uint64_t best_end, uint64_t bound) {
    (void)b;
    // Within 0.5% of the bound already: no budget can gain more than that.
    if (best_end <= bound + bound / 200) return kEasyBudgetMs * kWorkUnitsPerMs;
    // Else the answer the issue measures against: smaller budgets leave random
    // lifetimes of every size above it (uniform 1,000 buffers, seed 1: 1.0207
    // of the bound at 2,000 ms, 1.0144 at 4,000; 10^4: 1.0632 -> 1.0314).
    // Where it is proven optimal sooner, the run stops there.
    return kDefaultBudgetMs * kWorkUnitsPerMs;
}

namespace {

// auto without a capacity target: the portfolio, the exact search on small
// instances, then local search over greedy orders.
Placement place_auto_untargeted(const Buffers& b, uint64_t& work_budget) {
    const uint64_t bound = buffers_lower_bound(b);
    // The portfolio, in tie-break order.
    uint32_t overflowed = kNoOverflow;
    Placement best = unless_overflow([&] { return place_slots(b); }, overflowed);
    uint64_t work = best.work;
    // The order that produced `best`; empty for the answers that came from no
    // order (slots, best_fit, the exact search), which stand for their
    // buffers by offset, sorted only if the local search gets that far.
    std::vector<uint32_t> best_order;
    auto consider = [&](Placement&& p, const std::vector<uint32_t>* order) {
        work += p.work;
        if (!p.abandoned && (p.end < best.end || best.abandoned)) {
            best = std::move(p);
            if (order) best_order = *order;
            else best_order.clear();
        }
    };
    const auto by_size = order_by_size(b);
    consider(unless_overflow([&] { return place_best_fit(b); }, overflowed), nullptr);
    // The first pass is the one huge traces may be left with (a pass over
    // Y_1 or 10^6 buffers takes seconds): first fit by size, which is never
    // worse than best fit by size on the idealloc traces and the synthetic
    // ones and clearly better on random lifetimes (uniform 10^6: 1.0224 of
    // the bound against 1.0353; Y_1: 1.0036 against 1.0042).
    auto greedy = [&](const std::vector<uint32_t>& order, Fit fit, uint64_t give_up_above) {
        return unless_overflow([&] { return place_greedy(b, order, fit, give_up_above); },
                               overflowed);
    };
    Placement first_pass = greedy(by_size, Fit::First, UINT64_MAX);
    // Every later step starts from a placed answer.
    if (best.abandoned && first_pass.abandoned) throw PlacementOverflow(overflowed);
    // Every later greedy pass costs about what this one did: one is started
    // only when it still fits in the budget, so the wall time stays within the
    // budget plus this first pass, whatever the instance's size.
    const uint64_t pass = std::max<uint64_t>(first_pass.work, 1);
    // No budget given: the default-budget policy, from the instance and its
    // first answer (deterministic: both are the same on every machine).
    const bool policy = work_budget == kPolicyBudget;
    if (policy) work_budget = default_work_budget(b, std::min(best.end, first_pass.end), bound);
    // Under the policy's full budget the run also ends once the answer is
    // within 0.5% of the bound: no budget can gain more than that (S_1 ends
    // after its live-peak pass, 1.0026 of the bound, at 1,561 ms of work).
    const uint64_t good_enough =
        policy && work_budget > kEasyBudgetMs * kWorkUnitsPerMs ? bound + bound / 200 : 0;
    auto room_for_a_pass = [&] { return work + pass <= work_budget; };
    // At the bound nothing can be smaller: no pass is worth its work.
    // The exact search below may prove more than the peak of live bytes.
    uint64_t proven = bound;
    auto done = [&] { return best.end <= std::max(proven, good_enough); };
    auto worth_a_pass = [&] { return !done() && room_for_a_pass(); };
    // A later pass wins only below the best so far (ties keep the earlier):
    // it is given up as soon as its end reaches the best's, which on large
    // traces saves most of a losing pass (the first pass is always whole: it
    // measures what a pass costs).
    auto to_win = [&] { return best.end - 1; };
    consider(std::move(first_pass), &by_size);
    // Small instances the first passes leave above the bound (most models'
    // arenas): a short exact search at the bound, before the portfolio. Found,
    // it ends the run at once (nothing is smaller); not found, its work is not
    // counted, so the run then goes on exactly as without it (answer and work).
    if (!done() && b.count() <= kPeakWindowsFrom) {
        const uint64_t cap = std::min(kEarlyProofWork, work_budget / 4);
        if (search_costs(b).descent * 2 <= cap) {
            Placement p = unless_overflow([&] { return place_within(b, bound, cap); }, overflowed);
            if (!p.abandoned && p.end <= bound) consider(std::move(p), nullptr);
        }
    }
    // Second: the most crowded lifetimes first (by the peak of live bytes
    // while the buffer lives, then the longest; MiniMalloc's "T" key), best
    // fit. Where sizes alone mislead it wins by far: uniform 10^6 1.0048 of
    // the bound against 1.0224, S_1 1.0026 against 1.0167, Y_1 at the bound.
    std::vector<uint32_t> by_live_peak;
    if (worth_a_pass()) {
        by_live_peak = order_by_live_peak(b);
        Placement p = greedy(by_live_peak, Fit::Best, to_win());
        p.work += kGreedyUnitsPerStep * 2 * b.count();  // the order: a sweep and a range maximum per buffer
        p.method = "greedy_by_live_peak";
        consider(std::move(p), &by_live_peak);
    }
    // The peak window ladder (on instances the exact search does not take
    // whole): windows of 1024, 2048 and 4096 buffers around the peak of live
    // bytes, each solved by the exact search with a third of what is left
    // after its pass (at most kWindowSearchPasses passes' worth), then
    // extended by first fit (docs/strategies.md §4). The first comes right
    // after the first pass: where it works it reaches the bound and ends the
    // run (pangu_2.6B: 1.0076 -> 1.0000; Y_1: 1.0036 -> 1.0000), and where it
    // does not its pass is soon given up (S_1). The wider ones, whose search
    // costs more, wait until the portfolio is done.
    std::optional<PeakWindows> windows;  // the sweep, made for the first window
    size_t last_window = 0;              // buffers in the last window tried
    auto try_peak_window = [&](size_t max_buffers) {
        if (b.count() <= kPeakWindowsFrom || !worth_a_pass()) return;
        if (!windows) windows.emplace(b);
        const PeakWindow w = windows->around_peak(max_buffers);
        work += kGreedyUnitsPerStep * 4 * b.count();  // the sweep's share and the window's counts
        // Every live buffer (no smaller instance), or the same window again.
        if (w.whole || w.members.size() == last_window || !room_for_a_pass()) return;
        last_window = w.members.size();
        const uint64_t share = std::min((work_budget - work - pass) / 3, kWindowSearchPasses * pass);
        // The bound first: the window holds the peak instant, so its own
        // bound is the instance's.
        const Placement inside =
            unless_overflow([&] { return place_optimal(w.instance, share, bound); }, overflowed);
        work += inside.work;
        if (inside.abandoned) return;
        consider(unless_overflow([&] { return place_around_window(b, w, inside, by_size, to_win()); },
                                 overflowed),
                 nullptr);
    };
    try_peak_window(1024);
    // Window neighbourhoods (docs/strategies.md §5) with half of what is
    // left: on random lifetimes they beat every later pass by far (uniform
    // 10^5 at 2,000 ms: 1.0758 -> 1.0136 of the bound); where the buffer at
    // the top lives too long to free around it (the idealloc traces) they
    // give up at once.
    auto try_windows = [&](uint64_t share) {
        if (b.count() <= kPeakWindowsFrom || done() || work >= work_budget) return;
        const uint64_t before = best.end;
        improve_by_windows(b, best, share, work);
        if (best.end < before) best_order.clear();
    };
    try_windows((work_budget - std::min(work, work_budget)) / 2);
    // Later passes, most often useful first (idealloc traces: conflict degree
    // x size with best fit is 1.0104 of the bound on S_1 where size order is
    // 1.0158 with best fit, 1.0167 with first fit).
    std::vector<uint32_t> by_conflict;
    if (worth_a_pass()) {
        by_conflict = order_by_conflict_size(b);
        Placement p = greedy(by_conflict, Fit::Best, to_win());
        p.method = "greedy_by_conflict_size";
        consider(std::move(p), &by_conflict);
    }
    // Re-placing the best answer's buffers in the order of their offsets
    // (best fit) often closes holes its own order left: S_1 1.0104 -> 1.0047.
    // It is the local search's first step below, brought forward because on
    // large traces the budget holds only a few passes.
    if (worth_a_pass()) {
        auto by_offset = order_by_offset(b, best);
        Placement p = greedy(by_offset, Fit::Best, to_win());
        p.method = "auto_search";
        p.work += kGreedyUnitsPerStep * 2 * b.count();  // the order, as in the search
        consider(std::move(p), &by_offset);
    }
    bool size_best_fit_ran = false;
    if (worth_a_pass()) {
        size_best_fit_ran = true;
        consider(greedy(by_size, Fit::Best, to_win()), &by_size);
    }
    if (worth_a_pass()) {
        Placement p = greedy(by_conflict, Fit::First, to_win());
        p.method = "greedy_by_conflict_size_first_fit";
        consider(std::move(p), &by_conflict);
    }
    if (worth_a_pass() && !by_live_peak.empty()) {
        Placement p = greedy(by_live_peak, Fit::First, to_win());
        p.method = "greedy_by_live_peak_first_fit";
        consider(std::move(p), &by_live_peak);
    }
    if (worth_a_pass()) {
        const auto by_life = order_by_lifetime(b);
        Placement p = greedy(by_life, Fit::Best, to_win());
        p.method = "greedy_by_lifetime";
        consider(std::move(p), &by_life);
    }

    try_peak_window(2048);
    try_peak_window(4096);

    // Small instances, and larger ones whose budget holds building the
    // search's instance and a descent: the exact search with most of what is
    // left (on these it is what closes gaps), then, with a quarter of it, the
    // neighbourhood search around its peak (docs/strategies.md §5: on
    // challenging J 1.0507 -> 1.0424 of the bound at 4,000 ms). The local
    // search below keeps what they leave: all of it where they did not run.
    const uint64_t search_budget = work < work_budget ? work_budget - work : 0;
    auto holds_a_descent = [&] {
        const SearchCosts c = search_costs(b);
        return c.build + c.descent <= search_budget / 4 * 3;
    };
    const bool search_fits =
        b.count() <= kPeakWindowsFrom || (b.count() <= kSearchUpTo && holds_a_descent());
    bool search_ran = false;
    if (!done() && search_fits && search_budget > 0) {
        search_ran = true;
        Placement p = unless_overflow(
            [&] { return place_optimal(b, search_budget, 0, &best, search_budget / 4); }, overflowed);
        work += p.work;
        // Its proof holds whichever answer is kept: a best answer it proves
        // optimal is not searched further.
        proven = std::max(proven, p.lower_bound);
        if (!p.abandoned && p.end < best.end) {
            best = std::move(p);
            best_order.clear();
        }
    }

    // Where the exact search did not run: window neighbourhoods again, from
    // the best of the passes, with what is left (the local search below gets
    // what they do not use).
    if (!search_ran) try_windows(work_budget - std::min(work, work_budget));

    // Local search over greedy orders: re-place what sits on the peak first.
    Rng rng;
    for (uint64_t round = 0; worth_a_pass(); ++round) {
        std::vector<uint32_t> order;
        if (round == 0) {
            order = order_by_offset(b, best);
            // An answer that came from no order stands for this one (sorted once).
            if (best_order.empty()) best_order = order;
        } else if (round == 1) {
            order = moved_to_front(best_order, peak_buffers(b, best));
        } else {
            order = best_order;
            const auto top = peak_buffers(b, best);
            if (top.empty() || order.size() < 2) break;
            const uint32_t x = top[rng.below(top.size())];
            const auto at = std::find(order.begin(), order.end(), x) - order.begin();
            const size_t to = rng.below(static_cast<size_t>(at) + 1);
            std::rotate(order.begin() + to, order.begin() + at, order.begin() + at + 1);
        }
        // Equal answers are kept (the walk goes on along the plateau): given
        // up only above the best.
        Placement p = greedy(order, Fit::Best, best.end);
        // Each round also builds an index and an order over every buffer.
        work += p.work + kGreedyUnitsPerStep * 2 * b.count();
        if (!p.abandoned && p.end <= best.end) {
            p.method = "auto_search";
            best = std::move(p);
            best_order = std::move(order);
        }
    }
    // auto is never larger than a single pass of emel's own (best_fit and
    // greedy by size with first fit ran first; docs/strategies.md §4): greedy
    // by size with best fit, when the budget did not reach it, runs last,
    // outside the budget, given up as soon as it cannot win (S_1 at 1,000 ms:
    // 1.0167 -> 1.0158 of the bound). Its work is counted only when it wins,
    // so wherever the answer is what it was, so is the work.
    if (!size_best_fit_ran && best.end > proven) {
        Placement p = greedy(by_size, Fit::Best, to_win());
        if (p.abandoned || p.end >= best.end) p.work = 0;
        consider(std::move(p), &by_size);
    }
    best.work = work;
    best.lower_bound = std::max(best.lower_bound, proven);
    return best;
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
    const uint64_t bound = buffers_lower_bound(b);
    best.lower_bound = std::max(best.lower_bound, bound);
    best.optimal = best.optimal || best.end <= best.lower_bound;
    if (target == 0 || best.end <= target || best.optimal) return best;
    uint32_t overflowed = kNoOverflow;
    Placement aimed =
        unless_overflow([&] { return place_optimal(b, work_budget, target); }, overflowed);
    const uint64_t work = best.work + aimed.work;
    const uint64_t proven = std::max(best.lower_bound, aimed.lower_bound);
    if (!aimed.abandoned && aimed.end < best.end) best = std::move(aimed);
    best.lower_bound = proven;
    best.optimal = best.end <= proven;
    best.work = work;
    return best;
}

}  // namespace emel::memory
