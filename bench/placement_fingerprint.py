"""A fingerprint of place(): one hash over the offsets, end, work units and method of every strategy.

A behaviour-preserving change of the placement code (src/emel/memory/placement/) must leave the
fingerprint identical: it runs place() for every strategy (and both fits of greedy_by_size) at a
few budgets, and auto / optimal with a capacity target, over the data/dsa instances and seeded
random ones, and hashes what each call returns (offsets, end, work, method, lower bound, proof).
Work units are deterministic, so the hash does not depend on the machine or its load.

    python bench/placement_fingerprint.py [--quick] [--out results.json]

--quick skips the three idealloc traces (tens of thousands of buffers; most of the run time).
Prints one line per instance (its hash) and the total; the JSON keeps them too.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time

import numpy as np

from _common import DATA, write_json
from emel.memory import STRATEGIES, place, read_buffers_csv

BUDGETS = (0, 30, 300)          # work budgets (ms-equivalents) of auto and optimal
POLICY = None                   # and the default-budget policy, on the small instances


def _random(n: int, seed: int, max_len: int):
    rng = np.random.default_rng(seed)
    lower = rng.integers(0, n // 2, n)
    upper = lower + rng.integers(1, max_len, n)
    size = rng.integers(1, 1 << 12, n) * rng.choice([1, 16, 256], n)
    return lower, upper, size


def instances(quick: bool):
    for path in sorted((DATA / "dsa" / "minimalloc-challenging").glob("*.csv")):
        _, lo, hi, sz = read_buffers_csv(path)
        yield path.stem.split(".")[0], (lo, hi, sz), int(path.stem.split(".")[1])
    for n, seed, max_len in ((40, 1, 12), (200, 2, 30), (1000, 3, 60), (3000, 4, 80)):
        yield f"random_{n}_{seed}", _random(n, seed, max_len), None
    if not quick:
        for name in ("pangu_2.6B", "S_1", "Y_1"):
            _, lo, hi, sz = read_buffers_csv(DATA / "dsa" / "idealloc" / f"{name}.csv")
            yield name, (lo, hi, sz), None


def calls(n: int, capacity):
    """(strategy, keyword arguments) of every call made on an instance of n buffers."""
    for s in STRATEGIES:
        if s in ("auto", "optimal"):
            budgets = BUDGETS + ((POLICY,) if n <= 500 else ())
            for budget in budgets:
                yield s, {"time_budget_ms": budget}
            if capacity is not None:
                yield s, {"time_budget_ms": 100, "capacity": capacity}
        elif s == "greedy_by_size":
            yield s, {"fit": "best"}
            yield s, {"fit": "first"}
        else:
            yield s, {}


def fingerprint(lo, hi, sz, n: int, capacity) -> tuple[str, list]:
    h = hashlib.sha256()
    rows = []
    for strategy, kw in calls(n, capacity):
        p = place(lo, hi, sz, strategy=strategy, alignment=1, **kw)
        offsets = np.asarray(p.offsets, dtype=np.uint64)
        h.update(strategy.encode() + repr(sorted(kw.items())).encode())
        h.update(offsets.tobytes())
        record = (int(p.size), int(p.work), p.method, int(p.lower_bound), int(p.proven_bound), bool(p.optimal))
        h.update(repr(record).encode())
        rows.append({"strategy": strategy, **{k: v for k, v in kw.items()}, "size": record[0],
                     "work": record[1], "method": record[2], "proven_bound": record[4], "optimal": record[5]})
    return h.hexdigest()[:16], rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="skip the idealloc traces")
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/placement_fingerprint.json)")
    args = ap.parse_args(argv)
    total = hashlib.sha256()
    per = {}
    detail = {}
    t0 = time.perf_counter()
    for name, (lo, hi, sz), capacity in instances(args.quick):
        t = time.perf_counter()
        digest, rows = fingerprint(lo, hi, sz, len(sz), capacity)
        per[name] = digest
        detail[name] = rows
        total.update(name.encode() + digest.encode())
        print(f"{name:14s} {len(sz):7d} buffers  {digest}  ({time.perf_counter() - t:.1f} s)", flush=True)
    print(f"fingerprint {total.hexdigest()[:16]}  ({time.perf_counter() - t0:.0f} s)")
    command = "python bench/placement_fingerprint.py " + " ".join(argv or sys.argv[1:])
    write_json("placement_fingerprint", {"command": command.strip(), "fingerprint": total.hexdigest()[:16],
                                         "instances": per, "calls": detail}, args.out)


if __name__ == "__main__":
    main()
