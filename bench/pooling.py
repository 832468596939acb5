"""The pooling allocator on the model graphs' allocate/free traces.

For every graph in data/graphs and each mode that applies, the trace of
the reusing arenas (storage tensors allocated when born, freed after their
last step, in execution order; persistent arenas left out) is replayed
against the exact-size pools (max 16 buffers per size) and the best-fit pool.
Reported: fresh host allocations against one allocation per tensor (and the
share avoided), the pool's peak host bytes against the static plan's arena
bytes (tmmu and auto), and the replay time.

    python bench/pooling.py [--max-per-size 16] [--out FILE]
"""

from __future__ import annotations

import argparse
import time

import emel.memory as mm
from emel.memory import pooling
from _common import DATA, print_table, write_json

MiB = 2**20


def reusing_bytes(plan):
    return sum(a.size for a in plan.arenas.values() if not a.persistent)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-per-size", type=int, default=pooling.DEFAULT_MAX_PER_SIZE)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    rows = []
    for path in sorted((DATA / "graphs").glob("*.json")):
        graph = mm.load_graph(path)
        modes = ("inference",) if "inference" in path.stem else mm.MODES
        for mode in modes:
            plan = mm.plan(graph, mode=mode)
            static_auto = reusing_bytes(mm.plan(graph, mode=mode, strategy="auto"))
            row = {"graph": path.stem, "mode": mode, "static_tmmu": reusing_bytes(plan),
                   "static_auto": static_auto}
            for policy in pooling.POLICIES:
                start = time.perf_counter()
                r = pooling.replay(plan, policy, max_per_size=args.max_per_size)
                elapsed = time.perf_counter() - start
                row["tensors"] = r["tensors"]
                row[f"{policy}_fresh"] = r["allocated"]
                row[f"{policy}_avoided"] = 1 - r["allocated"] / r["tensors"]
                row[f"{policy}_peak"] = r["peak_bytes"]
                row[f"{policy}_peak_vs_auto"] = r["peak_bytes"] / static_auto
                row[f"{policy}_ms"] = elapsed * 1000
            rows.append(row)

    table = [{**r, **{k: r[k] / MiB for k in ("static_tmmu", "static_auto", "exact_peak",
                                                "best_fit_peak")}} for r in rows]
    print_table(table, [
        ("graph", "graph", ""), ("mode", "mode", ""), ("tensors", "tensors", "d"),
        ("exact_fresh", "exact fresh", "d"), ("exact_avoided", "avoided", ".1%"),
        ("best_fit_fresh", "best-fit fresh", "d"), ("best_fit_avoided", "avoided", ".1%"),
        ("exact_peak", "exact peak MiB", ".1f"), ("best_fit_peak", "best-fit peak MiB", ".1f"),
        ("static_tmmu", "tmmu MiB", ".1f"), ("static_auto", "auto MiB", ".1f"),
        ("exact_peak_vs_auto", "exact/auto", ".2f"), ("best_fit_peak_vs_auto", "best-fit/auto", ".2f"),
    ])
    total = sum(r["tensors"] for r in rows)
    summary = {policy: 1 - sum(r[f"{policy}_fresh"] for r in rows) / total
               for policy in pooling.POLICIES}
    print(f"\nfresh allocations avoided over all traces: exact {summary['exact']:.1%}, "
          f"best fit {summary['best_fit']:.1%} ({total} tensors)")
    write_json("pooling", {"max_per_size": args.max_per_size, "rows": rows,
                           "avoided_overall": summary}, args.out)


if __name__ == "__main__":
    main()
