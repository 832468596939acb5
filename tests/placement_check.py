"""One overlap checker for the tests that place bare rows (place()).

Two rows clash when both are live (lower < upper: a row [l, l) is never live
and holds no bytes), both hold bytes, they are live at one instant and their
byte ranges meet. Python integers throughout, so rows up to 2^64 - 1 compare
exactly (bench/peers.py's vectorised checker works in int64)."""


def first_overlap(lower, upper, size, offsets):
    """The first clashing (i, j), i < j, or None."""
    lower, upper, size, offsets = ([int(v) for v in a] for a in (lower, upper, size, offsets))
    for i in range(len(size)):
        for j in range(i + 1, len(size)):
            if (lower[i] < upper[i] and lower[j] < upper[j]
                    and lower[i] < upper[j] and lower[j] < upper[i] and size[i] and size[j]
                    and offsets[i] < offsets[j] + size[j] and offsets[j] < offsets[i] + size[i]):
                return i, j
    return None
