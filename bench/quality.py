"""How close each strategy gets to the lower bound (the peak of live bytes).

1. Every graph in data/graphs, each mode that applies, every strategy:
   bytes of the reusing arenas, their lower bound, the ratio, plan time.
2. ggml-alloc comparison (data/baselines/ggml-alloc.tsv, 32-byte
   alignment, one buffer): `auto` against ggml's gallocr bytes; training graphs
   with gradients mapped into the activations arena, as ggml's buffer holds them.
3. MiniMalloc's challenging set (11 tight instances posed at 1,048,576 bytes)
   and the idealloc traces (data/dsa): every strategy through place().

    python bench/quality.py [--budget-ms 200] [--dsa-budget-ms 10000] [--out FILE]
"""

from __future__ import annotations

import argparse
import csv
import time

import emel.memory as mm
from _common import DATA, print_table, write_json

STRATEGIES = [("tmmu", {}), ("greedy_by_size", {}), ("greedy_by_size", {"fit": "first"}),
              ("best_fit", {}), ("auto", {}), ("optimal", {})]


def label(strategy, kw):
    return strategy + ("/first" if kw.get("fit") == "first" else "")


def reusing(plan):
    arenas = [a for a in plan.arenas.values() if not a.persistent]
    return sum(a.size for a in arenas), sum(a.lower_bound for a in arenas)


def graphs_table(budget_ms):
    rows = []
    for path in sorted((DATA / "graphs").glob("*.json")):
        graph = mm.load_graph(path)
        modes = ("inference",) if "inference" in path.stem else mm.MODES
        for mode in modes:
            for strategy, kw in STRATEGIES:
                t = time.perf_counter()
                plan = mm.plan(graph, mode=mode, strategy=strategy, time_budget_ms=budget_ms, **kw)
                ms = (time.perf_counter() - t) * 1e3
                size, bound = reusing(plan)
                rows.append({"graph": path.stem, "mode": mode, "strategy": label(strategy, kw),
                             "bytes": size, "lower_bound": bound, "ratio": size / bound,
                             "plan_ms": ms})
    return rows


def ggml_table(budget_ms):
    baseline = {}
    with open(DATA / "baselines" / "ggml-alloc.tsv") as f:
        lines = [l for l in f if not l.startswith("#")]
    for row in csv.DictReader(lines, delimiter="\t"):
        baseline[row["file"]] = int(row["gallocr_bytes"])
    rows = []
    for name, ggml_bytes in baseline.items():
        path = DATA / "graphs" / f"{name}.json"
        if not path.exists():
            continue
        training = "training" in name
        kw = {"role_arenas": {"gradient": "activations"}} if training else {}
        best = {}
        for strategy in ("tmmu", "greedy_by_size", "best_fit", "auto"):
            plan = mm.plan(path, mode="backward" if training else "inference", strategy=strategy,
                           alignment=32, time_budget_ms=budget_ms, **kw)
            best[strategy] = plan.arenas["activations"]
        auto = best["auto"]
        rows.append({"graph": name, "ggml_bytes": ggml_bytes, "auto_bytes": auto.size,
                     "lower_bound": auto.lower_bound, "tmmu_bytes": best["tmmu"].size,
                     "greedy_bytes": best["greedy_by_size"].size,
                     "best_fit_bytes": best["best_fit"].size,
                     "saving": 1 - auto.size / ggml_bytes,
                     "auto_over_bound": auto.size / auto.lower_bound})
    return rows


def dsa_table(budget_ms):
    rows = []
    for folder, capacity in (("minimalloc-challenging", 1048576), ("idealloc", None)):
        for path in sorted((DATA / "dsa" / folder).glob("*.csv")):
            _, lower, upper, size = mm.read_buffers_csv(path)
            for strategy, kw in STRATEGIES:
                if strategy == "tmmu" and folder == "idealloc":
                    kw = {}
                t = time.perf_counter()
                p = mm.place(lower, upper, size, strategy=strategy, time_budget_ms=budget_ms,
                             capacity=capacity, **kw)
                s = time.perf_counter() - t
                rows.append({"instance": f"{folder[:9]}/{path.stem}", "buffers": len(size),
                             "strategy": label(strategy, kw), "bytes": p.size,
                             "lower_bound": p.lower_bound, "ratio": p.size / p.lower_bound,
                             "capacity": capacity,
                             "fits": None if capacity is None else p.size <= capacity,
                             "optimal": p.optimal, "method": p.method, "seconds": s})
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget-ms", type=int, default=200, help="auto/optimal budget on graphs")
    ap.add_argument("--dsa-budget-ms", type=int, default=10000, help="auto/optimal budget on DSA sets")
    ap.add_argument("--out")
    args = ap.parse_args(argv)

    graphs = graphs_table(args.budget_ms)
    print("== model graphs (data/graphs): reusing arenas (activations, gradients), 128-byte alignment ==")
    print_table(graphs, [("graph", "graph", ""), ("mode", "mode", ""), ("strategy", "strategy", ""),
                         ("bytes", "bytes", ","), ("lower_bound", "lower bound", ","),
                         ("ratio", "ratio", ".4f"), ("plan_ms", "ms", ".1f")])
    ggml = ggml_table(args.budget_ms)
    print("\n== against ggml-alloc (gallocr, 32-byte alignment; training: gradients in activations) ==")
    print_table(ggml, [("graph", "graph", ""), ("ggml_bytes", "ggml", ","), ("auto_bytes", "auto", ","),
                       ("lower_bound", "lower bound", ","), ("saving", "saving", ".2%"),
                       ("auto_over_bound", "auto/bound", ".4f"), ("greedy_bytes", "greedy", ","),
                       ("best_fit_bytes", "best_fit", ","), ("tmmu_bytes", "tmmu", ",")])
    dsa = dsa_table(args.dsa_budget_ms)
    print(f"\n== static allocation benchmarks (place(); auto/optimal budget {args.dsa_budget_ms} ms) ==")
    print_table(dsa, [("instance", "instance", ""), ("buffers", "buffers", ","),
                      ("strategy", "strategy", ""), ("bytes", "bytes", ","),
                      ("ratio", "bytes/bound", ".4f"), ("fits", "fits 1 MiB", ""),
                      ("optimal", "proven", ""), ("seconds", "s", ".2f")])
    solved = sorted({r["instance"] for r in dsa if r["fits"]})
    print(f"\nMiniMalloc instances placed within their 1,048,576-byte capacity: {len(solved)}/11: "
          + ", ".join(s.split("/")[1].split(".")[0] for s in solved))
    write_json("quality", {"budget_ms": args.budget_ms, "dsa_budget_ms": args.dsa_budget_ms,
                           "graphs": graphs, "ggml": ggml, "dsa": dsa}, args.out)


if __name__ == "__main__":
    main()
