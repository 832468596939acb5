"""Perfect packings: static-allocation instances with a known optimum equal to the lower bound.

A rectangle of ``width`` time steps by ``height`` grains of memory is cut into ``n`` pieces; each
piece is one buffer, live over ``[t0, t1)`` with ``(y1 - y0) * grain`` bytes. The pieces tile the
rectangle, so every time step has exactly ``height * grain`` live bytes: the peak of live bytes
(the lower bound) is ``height * grain``, and the cut itself is a placement that reaches it
(offset ``y0 * grain``). Any answer above the bound is the solver's, not the instance's.

Cuts (the field's hard corner: every time section must be exactly full):
- ``guillotine``: a piece is cut in two by one straight line, across time or across memory;
- ``pinwheel``: a piece is cut into five, four around a centre in a windmill, a layout no
  sequence of straight cuts makes (non-guillotine);
- ``mixed``: each cut is a pinwheel with probability 1/3 where the piece is large enough.

Pieces are cut largest-area first (ties by position), cut points drawn from NumPy's PCG64 with the
given seed: the same ``(n, seed, ...)`` gives the same instance on every machine. The rows come in
a seeded random order: in (start, offset) order, first fit in row order would rebuild the cut.

    python bench/perfect_packing.py guillotine 600 --seed 0 -o p.csv
    python bench/perfect_packing.py pinwheel 600 --seed 1 --check
"""

from __future__ import annotations

import argparse
import heapq

import numpy as np

CUTS = ("guillotine", "pinwheel", "mixed")


def cut_rectangle(n: int, *, kind: str = "mixed", seed: int = 0, width: int = 1000,
                  height: int = 1 << 14, grain: int = 64):
    """``(lower, upper, size, offset, capacity)`` of a perfect packing of ``n`` buffers.

    ``offset`` is the packing the cut gives (a witness that ``capacity`` is reachable);
    ``capacity = height * grain`` is both the optimum and the peak of live bytes.
    """
    if kind not in CUTS:
        raise ValueError(f"unknown cut {kind!r}: one of {', '.join(CUTS)}")
    if n < 1 or n > width * height // 4:
        raise ValueError(f"n={n} pieces do not fit a {width} x {height} rectangle")
    rng = np.random.default_rng(seed)
    # Max-heap on area; the position breaks ties so the order never depends on heap internals.
    heap = [(-width * height, 0, 0, width, height)]
    pieces = 1
    done = []
    while pieces < n and heap:
        _, t0, y0, w, h = heapq.heappop(heap)
        parts = _cut(rng, kind, t0, y0, w, h, room=n - pieces)
        if parts is None:                       # too small to cut: it stays one piece
            done.append((t0, y0, w, h))
            continue
        pieces += len(parts) - 1
        for part in parts:
            heapq.heappush(heap, (-part[2] * part[3], *part))
    if pieces < n:
        raise ValueError(f"could not cut {n} pieces (got {pieces}); use a larger rectangle")
    rects = sorted(done + [item[1:] for item in heap])
    # Rows in a seeded random order: sorted by (start, offset) they would
    # hand the answer to any solver with an input-order pass (first fit in
    # row order rebuilds the cut exactly).
    rects = [rects[i] for i in rng.permutation(len(rects))]
    arr = np.array(rects, dtype=np.int64).reshape(-1, 4)
    lower, offset = arr[:, 0], arr[:, 1] * grain
    upper, size = arr[:, 0] + arr[:, 2], arr[:, 3] * grain
    return lower, upper, size, offset, height * grain


def _cut(rng, kind, t0, y0, w, h, room):
    pinwheel = (kind == "pinwheel" or (kind == "mixed" and rng.random() < 1 / 3))
    if pinwheel and room >= 4 and w >= 3 and h >= 3:
        # Windmill: bottom, right, top, left around the centre [x1,x2) x [u1,u2).
        x1, x2 = sorted(rng.choice(np.arange(1, w), size=2, replace=False).tolist())
        u1, u2 = sorted(rng.choice(np.arange(1, h), size=2, replace=False).tolist())
        return [(t0, y0, x2, u1),                       # bottom
                (t0 + x2, y0, w - x2, u2),              # right
                (t0 + x1, y0 + u2, w - x1, h - u2),     # top
                (t0, y0 + u1, x1, h - u1),              # left
                (t0 + x1, y0 + u1, x2 - x1, u2 - u1)]   # centre
    across_time = w >= 2 and (h < 2 or rng.random() < w / (w + h / 16))
    if across_time:
        c = int(rng.integers(1, w))
        return [(t0, y0, c, h), (t0 + c, y0, w - c, h)]
    if h >= 2:
        c = int(rng.integers(1, h))
        return [(t0, y0, w, c), (t0, y0 + c, w, h - c)]
    return None


def check_packing(lower, upper, size, offset, capacity) -> None:
    """Raise ValueError unless the witness tiles ``[0, capacity)`` at every time step exactly."""
    end = int(upper.max())
    live = np.zeros(end + 1, dtype=np.int64)
    np.add.at(live, lower, size)
    np.add.at(live, upper, -size)
    if not (np.cumsum(live)[:end] == capacity).all():
        raise ValueError("live bytes are not the capacity at every step")
    if (offset < 0).any() or (offset + size > capacity).any():
        raise ValueError("a piece lies outside the rectangle")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=CUTS)
    ap.add_argument("n", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--width", type=int, default=1000)
    ap.add_argument("--height", type=int, default=1 << 14)
    ap.add_argument("--grain", type=int, default=64)
    ap.add_argument("-o", "--out", help="write rows id,lower,upper,size (MiniMalloc's CSV)")
    ap.add_argument("--check", action="store_true", help="check the witness packing")
    args = ap.parse_args(argv)
    lower, upper, size, offset, capacity = cut_rectangle(
        args.n, kind=args.kind, seed=args.seed, width=args.width, height=args.height, grain=args.grain)
    if args.check:
        check_packing(lower, upper, size, offset, capacity)
    if args.out:
        with open(args.out, "w") as f:
            f.write("id,lower,upper,size\n")
            for i, row in enumerate(zip(lower.tolist(), upper.tolist(), size.tolist())):
                f.write(f"{i},{row[0]},{row[1]},{row[2]}\n")
    print(f"{args.kind} n={len(size)} capacity={capacity} (optimum = peak of live bytes)")


if __name__ == "__main__":
    main()
