"""One hash over everything the planner decides, to prove a refactor changed nothing.

Plans every graph in data/graphs in every mode and strategy (greedy_by_size
with both fits), and places every data/dsa instance through place() with
every strategy, then prints one SHA-256 over the outputs: the plan documents
(offsets, sizes, arenas, metrics, hashes), each arena's method, work units,
optimality and proven bound, and place()'s offsets, size and info. Wall times
are left out. Budgets are work units, so the hash is the same on any machine.

    python scripts/behaviour_fingerprint.py            # the hash
    python scripts/behaviour_fingerprint.py --verbose  # one hash per case too
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import sys

from emel.memory import plan
from emel.memory.placement import place, read_buffers_csv

DATA = pathlib.Path(__file__).resolve().parent.parent / "data"
MODES = ("inference", "forward", "backward")
STRATEGIES = ("tmmu", "greedy_by_size", "best_fit", "auto", "optimal")
# Budgets small enough that the whole run takes about a minute; the default
# policy (None) is covered on the graphs, whose instances are small.
GRAPH_BUDGETS = (None, 20)
DSA_BUDGET_MS = 20


def strategy_cases():
    for strategy in STRATEGIES:
        fits = ("best", "first") if strategy == "greedy_by_size" else ("best",)
        for fit in fits:
            yield strategy, fit


def graph_cases():
    for path in sorted((DATA / "graphs").glob("*.json")):
        for mode in MODES:
            for strategy, fit in strategy_cases():
                budgets = GRAPH_BUDGETS if strategy in ("auto", "optimal") else (None,)
                for budget in budgets:
                    name = f"graph {path.stem} {mode} {strategy} fit={fit} budget={budget}"
                    p = plan(str(path), mode=mode, strategy=strategy, fit=fit, time_budget_ms=budget)
                    rows = [{k: r[k] for k in ("name", "method", "work", "optimal", "proven_bound",
                                                "lower_bound", "peak_live_bytes")}
                            for r in p._arena_rows]
                    yield name, {"plan": p.to_dict(), "arenas": rows}


def dsa_cases():
    for path in sorted((DATA / "dsa").glob("*/*.csv")):
        _ids, lower, upper, size = read_buffers_csv(path)
        for strategy, fit in strategy_cases():
            name = f"dsa {path.parent.name}/{path.stem} {strategy} fit={fit}"
            r = place(lower, upper, size, strategy, fit=fit, time_budget_ms=DSA_BUDGET_MS)
            yield name, {"offsets": hashlib.sha256(r.offsets.tobytes()).hexdigest(), "size": r.size,
                         "method": r.method, "lower_bound": r.lower_bound, "optimal": r.optimal,
                         "proven_bound": r.proven_bound, "work": r.work}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--verbose", action="store_true", help="print each case's hash too")
    args = ap.parse_args(argv)
    total = hashlib.sha256()
    count = 0
    for cases in (graph_cases(), dsa_cases()):
        for name, out in cases:
            text = json.dumps(out, sort_keys=True, default=str).encode()
            digest = hashlib.sha256(text).hexdigest()
            total.update(name.encode() + b"\0" + digest.encode() + b"\n")
            count += 1
            if args.verbose:
                print(f"{digest[:16]}  {name}")
    print(f"{count} cases  fingerprint {total.hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
