"""Perfect packings (bench/perfect_packing.py): instances cut from a full rectangle, whose
optimum is the lower bound, and what emel's exact search and auto make of small ones."""

import numpy as np
import pytest

import emel.memory as mm
import perfect_packing  # bench/ is on pytest's pythonpath (pyproject.toml)


def overlapping_pairs(lower, upper, size, offsets):
    n = len(size)
    return [(i, j) for i in range(n) for j in range(i + 1, n)
            if lower[i] < upper[j] and lower[j] < upper[i]
            and offsets[i] < offsets[j] + size[j] and offsets[j] < offsets[i] + size[i]]


@pytest.mark.parametrize("n,seed,pinwheel", [(5, 0, 1.0), (9, 1, 0.5), (16, 2, 0.3), (30, 3, 0.0), (30, 4, 1.0)])
def test_the_cut_tiles_the_rectangle(n, seed, pinwheel):
    lower, upper, size, offsets, height = perfect_packing.cut(n, seed, pinwheel)
    assert len(size) == n and (size > 0).all() and (upper > lower).all()
    assert not overlapping_pairs(lower, upper, size, offsets)
    assert int((offsets + size).max()) == height
    # Full at every instant: the bytes are the rectangle's area, the peak its height.
    steps = int(upper.max())
    assert int(((upper - lower) * size).sum()) == steps * height
    assert mm.place(lower, upper, size, strategy="greedy_by_size").lower_bound == height


def test_pinwheels_are_cut_and_the_cut_is_deterministic():
    a = perfect_packing.cut(30, 7, pinwheel=1.0)
    b = perfect_packing.cut(30, 7, pinwheel=1.0)
    g = perfect_packing.cut(30, 7, pinwheel=0.0)
    assert all(np.array_equal(x, y) for x, y in zip(a[:4], b[:4]))
    assert not np.array_equal(a[0], g[0])


@pytest.mark.parametrize("n,seed", [(12, 0), (24, 1), (40, 0)])
def test_small_packings_are_solved_at_the_optimum(n, seed):
    lower, upper, size, _, height = perfect_packing.cut(n, seed)
    for strategy in ("optimal", "auto"):
        p = mm.place(lower, upper, size, strategy=strategy)
        assert p.size == height and p.optimal, (strategy, p.size / height, p.method)
        assert not overlapping_pairs(lower, upper, size, p.offsets)
    # greedy by size misses it on the larger ones: the search is what reaches it.
    if n == 40:
        assert mm.place(lower, upper, size, strategy="greedy_by_size").size > height
