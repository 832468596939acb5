"""bench/perfect_packing.py: instances cut from a full rectangle, whose optimum is the lower bound.

The generator's witness tiles the rectangle exactly (so the bound is reachable and optimal), the
same seed gives the same instance, and emel's default placement reaches that optimum, proven, on
small instances of each cut (the large ones are the field's open corner: docs/benchmarks.md).
"""

import numpy as np
import pytest

import emel.memory as mm
from perfect_packing import CUTS, check_packing, cut_rectangle

from placement_check import first_overlap


@pytest.mark.parametrize("kind", CUTS)
@pytest.mark.parametrize("n", [1, 2, 5, 37, 600])
def test_the_cut_tiles_the_rectangle(kind, n):
    lower, upper, size, offset, capacity = cut_rectangle(n, kind=kind, seed=n)
    assert len(size) == n
    assert (lower < upper).all() and (size > 0).all() and (size % 64 == 0).all()
    check_packing(lower, upper, size, offset, capacity)          # raises unless exactly full
    assert first_overlap(lower, upper, size, offset) is None


def test_check_packing_rejects_a_gap_and_an_overhang():
    lower, upper, size, offset, capacity = cut_rectangle(20, kind="guillotine", seed=1)
    shrunk = size.copy()
    shrunk[0] -= 64                                  # a 64-byte hole for the first piece's life
    with pytest.raises(ValueError, match="every step"):
        check_packing(lower, upper, shrunk, offset, capacity)
    moved = offset.copy()
    moved[int(np.argmax(offset))] += 64
    with pytest.raises(ValueError, match="outside"):
        check_packing(lower, upper, size, moved, capacity)


def test_same_seed_same_instance_and_seeds_differ():
    a = cut_rectangle(300, kind="mixed", seed=7)
    b = cut_rectangle(300, kind="mixed", seed=7)
    c = cut_rectangle(300, kind="mixed", seed=8)
    assert all(np.array_equal(x, y) for x, y in zip(a[:4], b[:4]))
    assert not all(np.array_equal(x, y) for x, y in zip(a[:3], c[:3]))


def _straight_cut_exists(lower, upper, size, offset):
    """Whether one line across the whole rectangle, in time or in memory, crosses no piece."""
    across_time = any(((upper <= t) | (lower >= t)).all() for t in set(lower.tolist()) - {0})
    across_memory = any(((offset + size <= y) | (offset >= y)).all() for y in set(offset.tolist()) - {0})
    return across_time or across_memory


def test_pinwheel_cuts_are_not_guillotine():
    lower, upper, size, offset, _ = cut_rectangle(5, kind="pinwheel", seed=0)
    assert not _straight_cut_exists(lower, upper, size, offset)      # one windmill
    for seed in range(5):
        assert _straight_cut_exists(*cut_rectangle(2, kind="guillotine", seed=seed)[:4])


def test_bad_requests_are_refused():
    with pytest.raises(ValueError, match="unknown cut"):
        cut_rectangle(10, kind="diagonal")
    with pytest.raises(ValueError, match="do not fit"):
        cut_rectangle(10, kind="mixed", width=2, height=2)


@pytest.mark.parametrize("kind,n,seed", [("guillotine", 60, 0), ("guillotine", 150, 1),
                                         ("pinwheel", 100, 0), ("pinwheel", 150, 2),
                                         ("mixed", 150, 0), ("mixed", 100, 1)])
def test_default_placement_reaches_the_optimum_with_proof(kind, n, seed):
    lower, upper, size, _, capacity = cut_rectangle(n, kind=kind, seed=seed)
    result = mm.place(lower, upper, size, strategy="auto")
    assert result.lower_bound == capacity                     # the bound is the peak: full columns
    assert result.size == capacity and result.optimal
    assert first_overlap(lower, upper, size, result.offsets) is None


def test_row_order_does_not_give_the_answer_away():
    # Rows sorted by (start, offset) let first fit in row order rebuild the cut
    # (a peer's input-order pass "solved" every instance that way): the rows
    # are shuffled, so that pass now ends far above the optimum.
    lower, upper, size, offset, capacity = cut_rectangle(300, kind="mixed", seed=0)
    placed = []
    end = 0
    for x in range(len(size)):
        spans = sorted((o, o + s) for l, u, o, s in placed if l < upper[x] and lower[x] < u)
        top = 0
        for a, b in spans:
            if a >= top + size[x]:
                break
            top = max(top, b)
        placed.append((lower[x], upper[x], top, size[x]))
        end = max(end, top + size[x])
    assert end > 1.2 * capacity
    by_start = np.lexsort((offset, lower))
    assert not np.array_equal(by_start, np.arange(len(size)))


def test_the_sweep_counts_what_place_returns(tmp_path):
    import json

    import perfect_sweep

    out = tmp_path / "sweep.json"
    perfect_sweep.main(["--sizes", "100", "--seeds", "0-1", "--cuts", "pinwheel,mixed",
                        "--strategy", "greedy_by_size", "--out", str(out)])
    result = json.loads(out.read_text())
    rows = result["instances"]
    assert [(r["cut"], r["seed"]) for r in rows] == [("pinwheel", 0), ("pinwheel", 1), ("mixed", 0), ("mixed", 1)]
    for r in rows:                        # each row is place()'s own answer over the cut's optimum
        lower, upper, size, _, optimum = cut_rectangle(100, kind=r["cut"], seed=r["seed"])
        assert r["ratio"] == mm.place(lower, upper, size, strategy="greedy_by_size").size / optimum
    for s in result["summary"]:
        mine = [r for r in rows if r["cut"] == s["cut"]]
        assert s["at_bound"] == sum(r["proven"] for r in mine)
        assert s["worst"] == max(r["ratio"] for r in mine)
