"""The full-packing search (placement/full_packing.cpp; docs/strategies.md §5, "Full packings").

On instances whose every instant holds exactly the peak of live bytes, or nothing, a placement at
that bound is a tiling; the search finds one on the perfect packings of bench/perfect_packing.py
that the exact search leaves 20% above it, and every other instance is refused by one sweep.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import emel.memory as mm
from perfect_packing import CUTS, cut_rectangle

from placement_check import first_overlap


@pytest.mark.parametrize("kind", CUTS)
@pytest.mark.parametrize("strategy", ["auto", "optimal"])
def test_perfect_packings_of_300_are_placed_at_the_bound_with_proof(kind, strategy):
    lower, upper, size, _, capacity = cut_rectangle(300, kind=kind, seed=1)
    p = mm.place(lower, upper, size, strategy=strategy)
    assert p.method == "full_packing_search"
    assert p.size == capacity == p.lower_bound and p.optimal
    assert first_overlap(lower, upper, size, p.offsets) is None
    again = mm.place(lower, upper, size, strategy=strategy)
    assert np.array_equal(again.offsets, p.offsets) and again.work == p.work


@pytest.mark.parametrize("kind, seed", [("guillotine", 7), ("mixed", 0)])
def test_flush_tops_first_tile_cuts_where_the_search_stalled(kind, seed):
    # Trying first the buffers whose top meets a wall of the valley (the
    # pieces of a cut share edges) tiles these within 4,000 ms (0.1 and
    # 1.1 s of work); tried in the restarts' orders alone, both stayed
    # 14-24% above the bound there.
    lower, upper, size, _, capacity = cut_rectangle(600, kind=kind, seed=seed)
    p = mm.place(lower, upper, size, strategy="optimal", time_budget_ms=4000)
    assert p.method == "full_packing_search"
    assert p.size == capacity and p.optimal
    assert first_overlap(lower, upper, size, p.offsets) is None


def test_components_apart_in_time_and_rows_that_hold_nothing():
    # Two rectangles of one height with an empty stretch between them: every
    # instant holds the bound or nothing, so the search runs across the gap;
    # a never-live row and a live row of 0 bytes stay at offset 0.
    a = cut_rectangle(80, kind="mixed", seed=3)
    b = cut_rectangle(80, kind="guillotine", seed=4)
    gap = int(a[1].max()) + 50
    lower = np.concatenate([a[0], b[0] + gap, [10, 5]])
    upper = np.concatenate([a[1], b[1] + gap, [10, 9]])      # never live; live but empty
    size = np.concatenate([a[2], b[2], [64, 0]])
    p = mm.place(lower, upper, size)
    assert p.method == "full_packing_search" and p.optimal and p.size == a[4]
    assert first_overlap(lower, upper, size, p.offsets) is None
    assert p.offsets[-2] == 0 and p.offsets[-1] == 0


def test_an_instance_with_room_somewhere_is_not_searched():
    lower, upper, size, _, capacity = cut_rectangle(120, kind="pinwheel", seed=2)
    shorter = upper.copy()
    shorter[int(np.argmax(upper - lower))] -= 1              # one instant no longer full
    p = mm.place(lower, shorter, size)
    assert p.method != "full_packing_search"
    assert first_overlap(lower, shorter, size, p.offsets) is None
    assert p.size >= p.lower_bound


def test_alignment_that_the_sizes_do_not_share_refuses_it():
    # Sizes rounded up to 4 KiB break the tiling (not every instant holds the
    # peak any more), so the instance is placed by the other passes.
    lower, upper, size, _, capacity = cut_rectangle(60, kind="guillotine", seed=5)
    p = mm.place(lower, upper, size, alignment=4096)
    assert p.method != "full_packing_search"
    assert (p.offsets % 4096 == 0).all()
    assert first_overlap(lower, upper, -(-size // 4096) * 4096, p.offsets) is None


def _random_tiling(draw):
    """Rectangles of one height cut at random (either way, any grain), apart in time or not."""
    grain = draw(st.sampled_from([1, 3, 64, 4096]))
    height = draw(st.integers(2, 40))
    rows = []
    t = 0
    for _ in range(draw(st.integers(1, 3))):           # components, maybe with empty time between
        width = draw(st.integers(1, 30))
        pieces = [(t, 0, width, height)]
        for _ in range(draw(st.integers(0, 12))):
            k = draw(st.integers(0, len(pieces) - 1))
            t0, y0, w, h = pieces[k]
            if draw(st.booleans()) and w >= 2:
                c = draw(st.integers(1, w - 1))
                pieces[k:k + 1] = [(t0, y0, c, h), (t0 + c, y0, w - c, h)]
            elif h >= 2:
                c = draw(st.integers(1, h - 1))
                pieces[k:k + 1] = [(t0, y0, w, c), (t0, y0 + c, w, h - c)]
        rows += pieces
        t += width + draw(st.integers(0, 3))
    order = draw(st.permutations(range(len(rows))))
    rows = [rows[i] for i in order]
    lower = np.array([r[0] for r in rows], dtype=np.int64)
    upper = np.array([r[0] + r[2] for r in rows], dtype=np.int64)
    size = np.array([r[3] * grain for r in rows], dtype=np.int64)
    return lower, upper, size, height * grain


@settings(max_examples=150)
@given(st.data())
def test_random_tilings_are_placed_at_the_bound(data):
    lower, upper, size, capacity = _random_tiling(data.draw)
    p = mm.place(lower, upper, size)
    assert first_overlap(lower, upper, size, p.offsets) is None
    assert p.lower_bound == capacity
    assert p.size == capacity and p.optimal                 # small: found whichever pass gets there
    q = mm.place(lower, upper, size, strategy="optimal")
    assert first_overlap(lower, upper, size, q.offsets) is None
    assert q.size == capacity and q.optimal


@settings(max_examples=150)
@given(st.data())
def test_random_tilings_with_room_somewhere_stay_valid(data):
    lower, upper, size, capacity = _random_tiling(data.draw)
    k = data.draw(st.integers(0, len(size) - 1))
    upper = upper.copy()
    upper[k] = lower[k] + data.draw(st.integers(1, int(upper[k] - lower[k])))   # shorter or the same
    p = mm.place(lower, upper, size)
    assert first_overlap(lower, upper, size, p.offsets) is None
    assert p.size >= p.lower_bound


_RACE = """
import hashlib, json
import numpy as np
import emel.memory as mm
from perfect_packing import cut_rectangle
out = {}
for kind, seed, budget in (("guillotine", 5, None), ("mixed", 2, 200), ("mixed", 0, 30), ("pinwheel", 1, 5)):
    lower, upper, size, _, _ = cut_rectangle(600, kind=kind, seed=seed)
    p = mm.place(lower, upper, size, "optimal", time_budget_ms=budget)
    digest = hashlib.sha256(np.asarray(p.offsets, np.uint64).tobytes()).hexdigest()
    out[f"{kind} {seed} {budget}"] = [digest, p.size, p.work, p.method, p.optimal]
print(json.dumps(out))
"""


def test_the_two_searches_give_one_answer_on_any_number_of_threads():
    """Two searches race, on a thread each where there are two: the answer,
    the work charged and the verdict must not depend on the threads (one runs
    after the other on one thread), whether one settles or both run out."""
    import json, subprocess, sys
    from repo_data import child_env
    runs = [json.loads(subprocess.run([sys.executable, "-c", _RACE], env=child_env(EMEL_THREADS=t),
                                      capture_output=True, text=True, check=True).stdout) for t in ("1", "2")]
    assert runs[0] == runs[1]
    verdicts = [v[4] for v in runs[0].values()]
    assert True in verdicts and False in verdicts  # a race won, and races that ran out
