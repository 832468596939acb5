// The exact search's race (docs/strategies.md §5): MiniMalloc's three
// preorders search one decision problem side by side; the first to settle answers.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <vector>

#include "emel/memory/placement/canonical_search.hpp"
#include "emel/memory/placement/worker_pool.hpp"

namespace emel::memory::exact {

// Instances with fewer buffers to search race their preorders on one thread
// (restarting them with doubling limits); larger ones on a thread each. The
// environment variable EMEL_SEARCH_THREADS_FROM moves the line, so that tests
// can check that both ways give the same answer.
inline size_t search_threads_from() {
    return static_cast<size_t>(env_count("EMEL_SEARCH_THREADS_FROM", 0, SIZE_MAX).value_or(64));
}

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
            stack_bytes_ = stack_bytes_for(instance.active.size());
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
            lower_to(earliest, CanonicalSearch::race_key(spent[h], h));
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
    // Restarts up to this limit come before threads: most small searches
    // settle within it, and starting threads costs more than they do.
    static constexpr uint64_t kThreadsAfter = uint64_t{1} << 17;

    const CanonicalInstance& instance_;
    std::vector<CanonicalSearch> searches_;
    std::unique_ptr<WorkerPool> pool_;  // started by the first race that needs it
    bool may_thread_ = false, pool_tried_ = false;
    unsigned permits_ = 1;
    size_t stack_bytes_ = 0;  // 0: the searches run on the caller's stack
};

}  // namespace emel::memory::exact
