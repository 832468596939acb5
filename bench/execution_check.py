"""How long the execution check takes on the model graphs of data/graphs.

For every graph in data/graphs, every mode and every strategy: plan,
apply (Arenas, no zeroing) and verify_execution, timing the apply and the
walk, with the bytes the walk wrote and checked. Plans with identical arrays
are walked once, as tests/test_execution_check.py does.

    python bench/execution_check.py [--budget-ms 20] [--out FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import time

import numpy as np

import emel.memory as mm
from _common import DATA, print_table, write_json

GiB = 2**30


def signature(plan):
    h = hashlib.sha256()
    for arr in (plan.offsets, plan.births, plan.deaths, plan._core.arena_of, plan._core.inplace_of,
                np.asarray(plan._arena_sizes, dtype=np.uint64)):
        h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget-ms", type=int, default=20)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    rows = []
    for path in sorted((DATA / "graphs").glob("*.json")):
        graph = mm.load_graph(path)
        row = {"graph": path.stem, "cases": 0, "distinct": 0, "arena_bytes": 0,
               "bytes_written": 0, "bytes_checked": 0, "apply_s": 0.0, "walk_s": 0.0}
        seen = set()
        for mode in mm.MODES:
            for strategy in mm.STRATEGIES:
                plan = mm.plan(graph, mode=mode, strategy=strategy, time_budget_ms=args.budget_ms)
                row["cases"] += 1
                sig = signature(plan)
                if sig in seen:
                    continue
                seen.add(sig)
                start = time.perf_counter()
                arenas = mm.Arenas(plan, zero=False)
                mid = time.perf_counter()
                report = mm.verify_execution(plan, arenas)
                end = time.perf_counter()
                del arenas
                row["distinct"] += 1
                row["arena_bytes"] += plan.total_bytes
                row["bytes_written"] += report.bytes_written
                row["bytes_checked"] += report.bytes_checked
                row["apply_s"] += mid - start
                row["walk_s"] += end - mid
        row["gib_per_s"] = (row["bytes_written"] + row["bytes_checked"]) / GiB / row["walk_s"]
        rows.append(row)
    total = {k: sum(r[k] for r in rows) for k in ("cases", "distinct", "arena_bytes", "bytes_written",
                                                   "bytes_checked", "apply_s", "walk_s")}
    total["graph"] = "all"
    total["gib_per_s"] = (total["bytes_written"] + total["bytes_checked"]) / GiB / total["walk_s"]
    table = [{**r, **{k: r[k] / GiB for k in ("arena_bytes", "bytes_written", "bytes_checked")}}
             for r in rows + [total]]
    print_table(table, [
        ("graph", "graph", ""), ("cases", "cases", "d"), ("distinct", "distinct plans", "d"),
        ("arena_bytes", "arenas GiB", ".2f"), ("bytes_written", "written GiB", ".2f"),
        ("bytes_checked", "checked GiB", ".2f"), ("apply_s", "apply s", ".2f"),
        ("walk_s", "walk s", ".2f"), ("gib_per_s", "GiB/s", ".2f"),
    ])
    write_json("execution_check", {"budget_ms": args.budget_ms, "rows": rows, "total": total},
               args.out)


if __name__ == "__main__":
    main()
