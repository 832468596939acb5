"""Perfect packings: placement instances cut from a full rectangle, so the optimum is known.

A rectangle of ``steps`` instants by ``height`` bytes is cut, on a grain, into ``n`` pieces,
each piece a buffer (its instants are its lifetime, its bytes its size). Every instant of the
rectangle is full, so the peak of live bytes is ``height``, no placement can end below it, and
the cut itself ends there: the optimum equals the lower bound (issue 32's open corner). Cuts:

- guillotine: a piece split in two along time or along bytes (a straight cut through it);
- pinwheel: a piece split into five, four arms around a centre, which no sequence of straight
  cuts makes (non-guillotine); ``pinwheel`` is the share of splits made so.

    python bench/perfect_packing.py --n 600 --budgets 1000,4000 [--pinwheel 0.3] [--seed 0]
    python bench/perfect_packing.py --n 600 --write packing-600.csv    # id,lower,upper,size

The benchmark places each instance with emel auto at the budgets given and prints size over
the optimum and wall time; a JSON goes to bench/results/perfect_packing.json.
"""

from __future__ import annotations

import argparse
import heapq
import sys
import time

import numpy as np


def cut(n: int, seed: int = 0, pinwheel: float = 0.3, steps: int | None = None, height: int | None = None,
        grain: int = 64):
    """(lower, upper, size, offsets, height): n buffers tiling [0, steps) x [0, height) exactly.

    ``offsets`` is the packing the pieces came from (a placement ending at ``height``); sizes
    are multiples of ``grain`` bytes. Deterministic in (n, seed, pinwheel, steps, height, grain).
    """
    if n < 1:
        raise ValueError("n must be at least 1")
    rng = np.random.default_rng([seed, 32, 5])
    steps = steps or max(8, 4 * n)
    height = height or max(8, 4 * n)       # in grains
    # Largest piece first (by area, then position: a fixed order), split until there are n.
    pieces = [(-steps * height, 0, 0, steps, height)]   # (-area, t0, y0, t1, y1)
    done = []
    while pieces and len(pieces) + len(done) < n:
        _, t0, y0, t1, y1 = heapq.heappop(pieces)
        w, h = t1 - t0, y1 - y0
        made = None
        # a pinwheel makes four more pieces: only while four more are wanted
        if n - len(pieces) - len(done) >= 5 and w >= 3 and h >= 3 and rng.random() < pinwheel:
            a, a2 = sorted(rng.choice(np.arange(t0 + 1, t1), 2, replace=False).tolist())
            b, b2 = sorted(rng.choice(np.arange(y0 + 1, y1), 2, replace=False).tolist())
            made = [(t0, y0, a2, b), (a2, y0, t1, b2), (a, b2, t1, y1), (t0, b, a, y1), (a, b, a2, b2)]
        elif w >= 2 or h >= 2:
            along_time = w >= 2 and (h < 2 or rng.random() < w / (w + h))
            if along_time:
                c = int(rng.integers(t0 + 1, t1))
                made = [(t0, y0, c, y1), (c, y0, t1, y1)]
            else:
                c = int(rng.integers(y0 + 1, y1))
                made = [(t0, y0, t1, c), (t0, c, t1, y1)]
        if made is None:                       # a single cell: it stays whole
            done.append((t0, y0, t1, y1))
            continue
        for q in made:
            heapq.heappush(pieces, (-(q[2] - q[0]) * (q[3] - q[1]), *q))
    rects = sorted(done + [p[1:] for p in pieces])
    lower = np.array([r[0] for r in rects], np.int64)
    upper = np.array([r[2] for r in rects], np.int64)
    size = np.array([(r[3] - r[1]) * grain for r in rects], np.int64)
    offsets = np.array([r[1] * grain for r in rects], np.int64)
    return lower, upper, size, offsets, height * grain


def write_csv(path, lower, upper, size) -> None:
    with open(path, "w") as f:
        f.write("id,lower,upper,size\n")
        for i, (lo, hi, s) in enumerate(zip(lower, upper, size)):
            f.write(f"{i},{lo},{hi},{s}\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", default="100,300,600", help="comma-separated buffer counts")
    ap.add_argument("--seeds", default="0", help="comma-separated seeds")
    ap.add_argument("--pinwheel", type=float, default=0.3, help="share of five-piece (non-guillotine) splits")
    ap.add_argument("--budgets", default="1000,4000", help="emel auto budgets in ms ('default': none given)")
    ap.add_argument("--write", default=None, help="write the (single) instance as CSV and stop")
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/perfect_packing.json)")
    args = ap.parse_args(argv)
    ns = [int(x) for x in args.n.split(",")]
    seeds = [int(x) for x in args.seeds.split(",")]
    if args.write:
        lower, upper, size, _, h = cut(ns[0], seeds[0], args.pinwheel)
        write_csv(args.write, lower, upper, size)
        print(f"wrote {args.write}: {len(size)} buffers, optimum {h}")
        return
    import emel.memory as mm
    from _common import print_table, write_json
    budgets = [None if b == "default" else int(b) for b in args.budgets.split(",")]
    rows = []
    for n in ns:
        for seed in seeds:
            lower, upper, size, _, h = cut(n, seed, args.pinwheel)
            row = {"instance": f"packing-{n}-s{seed}", "buffers": len(size), "optimum": h}
            for b in budgets:
                kw = {} if b is None else {"time_budget_ms": b}
                t0 = time.perf_counter()
                p = mm.place(lower, upper, size, strategy="auto", **kw)
                key = "default" if b is None else str(b)
                row[f"auto@{key}"] = p.size / h
                row[f"s@{key}"] = time.perf_counter() - t0
                row[f"proven@{key}"] = p.optimal
            rows.append(row)
            print(row, flush=True)
    cols = [("instance", "instance", "s"), ("buffers", "buffers", "d"), ("optimum", "optimum", ",d")]
    for b in budgets:
        key = "default" if b is None else str(b)
        cols += [(f"auto@{key}", f"auto@{key} / opt", ".4f"), (f"s@{key}", "s", ".2f")]
    print()
    print_table(rows, cols)
    command = "python bench/perfect_packing.py " + " ".join(argv or sys.argv[1:])
    write_json("perfect_packing", {"command": command.strip(), "rows": rows}, args.out)


if __name__ == "__main__":
    main()
