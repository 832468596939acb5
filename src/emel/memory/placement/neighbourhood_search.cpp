// The exact search's neighbourhoods (docs/strategies.md §5): a few buffers
// freed from a placement and searched again around the others, kept where
// they are — around the peak of an instance the search takes whole
// (improve_peak, after the capacity ladder), and in windows of time on
// instances it does not (improve_by_windows, from auto).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "emel/memory/placement/canonical_search.hpp"
#include "emel/memory/placement/neighbourhood_search.hpp"
#include "emel/memory/placement/worker_pool.hpp"

namespace emel::memory {

namespace exact {

// Window neighbourhoods (improve_by_windows): at most this many buffers
// freed, and a window reaches at most 2^(this - 1) lifetimes past its top
// buffer's on each side.
constexpr size_t kWindowFreed = 2048;
constexpr unsigned kWidenings = 4;
// A window freeing more than this many buffers whose search failed is not
// searched again, under another preorder, until a window moves buffers:
// such searches fail by spending their whole share (256·m²), whatever the
// preorder (docs/strategies.md §5, "Window neighbourhoods").
constexpr size_t kWideWindow = 1024;
// improve_peak searches two neighbourhoods at once on instances of at least
// this many buffers (two threads or more): below, a search costs less than
// handing it to a thread.
constexpr size_t kNeighboursAtOnceFrom = 256;
// A neighbourhood's search gets at most this for m freed buffers: 256·m²
// units, at least 2^16.
uint64_t neighbourhood_share(uint64_t m) { return std::max<uint64_t>(uint64_t{1} << 16, 256 * m * m); }
// A window's search gets a neighbourhood's share for its freed buffers, at
// most a wide window's: those that found something did so within 211M units
// (20-211M, 4-28% of their share), and those that fail spend all of it
// (a window of 1,933 buffers: 956M units, a second on one thread;
// docs/strategies.md §5, "Window neighbourhoods").
uint64_t window_share(uint64_t m) { return neighbourhood_share(std::min<uint64_t>(m, kWideWindow)); }
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
void improve_peak(const CanonicalInstance& in, Placement& best, uint64_t lo, uint64_t budget, uint64_t& work,
                  std::vector<NeighbourhoodTried>* tried) {
    const Buffers& b = in.b;
    const size_t n = in.active.size();
    if (n < 2) return;
    // One neighbourhood: the buffers it frees, and its search's capacity,
    // preorder, share and outcome.
    struct Attempt {
        std::vector<uint8_t> free;
        uint64_t capacity = 0, share = 0, spent = 0;
        int heuristic = 0;
        Outcome outcome = Outcome::OutOfBudget;
        std::vector<uint64_t> offsets;
    };
    std::vector<std::pair<uint64_t, uint32_t>> ranked;  // (key, buffer): the lowest keys are freed
    Rng rng;
    size_t m = 16;
    int step = 0;  // neighbourhood x preorder
    const uint64_t start = work;
    // The searched buffers by (offset, top) in the best placement, for
    // run_around to gather obstacles in order; sorted again when it changes.
    std::vector<uint32_t> by_offset;
    // The buffers reaching above the best end minus one: they cannot stay.
    std::vector<uint32_t> top;
    // Marks what attempt `a` frees at (step, m), drawing from `r`.
    auto choose = [&](Attempt& a, int at_step, size_t at_m, Rng& r) {
        a.capacity = best.end - 1;
        a.heuristic = at_step / 2;
        ranked.clear();
        if (at_step % 2 == 0) {
            const uint64_t t = b.lower[top[r.below(top.size())]];
            for (uint32_t x : in.active) {
                const uint64_t distance = b.lower[x] > t ? b.lower[x] - t : b.upper[x] <= t ? t - b.upper[x] + 1 : 0;
                ranked.emplace_back(distance, x);
            }
        } else {
            for (uint32_t x : in.active) ranked.emplace_back(UINT64_MAX - (best.offset[x] + b.size[x]), x);
        }
        const size_t k = std::min(at_m, n);
        std::nth_element(ranked.begin(), ranked.begin() + (k - 1), ranked.end());
        a.free.assign(b.count(), 0);
        for (size_t i = 0; i < k; ++i) a.free[ranked[i].second] = 1;
        for (uint32_t x : top) a.free[x] = 1;
        return k;
    };
    auto search_it = [&](CanonicalSearch& search, Attempt& a) {
        a.spent = 0;
        a.outcome = search.run_around(a.capacity, a.heuristic, a.share, a.free, best.offset, a.offsets, a.spent,
                                      nullptr, nullptr, &by_offset);
    };
    // After a failure at (step, m): the next step, or false where a whole
    // round through every size found nothing (another would search the same).
    auto next_step = [&](int& at_step, size_t& at_m) {
        if (++at_step < 2 * CanonicalSearch::kHeuristics) return true;
        at_step = 0;
        if (at_m >= n) return false;
        at_m *= 2;
        return true;
    };
    // Where two threads can be had, the attempt after this one is searched
    // beside it, as if this one fails, wherever its share would come out
    // whole even if this one spent all of its own; it is dropped (its draws
    // undone) where this one succeeds. The attempts made, their answers and
    // work are those of one after another.
    CanonicalSearch search(in);
    std::unique_ptr<CanonicalSearch> second_search;
    std::unique_ptr<WorkerPool> pool;
    if (placement_threads() >= 2 && n >= kNeighboursAtOnceFrom) {
        pool = std::make_unique<WorkerPool>(2, n > kCallerStackLevels ? stack_bytes_for(n) : 0);
        if (pool->size() < 2) pool.reset();
        else second_search = std::make_unique<CanonicalSearch>(in);
    }
    Attempt current, ahead;
    // Counts attempt `a` and takes its answer where it found one.
    auto take = [&](Attempt& a) {
        work += std::min(a.spent, a.share);  // as the race charges: a search stops within a child of its share
        if (tried) {
            const auto freed = static_cast<size_t>(std::count(a.free.begin(), a.free.end(), uint8_t{1}));
            tried->push_back({freed, a.share, a.spent, a.outcome == Outcome::Found});
        }
        if (a.outcome != Outcome::Found) return false;
        uint64_t end = 0;
        for (uint32_t x : in.active) end = std::max(end, a.offsets[x] + b.size[x]);
        best.offset = a.offsets;  // the rows outside the search at 0, as the ladder leaves them
        best.end = end;
        best.method = "neighbourhood_search";
        by_offset.clear();
        m = 16;
        step = 0;
        return true;
    };
    while (best.end > lo && work - start < budget) {
        if (by_offset.empty()) {
            by_offset = in.active;
            std::sort(by_offset.begin(), by_offset.end(), [&](uint32_t x, uint32_t y) {
                const uint64_t ox = best.offset[x], oy = best.offset[y];
                return ox != oy ? ox < oy : ox + b.size[x] < oy + b.size[y];
            });
        }
        top.clear();
        for (uint32_t x : in.active)
            if (best.offset[x] + b.size[x] > best.end - 1) top.push_back(x);
        if (top.empty()) return;  // the end is a row's outside the search: nothing here lowers it
        const size_t k = choose(current, step, m, rng);
        work += 4 * n;  // the ranking, its partial sort and the marks
        if (work - start >= budget) break;
        current.share = std::min<uint64_t>(budget - (work - start), neighbourhood_share(k));
        // The attempt after, as if this one fails.
        int ahead_step = step;
        size_t ahead_m = m;
        Rng ahead_rng = rng;
        bool searched_ahead = false;
        if (pool && next_step(ahead_step, ahead_m)) {
            const uint64_t ahead_share = neighbourhood_share(std::min(ahead_m, n));
            if (work - start + current.share + 4 * n + ahead_share <= budget) {
                choose(ahead, ahead_step, ahead_m, ahead_rng);
                ahead.share = ahead_share;
                searched_ahead = true;
            }
        }
        if (searched_ahead) {
            pool->run([&](unsigned t) {
                if (t == 0) search_it(search, current);
                else search_it(*second_search, ahead);
            });
        } else {
            search_it(search, current);
        }
        if (take(current)) continue;
        if (!next_step(step, m)) return;
        if (!searched_ahead) continue;
        // The loop's checks for the attempt ahead hold: the best is
        // unchanged and the budget holds both shares.
        rng = ahead_rng;
        work += 4 * n;
        if (!take(ahead) && !next_step(step, m)) return;
    }
}

}  // namespace exact

using namespace exact;

namespace {

// The searched rows by start, so that a window looks only at the rows that
// may live in it, not at every row. They are grouped by lifetime (1, 2,
// 3-4, 5-8, ... doubling): a row of a group can start at most the group's
// longest lifetime before a window and still live in it, so a few long
// lifetimes (a training step's accumulators) do not send every window back
// over all the rows.
struct RowsByStart {
    explicit RowsByStart(const Buffers& b) {
        for (uint32_t x = 0; x < b.count(); ++x) {
            if (!b.searched(x)) continue;
            const uint64_t length = b.upper[x] - b.lower[x];
            const size_t c = length_class(length);
            if (groups.size() <= c) groups.resize(c + 1);
            groups[c].rows.push_back(x);
            groups[c].longest = std::max(groups[c].longest, length);
        }
        for (Group& g : groups) {
            std::stable_sort(g.rows.begin(), g.rows.end(), [&](uint32_t x, uint32_t y) { return b.lower[x] < b.lower[y]; });
            for (uint32_t x : g.rows) g.lowers.push_back(b.lower[x]);
        }
    }
    // The rows live at some instant of [from, to), in row order.
    void live_in(const Buffers& b, uint64_t from, uint64_t to, std::vector<uint32_t>& out) const {
        out.clear();
        for (const Group& g : groups) {
            const uint64_t earliest = from > g.longest ? from - g.longest : 0;  // a row live there starts after it
            for (size_t i = std::lower_bound(g.lowers.begin(), g.lowers.end(), earliest) - g.lowers.begin();
                 i < g.lowers.size() && g.lowers[i] < to; ++i)
                if (b.upper[g.rows[i]] > from) out.push_back(g.rows[i]);
        }
        std::sort(out.begin(), out.end());
    }
    struct Group {
        std::vector<uint32_t> rows;    // by start
        std::vector<uint64_t> lowers;  // their starts
        uint64_t longest = 0;
    };
    std::vector<Group> groups;
};

// Where the window loop stands: which top buffer it lowers next (round
// robin), how far the window reaches past that buffer's lifetime, the
// failures since the last window that moved buffers, and the work so far.
struct WindowCursor {
    size_t next_top = 0;
    unsigned widen = 0;
    unsigned failures = 0;
    uint64_t work = 0;

    // Wider around the same top buffer, or (too wide, or told to) the next
    // top buffer's own lifetime; true when it moved to the next top buffer.
    bool next_window(bool next_top_now) {
        if (next_top_now || widen >= kWidenings) {
            widen = 0;
            ++next_top;
            return true;
        }
        ++widen;
        return false;
    }
};

// A window to search: its rows; once built, its search's instance and
// obstacles; once charged, its share, preorder and capacity; once run, the
// outcome.
struct WindowJob {
    uint64_t from = 0, to = 0;
    std::vector<uint32_t> freed_rows, crossing;
    Buffers sub;
    SearchCosts costs;
    std::vector<std::vector<std::pair<uint64_t, uint64_t>>> obstacles;
    uint64_t share = 0, capacity = 0;
    int heuristic = 0;
    bool ran = false;  // searched (false: not yet, or no stack for it)
    Outcome outcome = Outcome::OutOfBudget;
    uint64_t spent = 0;
    std::vector<uint64_t> offsets;
};

// The exact search of a charged window, around its fixed neighbours. On the
// caller's thread a deep one gets a stack of its own; `deep_stack`: this
// thread's holds kWindowFreed levels. `cancel` (optional) stops it once 0.
void search_window(WindowJob& job, bool deep_stack, const std::atomic<uint64_t>* cancel = nullptr) {
    const size_t freed = job.freed_rows.size();
    const CanonicalInstance instance(job.sub);
    CanonicalSearch search(instance);
    std::vector<uint8_t> free(freed, 1);
    std::vector<uint64_t> fixed(freed, 0);
    job.spent = 0;
    auto run = [&] {
        job.outcome = search.run_around(job.capacity, job.heuristic, job.share, free, fixed, job.offsets, job.spent,
                                        &job.obstacles, cancel);
    };
    job.ran = run_with_stack_for(freed, run, deep_stack);
}

}  // namespace

// Window neighbourhoods: windows of time around a buffer at the end, their
// buffers searched again around the others, one window after another. Most
// windows find nothing and leave the placement as it was, so where a second
// thread is free, the window the loop would search next if the current one
// fails (and spends all of its share) is built and searched beside it. That
// result is taken only when the loop, the current one having failed, asks for
// the same window with the same share, preorder and capacity: the answer and
// the work are those of one window after another.
void improve_by_windows(const Buffers& b, Placement& best, uint64_t budget, uint64_t& work,
                        std::vector<WindowSearched>* searched) {
    // Partners may live outside any window: their constraint would be lost.
    if (b.has_partners() || b.count() == 0) return;
    const size_t n = b.count();
    const uint64_t start = work;
    const RowsByStart by_start(b);
    // The buffers that reach the end: each must come down for the end to.
    // Found again only after a window moved buffers (most windows do not),
    // but charged on every window as the two scans it was, so that a budget
    // buys the same windows.
    std::vector<uint32_t> tops;
    uint64_t end = 0;
    bool moved = true;
    // Wide windows (from, to) whose search failed since buffers last moved.
    std::vector<std::pair<uint64_t, uint64_t>> failed_wide;
    auto failures_allowed = [&](unsigned per_window) {
        return tops.size() * (kWidenings + 1) * per_window;
    };

    // A failed search's step; false where the loop ends.
    auto after_failure = [&](WindowCursor& c) {
        c.next_window(false);
        return ++c.failures <= failures_allowed(3);
    };

    // From cursor c, the next window worth a search (true), past those that
    // cannot lower the end; false where the loop ends. `rows`: scratch.
    auto select = [&](WindowCursor& c, WindowJob& job, std::vector<uint32_t>& rows) {
        while (c.work - start < budget) {
            c.work += 2 * n;
            if (tops.empty() || end == 0) return false;
            const uint32_t p = tops[c.next_top % tops.size()];
            const uint64_t length = b.upper[p] - b.lower[p];
            const uint64_t reach = c.widen == 0 ? 0 : length << (c.widen - 1);
            job.from = b.lower[p] > reach ? b.lower[p] - reach : 0;
            job.to = b.upper[p] > UINT64_MAX - reach ? UINT64_MAX : b.upper[p] + reach;
            // Free: the buffers live only inside the window. Their obstacles:
            // the others live with them, all of which are live in the window.
            job.freed_rows.clear();
            job.crossing.clear();
            bool top_fixed = false;
            by_start.live_in(b, job.from, job.to, rows);
            for (uint32_t x : rows) {
                if (b.lower[x] >= job.from && b.upper[x] <= job.to) {
                    job.freed_rows.push_back(x);
                } else {
                    job.crossing.push_back(x);
                    top_fixed = top_fixed || best.offset[x] + b.size[x] == end;
                }
            }
            c.work += n;  // charged as the scan of every row it replaces
            const bool too_large = job.freed_rows.size() > kWindowFreed;
            // A wide window that failed before fails again at once: the loop
            // goes on as after a failed search, without the search.
            if (job.freed_rows.size() > kWideWindow && !top_fixed && !too_large &&
                std::find(failed_wide.begin(), failed_wide.end(), std::make_pair(job.from, job.to)) !=
                    failed_wide.end()) {
                if (!after_failure(c)) return false;
                continue;
            }
            if (!top_fixed && !too_large) return true;
            // This window cannot lower the end: the next one.
            if (c.next_window(too_large) && ++c.failures > failures_allowed(1)) return false;
        }
        return false;
    };
    // The search's instance and obstacles for a selected window.
    auto build = [&](WindowJob& job) {
        job.sub = cut_to_window(b, job.freed_rows, job.from, job.to);  // nothing cut: they live inside
        job.costs = search_costs(job.sub);
        const size_t freed = job.freed_rows.size();
        job.obstacles.assign(freed, {});
        for (uint32_t k = 0; k < freed; ++k) {
            const uint32_t x = job.freed_rows[k];
            for (uint32_t z : job.crossing)
                if (b.lower[z] < b.upper[x] && b.lower[x] < b.upper[z])
                    job.obstacles[k].emplace_back(best.offset[z], best.offset[z] + b.size[z]);
        }
    };
    // The build charged at cursor c, and the search's share, preorder and
    // capacity set; false where the budget does not hold it (the loop ends).
    auto charge = [&](WindowCursor& c, WindowJob& job) {
        const uint64_t freed = job.freed_rows.size();
        if (c.work - start + job.costs.build + freed * job.crossing.size() >= budget) return false;
        c.work += job.costs.build + freed * job.crossing.size();
        job.share = std::min<uint64_t>(budget - (c.work - start), window_share(freed));
        job.heuristic = static_cast<int>(c.failures % CanonicalSearch::kHeuristics);
        job.capacity = end - 1;
        return true;
    };

    std::unique_ptr<WorkerPool> pool;
    if (placement_threads() >= 2) {
        pool = std::make_unique<WorkerPool>(2, stack_bytes_for(kWindowFreed));
        if (pool->size() < 2) pool.reset();
    }
    std::vector<uint32_t> rows, rows_ahead;
    WindowJob job, ahead;
    bool have_ahead = false;
    WindowCursor c;
    c.work = work;
    while (c.work - start < budget) {
        if (moved) {
            end = 0;
            tops.clear();
            for (uint32_t x = 0; x < n; ++x)
                if (b.searched(x)) end = std::max(end, best.offset[x] + b.size[x]);
            for (uint32_t x = 0; x < n; ++x)
                if (b.searched(x) && best.offset[x] + b.size[x] == end) tops.push_back(x);
            moved = false;
            failed_wide.clear();
            if (end < best.end) {  // every top came down: a smaller arena
                best.end = end;
                best.method = "window_neighbourhood_search";
                for (uint32_t x = 0; x < n; ++x)  // rows outside every search at 0, as the exact search leaves them
                    if (!b.searched(x)) best.offset[x] = 0;
            }
        }
        if (!select(c, job, rows)) break;
        // The window searched ahead, when it is this one (selected from the
        // same state): its build stands, and its result where the share,
        // preorder and capacity are the same.
        const bool same_window = have_ahead && ahead.from == job.from && ahead.to == job.to;
        have_ahead = false;
        if (same_window) {
            std::swap(job, ahead);
        } else {
            build(job);
            job.ran = false;
        }
        const bool searched_ahead = same_window && job.ran;
        const uint64_t ahead_share = job.share, ahead_capacity = job.capacity;
        const int ahead_heuristic = job.heuristic;
        if (!charge(c, job)) break;
        const bool result_stands = searched_ahead && job.share == ahead_share && job.heuristic == ahead_heuristic &&
                                   job.capacity == ahead_capacity;
        if (!result_stands) {
            // Ahead: the next window as if this one fails having spent all of
            // its share, searched only where its own share then comes out
            // whole (not cut by the budget), so that it is what the loop asks
            // for next if this one fails, whatever this one spends.
            WindowCursor next = c;
            next.work += job.share;
            have_ahead = pool && after_failure(next) && select(next, ahead, rows_ahead);
            if (have_ahead) {
                // A window that moves buffers makes the one ahead useless:
                // it is stopped (and not used: cancelled counts as not run).
                std::atomic<uint64_t> ahead_go{UINT64_MAX};
                pool->run([&](unsigned t) {
                    if (t == 0) {
                        search_window(job, false);
                        if (job.outcome == Outcome::Found) ahead_go.store(0);
                        return;
                    }
                    build(ahead);
                    ahead.ran = false;
                    if (charge(next, ahead) && ahead.share == window_share(ahead.freed_rows.size()))
                        search_window(ahead, true, &ahead_go);
                });
            } else {
                search_window(job, false);
            }
            if (!job.ran) break;  // no stack deep enough for it
        }
        const uint64_t charged = std::min(job.spent, job.share);
        c.work += charged;
        if (searched)
            searched->push_back(
                {job.from, job.to, job.freed_rows.size(), job.outcome == Outcome::Found, job.share, charged});
        if (job.outcome == Outcome::Found) {
            for (size_t k = 0; k < job.freed_rows.size(); ++k) best.offset[job.freed_rows[k]] = job.offsets[k];
            moved = true;
            have_ahead = false;  // built against the placement before
            c.widen = 0;
            c.failures = 0;
            continue;  // the same top index now names the next buffer still at the end
        }
        if (job.freed_rows.size() > kWideWindow) failed_wide.emplace_back(job.from, job.to);
        if (!after_failure(c)) break;
    }
    work = c.work;
}

}  // namespace emel::memory
