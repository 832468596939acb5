"""Every model graph (data/graphs) x mode x strategy through emel-sweep's engine (worker processes).

    python bench/sweep.py [--modes inference,forward,backward] [-j N] [-o OUT.json]

Prints the sweep's summary table (size / lower bound of the non-persistent
arenas, and planning time per cell) and writes every row to
bench/results/sweep.json.
"""

from __future__ import annotations

import argparse
import os
import time

from _common import DATA, write_json  # noqa: E402

from emel.memory import MODES, STRATEGIES, sweep  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("-o", "--out")
    args = p.parse_args()
    paths = sweep.graph_files(str(DATA / "graphs"))
    modes, strategies = args.modes.split(","), args.strategies.split(",")
    start = time.perf_counter()
    rows = sweep.sweep(paths, modes, strategies, jobs=args.jobs)
    elapsed = time.perf_counter() - start
    print(sweep.summary_table(rows))
    print(f"{len(rows)} plans in {elapsed:.1f} s, {args.jobs} workers")
    write_json("sweep", {"modes": modes, "strategies": strategies, "jobs": args.jobs,
                         "seconds": elapsed, "rows": rows}, args.out)


if __name__ == "__main__":
    main()
