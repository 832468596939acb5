"""How long planning takes: the C++ core against the pure-Python reference, both with
tmmu (the specification's algorithm, which the reference implements).

For every graph in data/graphs and each mode, time:
  - core:  the C++ pipeline alone (Plan.metrics["allocation_time_ns"]),
  - api:   emel.memory.plan() end to end (Python graph -> core -> Plan),
  - ref:   emel.memory.reference.plan() (pure Python),
each the median of --repeat runs, and check the two plans are identical (E0).
Prints a table and writes JSON (default bench/results/plan_time.json).

    python bench/plan_time.py [--repeat 7] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import emel.memory as mm
from emel.memory import reference

from _common import DATA


def graphs():
    return [(p.stem, json.loads(p.read_text())) for p in sorted((DATA / "graphs").glob("*.json"))]


def median_time(fn, repeat):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "plan_time.json"))
    args = ap.parse_args(argv)

    rows = []
    for name, doc in graphs():
        graph = mm.load_graph(doc)
        modes = ("inference",) if "inference" in name else mm.MODES
        for mode in modes:
            core_ns = []
            api_s, plan = median_time(lambda: mm.plan(graph, mode=mode, strategy="tmmu"), args.repeat)
            for _ in range(args.repeat):
                core_ns.append(mm.plan(graph, mode=mode, strategy="tmmu").metrics["allocation_time_ns"])
            ref_s, ref = median_time(lambda: reference.plan(doc, mode=mode), args.repeat)
            rows.append({
                "graph": name, "mode": mode, "tensors": len(doc["tensors"]),
                "nodes": len(doc["nodes"]),
                "core_ms": statistics.median(core_ns) / 1e6, "api_ms": api_s * 1e3,
                "reference_ms": ref_s * 1e3,
                "reference_over_core": ref_s * 1e9 / statistics.median(core_ns),
                "reference_over_api": ref_s / api_s,
                "total_bytes": plan.total_bytes,
                "lower_bound": plan.metrics["total_lower_bound"],
                "e0_identical": plan.to_dict() == ref,
            })

    header = (f"{'graph':<26}{'mode':<10}{'tensors':>8}{'core ms':>9}{'api ms':>9}"
              f"{'ref ms':>9}{'ref/core':>9}{'ref/api':>8}{'total MiB':>11}{'E0':>4}")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['graph']:<26}{r['mode']:<10}{r['tensors']:>8}{r['core_ms']:>9.3f}"
              f"{r['api_ms']:>9.2f}{r['reference_ms']:>9.2f}{r['reference_over_core']:>9.0f}"
              f"{r['reference_over_api']:>8.1f}{r['total_bytes'] / 2**20:>11.1f}"
              f"{'ok' if r['e0_identical'] else 'NO':>4}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"benchmark": "plan_time", "repeat": args.repeat,
                               "machine": {"python": platform.python_version(),
                                           "processor": platform.processor(),
                                           "machine": platform.machine()},
                               "rows": rows}, indent=1))
    print(f"\nwrote {out}")
    return 0 if all(r["e0_identical"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
