"""One overlap checker for the tests that place bare rows (place()).

Two rows clash when both are live (lower < upper: a row [l, l) is never live
and holds no bytes), both hold bytes, they are live at one instant and their
byte ranges meet. Exact for rows up to 2^64 - 1: NumPy in int64 when every
end fits (the fast path), Python integers otherwise; both give the same
first pair. Plans (emel.plan/1 documents) have their own check,
invariants.check_no_overlap: in-place pairs and views make a plan's rule
differ from the rows' (docs/architecture.md, "Tests")."""

import numpy as np

_CHUNK = 512  # rows per NumPy block: the pairwise matrix stays a few MB


def first_overlap(lower, upper, size, offsets):
    """The first clashing (i, j), i < j (lowest i, then lowest j), or None."""
    lower, upper, size, offsets = ([int(v) for v in a] for a in (lower, upper, size, offsets))
    if max(upper + [o + s for o, s in zip(offsets, size)], default=0) < 2**63:
        return _first_overlap_numpy(*(np.asarray(a, dtype=np.int64) for a in (lower, upper, size, offsets)))
    for i in range(len(size)):
        for j in range(i + 1, len(size)):
            if (lower[i] < upper[i] and lower[j] < upper[j]
                    and lower[i] < upper[j] and lower[j] < upper[i] and size[i] and size[j]
                    and offsets[i] < offsets[j] + size[j] and offsets[j] < offsets[i] + size[i]):
                return i, j
    return None


def _first_overlap_numpy(lower, upper, size, offsets):
    n = len(size)
    holds = (lower < upper) & (size > 0)
    end = offsets + size
    for a in range(0, n, _CHUNK):
        b = min(n, a + _CHUNK)
        rows = slice(a, b)
        clash = (holds[rows, None] & holds[None, :]
                 & (lower[rows, None] < upper[None, :]) & (lower[None, :] < upper[rows, None])
                 & (offsets[rows, None] < end[None, :]) & (offsets[None, :] < end[rows, None]))
        clash &= np.arange(n)[None, :] > np.arange(a, b)[:, None]  # j > i only
        hit = np.argwhere(clash)  # row-major: lowest i, then lowest j
        if len(hit):
            return int(a + hit[0][0]), int(hit[0][1])
    return None
