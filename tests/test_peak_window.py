"""auto's peak window (docs/strategies.md §4).

The window is the widest stretch of instants around the peak of live bytes in
which at most `max_buffers` buffers are live; the exact search places it, and
first fit in the order of those offsets keeps every window buffer at or below
its offset while the others are placed around.
"""

import numpy as np
import pytest

import emel.memory as mm
from emel.memory import _core

from placement_check import first_overlap

import peers  # bench/peers.py: its sweep checker, independent of the planner


def events(lower, upper, size):
    """The instants where liveness changes, and the earliest of the peak's."""
    live = lower < upper
    instants = np.unique(np.concatenate([lower[live], upper[live]]))
    load = [int(size[live & (lower <= t) & (upper > t)].sum()) for t in instants]
    return instants, int(instants[int(np.argmax(load))])


def live_in(lower, upper, start, stop):
    return np.flatnonzero((lower < upper) & (lower < stop) & (upper > start))


def reference_window(instants, peak, lower, upper, max_buffers):
    """docs/strategies.md §4's growth: both sides at once while the rows fit,
    then the side adding fewer rows (ties: the earlier instants)."""
    lo = int(np.searchsorted(instants, peak))
    hi = lo + 1
    count = lambda a, b: len(live_in(lower, upper, instants[a], instants[b]))  # noqa: E731
    while True:
        left, right = lo > 0, hi + 1 < len(instants)
        if left and right and count(lo - 1, hi + 1) <= max_buffers:
            lo, hi = lo - 1, hi + 1
            continue
        by_left = count(lo - 1, hi) if left else None
        by_right = count(lo, hi + 1) if right else None
        options = [c for c in (by_left, by_right) if c is not None and c <= max_buffers]
        if not options:
            return instants[lo], instants[hi]
        if by_left is not None and by_left <= max_buffers and (by_right is None or by_left <= by_right):
            lo -= 1
        else:
            hi += 1


def random_rows(seed, n):
    rng = np.random.default_rng(seed)
    lower = rng.integers(0, 5 * (seed % 4 + 1) * 12, n).astype(np.uint64)  # denser to sparser
    upper = lower + rng.integers(0, 25, n).astype(np.uint64)              # some empty rows
    if seed % 2:  # few sizes, some zero
        size = rng.integers(0, 9, n).astype(np.uint64) * rng.choice([1, 8, 64], n).astype(np.uint64)
    else:         # many sizes
        size = rng.integers(1, 1000, n).astype(np.uint64)
    return lower, upper, size


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("max_buffers", [1, 5, 12, 40, 10_000])
def test_window_is_the_widest_around_the_peak_and_kept_by_first_fit(seed, max_buffers):
    lower, upper, size = random_rows(seed, 120)
    w = _core._peak_window(lower, upper, size, max_buffers, 50)
    instants, peak = events(lower, upper, size)
    start, stop = w["from"], w["to"]
    members = np.asarray(w["members"], dtype=np.int64)
    # Exactly the rows live in [from, to), around the earliest peak instant.
    assert list(members) == list(live_in(lower, upper, start, stop))
    assert start <= peak < stop
    assert (start, stop) == reference_window(instants, peak, lower, upper, max_buffers)
    at = int(np.searchsorted(instants, start))
    stop_at = int(np.searchsorted(instants, stop))
    assert instants[at] == start and instants[stop_at] == stop
    assert w["whole"] == (at == 0 and stop_at == len(instants) - 1)
    if len(members) > max_buffers:  # only the peak instant's own rows are more
        assert start == peak and stop_at == at + 1
    # Widest: one more instant on either side would hold too many rows.
    if at > 0:
        assert len(live_in(lower, upper, instants[at - 1], stop)) > max_buffers
    if stop_at + 1 < len(instants):
        assert len(live_in(lower, upper, start, instants[stop_at + 1])) > max_buffers
    # The window's placement is valid on the cut lifetimes...
    cut_lower = np.maximum(lower[members], start)
    cut_upper = np.minimum(upper[members], stop)
    window_offsets = np.asarray(w["window_offsets"], dtype=np.uint64)
    assert first_overlap(cut_lower, cut_upper, size[members], window_offsets) is None
    # ...and the full placement on the full ones, with every window row kept
    # at or below its window offset, so the window's end is kept.
    offsets = np.asarray(w["offsets"], dtype=np.uint64)
    assert first_overlap(lower, upper, size, offsets) is None
    assert np.all(offsets[members] <= window_offsets)
    live = (lower < upper)
    assert w["end"] == int((offsets + size)[live].max())
    window_top = (offsets[members] + size[members]).max(initial=0)
    assert window_top <= w["window_end"]


def test_window_by_hand():
    # Rows 0 and 1 make the peak (8 bytes over [0, 4)); at most two rows fit
    # in the window: [0, 5) still holds only them, [0, 9) would add row 2.
    lower = np.array([0, 0, 5, 10], dtype=np.uint64)
    upper = np.array([4, 4, 9, 11], dtype=np.uint64)
    size = np.array([3, 5, 6, 2], dtype=np.uint64)
    w = _core._peak_window(lower, upper, size, 2, 50)
    assert (w["from"], w["to"], w["whole"]) == (0, 5, False)
    assert list(w["members"]) == [0, 1]
    assert w["window_end"] == 8 and w["end"] == 8


def test_window_grows_to_the_earlier_side_on_a_tie():
    # The peak row P alone over [10, 11); L lives over [8, 9), R over [12, 13).
    # Two rows fit: [9, 12) still holds P only; then each side adds one row.
    lower = np.array([10, 8, 12], dtype=np.uint64)
    upper = np.array([11, 9, 13], dtype=np.uint64)
    size = np.array([100, 1, 1], dtype=np.uint64)
    w = _core._peak_window(lower, upper, size, 2, 50)
    assert (w["from"], w["to"]) == (8, 12)
    assert list(w["members"]) == [0, 1]


def test_auto_places_pangu_at_its_bound_through_the_peak_window(idealloc_instance):
    # Every greedy order leaves one 40 MiB hole at pangu_2.6B's peak instant
    # (1.0076 of the bound); the exact search places the 1,024 buffers around
    # the peak at the bound, and first fit builds the other 17,668 around them.
    lower, upper, size = idealloc_instance("pangu_2.6B")
    greedy = mm.place(lower, upper, size, "greedy_by_size", fit="first")
    assert greedy.size == greedy.lower_bound + 40 * 2**20
    placed = mm.place(lower, upper, size, "auto", time_budget_ms=4000)
    assert placed.size == placed.lower_bound == 5_530_099_775
    assert placed.optimal and placed.method == "peak_window"
    check = peers.check_placement(lower, upper, size, placed.offsets, reported_size=placed.size)
    assert check.valid, check.problems
    assert check.max_end == placed.size


def test_auto_through_the_window_is_valid_and_never_above_its_first_pass():
    # Random traces past the exact search's 2,000 buffers, with zero sizes and
    # alignment: whatever wins, the answer is checked from scratch; the
    # window must win on some of them, so its path is the one checked.
    methods = []
    for seed in range(5):
        rng = np.random.default_rng(seed)
        n = 2500
        lower = rng.integers(0, 300, n)
        upper = lower + rng.integers(0, 30, n)
        size = rng.integers(0, 100, n) * (rng.random(n) < 0.8)
        placed = mm.place(lower, upper, size, "auto", alignment=8, time_budget_ms=300)
        aligned = (size + 7) // 8 * 8
        check = peers.check_placement(lower, upper, aligned, placed.offsets, reported_size=placed.size)
        assert check.valid, (seed, check.problems)
        first = mm.place(lower, upper, size, "greedy_by_size", alignment=8, fit="first")
        assert placed.lower_bound <= placed.size <= first.size
        methods.append(placed.method)
    assert "peak_window" in methods, methods
