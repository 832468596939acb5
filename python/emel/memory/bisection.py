"""The largest value a monotone test passes, by bisection: emel-fit's searches (``fit.max_fit``
over a graph dimension, ``gguf.fit.fit_gguf`` over a model's context) share it.

Layer 0 (tests/test_layers.py): both callers sit at layer 6, and ``fit`` imports ``gguf.fit``
for ``.gguf`` files, so the shared loop lives below both rather than in either.
"""

from __future__ import annotations

from typing import Callable


def largest_fitting(fits: Callable[[int], bool], lo: int, hi: int) -> tuple[int | None, int | None]:
    """Bisection over ``[lo, hi]`` for a test that passes up to some value and fails above it.

    Returns ``(good, bad)``: the largest value probed that passes and the smallest above it that
    fails (``good`` None: not even ``lo`` passes; ``bad`` None: ``hi`` passes). ``lo`` is probed
    first, then ``hi``, then midpoints, so the callers' probes (and what they report) come in
    that order.
    """
    if not fits(lo):
        return None, lo
    if fits(hi):
        return hi, None
    good, bad = lo, hi          # invariant: good passes, bad fails
    while bad - good > 1:
        mid = (good + bad) // 2
        if fits(mid):
            good = mid
        else:
            bad = mid
    return good, bad
