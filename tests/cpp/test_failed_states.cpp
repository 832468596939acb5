// FailedStates (placement/failed_states.hpp), the exact search's memory of
// failed states: run scoping, kept failures and their capacities, slot reuse.
#include <cstdint>

#include "emel/memory/placement/failed_states.hpp"
#include "mini_test.hpp"

using namespace emel::memory;

TEST(failed_states_remembers_a_failure_within_its_run) {
    FailedStates t(10);
    const StateKey k{0x1234, 0x9999};
    CHECK(!t.failed_in_run(k));  // an empty table (nothing allocated yet) matches nothing
    t.begin_run();
    t.insert(k);
    CHECK(t.failed_in_run(k));
    CHECK(!t.failed_in_run(StateKey{0x1234, 0x9998}));  // both halves of the key must match
    CHECK(!t.failed_at_or_above(k, 0));                 // not kept until committed
    t.begin_run();
    CHECK(!t.failed_in_run(k));  // a new run forgets the last one's failures
}

TEST(failed_states_keeps_committed_failures_for_their_capacity_and_below) {
    FailedStates t(10);
    const StateKey k{77, 88};
    t.begin_run();
    t.insert(k);
    CHECK_EQ(t.commit(1000), uint64_t{1});  // one slot written, one visited
    t.begin_run();
    CHECK(t.failed_at_or_above(k, 1000));
    CHECK(t.failed_at_or_above(k, 999));    // no completion below 1000: none below 999
    CHECK(!t.failed_at_or_above(k, 1001));  // proven under 1000 only
    CHECK(!t.failed_in_run(k));
    // Proven again under a larger capacity: the kept capacity grows.
    t.insert(k);
    t.commit(2000);
    CHECK(t.failed_at_or_above(k, 2000));
    // Proven under a smaller one: the larger proof stays.
    t.begin_run();
    t.insert(k);
    t.commit(500);
    CHECK(t.failed_at_or_above(k, 2000));
}

TEST(failed_states_a_new_failure_takes_its_slot_over) {
    FailedStates t(1);  // 2^10 slots: keys equal in their low 10 bits share one
    const StateKey first{5, 1}, second{5 + (uint64_t{1} << 10), 2};
    t.begin_run();
    t.insert(first);
    t.commit(100);
    t.begin_run();
    t.insert(second);
    CHECK(t.failed_in_run(second));
    CHECK(!t.failed_in_run(first));
    CHECK(t.failed_at_or_above(first, 100));  // the kept entry sits beside the run's
    t.commit(100);
    CHECK(t.failed_at_or_above(second, 100));
    CHECK(!t.failed_at_or_above(first, 100));  // replaced in its slot
}

TEST(failed_states_commit_visits_every_slot_once_the_run_wrote_more) {
    FailedStates t(1);  // 1024 slots
    t.begin_run();
    for (uint64_t i = 0; i < 2000; ++i) t.insert(StateKey{i, i + 1});
    // More writes than slots: the commit walks the whole table instead.
    CHECK_EQ(t.commit(10), uint64_t{1024});
    // The last writer of each slot is what was kept.
    CHECK(t.failed_at_or_above(StateKey{1999, 2000}, 10));
    CHECK(!t.failed_at_or_above(StateKey{1999 - 1024, 2000 - 1024}, 10));
}
