"""The exact search by time sections (docs/strategies.md §5, "Time sections"; issue 32):
components split at instants no buffer spans, each searched alone at the global target, and
components too large to search whole rolled through section by section around the rows placed
before them.

The tiny instances go through the `_sections` hook with tiny limits (components searched whole up
to a few rows, rolling sections of a few rows), so both paths meet the exhaustive solver; the
structured traces of bench/workload_traces.py go through place() above the 16,384 buffers where
the whole-instance search stops. About 5 s in all."""

import numpy as np
from hypothesis import given, settings, strategies as st

import emel.memory as mm
from emel.memory import _core
from placement_check import first_overlap as overlap
from test_placement_claims import exhaustive_optimum

import synthetic_traces  # bench/ is on pytest's pythonpath (pyproject.toml)
import workload_traces
from peers import check_placement  # a sweep: the pairwise checker is slow at 17,000 rows


def gapped(rows):
    """Rows (start, length, size) laid out in groups separated by instants no row spans."""
    lower, upper, size = [], [], []
    t = 0
    for group in rows:
        for start, length, bytes_ in group:
            lower.append(t + start)
            upper.append(t + start + length)
            size.append(bytes_)
        t = max(upper, default=t) + 1
    return lower, upper, size


row = st.tuples(st.integers(0, 3), st.integers(1, 3), st.sampled_from([1, 2, 3, 5, 8]))


@settings(max_examples=120, deadline=None)
@given(st.lists(st.lists(row, min_size=1, max_size=4), min_size=1, max_size=3),
       st.sampled_from([(3, 2), (7, 3), (1, 2)]), st.booleans())
def test_sections_against_the_exhaustive_optimum(groups, sizes, at_bound):
    """Valid, never above the start (first fit by size), and every claim true: a proven bound is
    a bound, and an answer called optimal is the optimum."""
    lower, upper, size = gapped(groups)
    if len(size) > 7:  # the exhaustive solver tries every order
        lower, upper, size = lower[:7], upper[:7], size[:7]
    truth = exhaustive_optimum(lower, upper, size)
    bound = mm.place(lower, upper, size, strategy="greedy_by_size").lower_bound
    search_whole_up_to, section_rows = sizes
    r = _core._sections(np.array(lower, np.uint64), np.array(upper, np.uint64), np.array(size, np.uint64),
                        bound if at_bound else 0, 50, search_whole_up_to, section_rows)
    offsets = r["offsets"].tolist()
    assert overlap(lower, upper, size, offsets) is None
    assert r["end"] == max((o + s for o, s, lo, up in zip(offsets, size, lower, upper) if lo < up), default=0)
    assert truth <= r["end"] <= r["start_end"]
    assert bound <= r["proven_bound"] <= truth
    if r["optimal"]:
        assert r["end"] == truth == r["proven_bound"]


def test_same_shape_components_are_solved_once():
    """Ten copies of one component, shifted in time: the same answer row for row, for the work of
    about one search (a component where first fit by size gives 9, the optimum and bound 8)."""
    one = ([1, 0, 3, 2, 1], [2, 3, 4, 5, 3], [3, 3, 5, 3, 1])
    reps = 10
    lower = np.concatenate([np.array(one[0]) + 10 * k for k in range(reps)]).astype(np.uint64)
    upper = np.concatenate([np.array(one[1]) + 10 * k for k in range(reps)]).astype(np.uint64)
    size = np.tile(np.array(one[2], np.uint64), reps)
    many = _core._sections(lower, upper, size, 0, 50, 16, 16)
    single = _core._sections(lower[:5], upper[:5], size[:5], 0, 50, 16, 16)
    assert many["start_end"] == 9 and many["end"] == single["end"] == 8 and many["optimal"]
    assert many["offsets"].tolist() == single["offsets"].tolist() * reps
    assert many["work"] < reps * single["work"] // 2  # the search once; the sweeps over every row


def test_rolling_sections_place_a_chained_trace():
    """One component of 40 rows, rolled through in sections of 6: a valid answer, never above
    the start, the same on a second call (offsets and work)."""
    lower, upper, size = workload_traces.pipeline_1f1b(40, seed=1, flush=False)
    args = (lower.astype(np.uint64), upper.astype(np.uint64), size.astype(np.uint64), 0, 50, 4, 6)
    r = _core._sections(*args)
    assert overlap(lower.tolist(), upper.tolist(), size.tolist(), r["offsets"].tolist()) is None
    assert r["end"] <= r["start_end"]
    again = _core._sections(*args)
    assert (again["offsets"].tolist(), again["work"]) == (r["offsets"].tolist(), r["work"])


def test_a_crowded_section_is_given_up_within_the_budget():
    """A section whose rows nearly all live together (3,000 rows live at one instant, the peak of a
    near-clique, beside 300 short ones) costs some 10^8 units to first-fit around: the roll must
    give it up before those steps, within its budget, not charge them after (a near-clique of
    17,000 buffers took 9 s in them at 300 ms; docs/strategies.md §4)."""
    rng = np.random.default_rng(5)
    n = 3000
    lower = np.concatenate([rng.integers(0, 1000, n), rng.integers(0, 2000, 300)]).astype(np.uint64)
    upper = np.concatenate([rng.integers(1001, 2000, n), lower[n:] + rng.integers(1, 20, 300)]).astype(np.uint64)
    size = rng.integers(1, 1 << 16, n + 300).astype(np.uint64)
    for ms in (1, 20):
        r = _core._sections(lower, upper, size, 0, ms, 16, 1024)
        assert r["work"] <= ms * 900_000  # the old roll charged 2.7 * 10^8 here
        assert r["end"] == r["start_end"]  # given up: the start is kept


def test_a_component_its_cuts_do_not_split_is_not_rolled():
    """3,000 rows living up to 400 steps each: about 190 rows live across every instant, so
    each cut crosses more than half of a section's rows (64 or 256) and the sections would be
    placed around as many fixed rows as they hold. The roll is not tried there (it won nowhere
    such, for up to 0.9 s of a default call: docs/strategies.md §5): what the call charges is
    its sweeps and the component's live-peak pass, whatever the budget. The old roll spent the
    budget on it (65M units at 50 ms, 463M at 500 ms) for the same answer."""
    rng = np.random.default_rng(3)
    n = 3000
    lower = rng.integers(0, 3000, n)
    upper = lower + rng.integers(1, 400, n)
    size = rng.integers(1, 1 << 16, n)
    args = (lower.astype(np.uint64), upper.astype(np.uint64), size.astype(np.uint64), 0)
    for section_rows in (64, 256):
        small, large = (_core._sections(*args, ms, 16, section_rows) for ms in (50, 500))
        assert small["end"] < small["start_end"]  # the live-peak pass on the component won
        assert (large["end"], large["work"]) == (small["end"], small["work"])
        assert small["work"] < 50 * 900_000 // 2
        assert overlap(lower.tolist(), upper.tolist(), size.tolist(), small["offsets"].tolist()) is None


def test_a_section_past_the_pairs_the_search_holds_is_not_rolled():
    """A near-clique of 17,000 buffers: the roll's first section holds the 16,000 rows live at
    its peak, 136M pairs, past the 30M the exact search holds. Their conflict lists alone take
    1 GB, built at about half the rate charged: at 1,000 ms the roll charged 9 * 10^8 units in
    2 s for nothing (and `optimal` at 1,000 ms took as long). It is given up before them, and
    the start is kept."""
    lower, upper, size = synthetic_traces.generate("near_clique", 17000, seed=9)
    r = _core._sections(lower.astype(np.uint64), upper.astype(np.uint64), size.astype(np.uint64),
                        0, 1000, 16, 1024)
    assert r["start_end"] > r["proven_bound"]  # above the bound: there is a roll to try
    assert r["end"] == r["start_end"]
    assert r["work"] < 10**8  # the sweeps and the cuts, not the section's pairs


def test_structured_traces_proven_at_the_bound_past_the_whole_search():
    """Above the 16,384 buffers the whole-instance search takes: a 1F1B trace with flushes
    (components searched alone) and one without (rolled through) proven at the bound by
    `optimal` and `auto`, where greedy by size is above it; the same answer and work twice."""
    for lower, upper, size in (workload_traces.pipeline_1f1b(17000, seed=1),
                               workload_traces.pipeline_1f1b(17000, seed=1, flush=False)):
        greedy = mm.place(lower, upper, size, strategy="greedy_by_size")
        assert greedy.size > greedy.lower_bound
        for strategy in ("optimal", "auto"):
            p = mm.place(lower, upper, size, strategy=strategy, time_budget_ms=1000)
            assert p.optimal and p.size == p.lower_bound == p.proven_bound, (strategy, p.method)
            assert p.method == "time_sections"
            assert check_placement(lower, upper, size, p.offsets, reported_size=p.size).valid
            q = mm.place(lower, upper, size, strategy=strategy, time_budget_ms=1000)
            assert (q.offsets.tolist(), q.work) == (p.offsets.tolist(), p.work)


def test_workload_traces_are_seeded_and_exact():
    for family in ("pipeline_1f1b", "pipeline_1f1b_noflush", "paged_kv", "kv_realloc"):
        a = workload_traces.generate(family, 3000, seed=5)
        b = workload_traces.generate(family, 3000, seed=5)
        c = workload_traces.generate(family, 3000, seed=6)
        assert all(np.array_equal(x, y) for x, y in zip(a, b))
        assert not all(np.array_equal(x, y) for x, y in zip(a, c))
        lower, upper, size = a
        assert len(size) == 3000 and (lower < upper).all() and (size > 0).all()
    # With flushes, a 1F1B trace falls apart at its iterations' ends; without, it does not.
    def components(lower, upper):
        order = np.argsort(lower, kind="stable")
        reach = np.maximum.accumulate(upper[order])
        return 1 + int((reach[:-1] <= lower[order][1:]).sum())
    assert components(*workload_traces.pipeline_1f1b(5000, seed=1)[:2]) >= 5
    assert components(*workload_traces.generate("paged_kv", 5000, seed=1)[:2]) == 1


def test_sections_start_no_greedy_pass_their_share_cannot_hold():
    # 30,000 random short lifetimes and 3% of buffers living 30-100% of the trace: one
    # component, past the whole search. auto's sections got one pass's worth capped at half
    # of what was left (about 270M units) and still ran a whole live-peak pass on it: 1,067M
    # units against the 900M of the budget. Now the pass starts only where the share holds
    # one (the first pass's cost, pro rata), and the budget goes to the windows.
    rng = np.random.default_rng([0, 123])
    n, n_long = 30_000, 900
    lo_short = rng.integers(0, n, n - n_long)
    up_short = lo_short + rng.integers(1, 201, n - n_long)
    lengths = rng.integers(n * 3 // 10, n + 1, n_long)
    lo_long = rng.integers(0, n - lengths + 1)
    lower = np.concatenate([lo_long, lo_short])
    upper = np.concatenate([lo_long + lengths, up_short])
    size = rng.integers(1, (1 << 20) + 1, n)
    order = rng.permutation(n)
    lower, upper, size = lower[order], upper[order], size[order]
    p = mm.place(lower, upper, size, time_budget_ms=1000)
    assert p.work <= 1000 * 900_000, (p.work, p.method)
    first = mm.place(lower, upper, size, strategy="greedy_by_size", fit="first")
    assert p.size <= first.size
