"""How many perfect packings one strategy and budget place at the bound, over many seeds.

The cuts of bench/perfect_packing.py have a known optimum (the peak of live bytes), so a sweep over
seeds counts the instances placed at it, with the work and wall time each took; run it with an
old build's Python and a new one's to compare two versions of a search on the same instances.

    python bench/perfect_sweep.py --sizes 600 --seeds 24-63 --strategy optimal --budget-ms 4000

Prints one row per cut (placed at the bound, at most 1.02, the worst ratio, work units (about
900,000 a millisecond) and wall time summed) and writes bench/results/perfect_sweep.json with
every instance's row.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import emel.memory as mm
from _common import print_table, write_json  # bench/, the script's own folder
from peers import parse_seeds, parse_sizes
from perfect_packing import CUTS, cut_rectangle


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="600", help="buffers of the cuts")
    ap.add_argument("--seeds", default="0-7", help='e.g. "24-63" or "0,3,5"')
    ap.add_argument("--cuts", default=",".join(CUTS))
    ap.add_argument("--strategy", default="auto")
    ap.add_argument("--budget-ms", type=int, default=None, help="time_budget_ms (default: the policy's)")
    ap.add_argument("--capacity", action="store_true", help="pose the optimum as place()'s capacity")
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/perfect_sweep.json)")
    args = ap.parse_args(argv)

    rows, summary = [], []
    for n in parse_sizes(args.sizes):
        for kind in [c for c in args.cuts.split(",") if c]:
            group = []
            for seed in parse_seeds(args.seeds):
                lower, upper, size, _, optimum = cut_rectangle(n, kind=kind, seed=seed)
                start = time.perf_counter()
                p = mm.place(lower, upper, size, strategy=args.strategy, time_budget_ms=args.budget_ms,
                             capacity=optimum if args.capacity else None)
                wall = time.perf_counter() - start
                group.append({"n": n, "cut": kind, "seed": seed, "ratio": p.size / optimum,
                              "proven": bool(p.optimal and p.size == optimum), "work": int(p.work),
                              "wall_s": wall, "method": p.method})
            rows += group
            ratios = np.array([r["ratio"] for r in group])
            summary.append({"n": n, "cut": kind, "instances": len(group),
                            "at_bound": int(sum(r["proven"] for r in group)),
                            "at_most_1_02": int((ratios <= 1.02).sum()), "worst": float(ratios.max()),
                            "work_g": sum(r["work"] for r in group) / 1e9,
                            "wall_s": sum(r["wall_s"] for r in group),
                            "max_wall_s": max(r["wall_s"] for r in group)})
    print_table(summary, [("n", "buffers", "d"), ("cut", "cut", "s"), ("instances", "instances", "d"),
                          ("at_bound", "at bound", "d"), ("at_most_1_02", "<= 1.02", "d"),
                          ("worst", "worst", ".4f"), ("work_g", "work (10^9 units)", ".1f"),
                          ("wall_s", "wall (s)", ".2f"), ("max_wall_s", "max wall (s)", ".2f")])
    write_json("perfect_sweep", {"command": "python bench/perfect_sweep.py " + " ".join(argv or sys.argv[1:]),
                                 "summary": summary, "instances": rows}, args.out)


if __name__ == "__main__":
    main()
