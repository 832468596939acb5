"""Which exact solver settles a posed capacity, given the same wall time? emel against the peers.

A capacity ladder (emel's `optimal` and `auto`, OmniMalloc's supermalloc, MiniMalloc's
--minimize_capacity) is only as good as its decision solver: "do the buffers fit under C?".
Whether one capacity settles within a time limit is erratic from one capacity to the next, so a
single ladder's answer says more about which capacities it happened to try than about the solver.
This benchmark asks each solver the same question at many capacities, one capacity at a time:

  emel        mm.place(..., strategy="optimal", capacity=C, time_budget_ms=1000 * --seconds)
              (settled: size <= C; its wall time is usually well under the budget)
  omnimalloc  the decision solver inside OmniMalloc's supermalloc (omnimalloc._cpp.try_solve_many)
              with supermalloc's three preorders (WAT, TAW, TWA) and its flags, bound C + 1
              (exclusive), num_threads=2, timeout --seconds
  minimalloc  the binary at --capacity=C --timeout=--seconds (--minimalloc, $EMEL_MINIMALLOC or
              `minimalloc` on PATH; left out, and said so, when missing)

Capacities are --points evenly spaced between --from and --to times the lower bound (the peak of
live bytes), on each instance of MiniMalloc's challenging set named by --instances. For each
capacity the solvers run one after another in an order rotated by capacity, so machine noise
hits all alike. Every answer is re-checked by peers.check_placement (an independent overlap
checker); it settles C when it ends at or below C. The table gives, per instance and solver,
how many capacities settled, the lowest one, and the smallest answer (a solver may end below
the capacity it was asked). Prints the table and writes JSON.

    python bench/settle_rate.py [--instances D,J] [--points 16] [--from 1.03] [--to 1.06]
        [--seconds 2] [--minimalloc PATH] [--out bench/results/settle_rate.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import statistics
import sys
import time
from types import SimpleNamespace

import numpy as np

import peers  # noqa: E402  (also sets OPENBLAS_NUM_THREADS before NumPy work starts)
from _common import print_table, write_json  # noqa: E402


def emel_solver(seconds: float):
    import emel.memory as mm

    def solve(inst, capacity):
        p = mm.place(inst.lower, inst.upper, inst.size, strategy="optimal", capacity=capacity,
                     time_budget_ms=int(seconds * 1000))
        return np.asarray(p.offsets, dtype=np.int64), int(p.size), p.method
    return solve


def omnimalloc_solver(seconds: float):
    from omnimalloc._cpp import Allocation, Partition, try_solve_many
    from omnimalloc.allocators.supermalloc import DEFAULT_HEURISTICS
    cache = {}

    def solve(inst, capacity):
        if inst.name not in cache:  # built once per instance, outside the timed call's loop
            rows = peers.peer_rows(inst)
            base = Partition.from_allocations([
                Allocation(int(i), int(inst.size[r]), int(inst.lower[r]), int(inst.upper[r]))
                for i, r in enumerate(rows)])
            cache[inst.name] = rows, [base.reorder("".join(h)) for h in DEFAULT_HEURISTICS]
        rows, partitions = cache[inst.name]
        found = try_solve_many([p.with_bound(capacity + 1) for p in partitions], capacity + 1, None,
                               canonical=True, dominance=True, floor_inference=True,
                               monotonic_floor=True, decompose=True, timeout=seconds, num_threads=2)
        if found is None:  # no answer: out of time, or (never here) proven infeasible
            return None, None, "none"
        offsets = np.zeros(len(inst.size), dtype=np.int64)
        for a in found.allocations:
            offsets[rows[int(a.id)]] = int(a.offset)
        return offsets, None, "found"
    return solve


def minimalloc_solver(binary: str, seconds: float):
    contender = peers.minimalloc_contender(binary, SimpleNamespace(mm_timeout_s=seconds, peer_mem_gb=8))
    states = {}

    def solve(inst, capacity):
        if inst.name not in states:
            states[inst.name] = contender.prepare(inst)
        # the contender poses inst.capacity: here the capacity asked, not the file's
        offsets, _, status, _ = contender.run(dataclasses.replace(inst, capacity=capacity), states[inst.name])
        return offsets, None, status

    def close():  # the contender's temp dirs (CSV in and out), as peers.run_instance removes them
        for state in states.values():
            shutil.rmtree(state[1], ignore_errors=True)
    solve.close = close
    return solve


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", default="D,J")
    ap.add_argument("--points", type=int, default=16)
    ap.add_argument("--from", dest="lo", type=float, default=1.03)
    ap.add_argument("--to", dest="hi", type=float, default=1.06)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--minimalloc")
    ap.add_argument("--out", help="JSON path (default bench/results/settle_rate.json)")
    args = ap.parse_args(argv)
    if args.points < 1 or not (1.0 <= args.lo <= args.hi) or args.seconds <= 0:
        ap.error("need --points >= 1, 1 <= --from <= --to and --seconds > 0")

    instances = peers.load_instances(("challenging",), args.instances.split(","), (), (), 0)
    if not instances:
        ap.error(f"no challenging instance named {args.instances!r}")
    solvers, missing = {"emel": emel_solver(args.seconds)}, []
    try:
        solvers["omnimalloc"] = omnimalloc_solver(args.seconds)
    except ImportError as e:
        missing.append(f"omnimalloc ({e}); pip install -e '.[bench]'")
    binary = peers.find_minimalloc(args.minimalloc)
    if binary:
        solvers["minimalloc"] = minimalloc_solver(binary, args.seconds)
    else:
        missing.append("minimalloc (no binary: build github google/minimalloc, then --minimalloc BIN)")
    names = list(solvers)

    records, rows = [], []
    for inst in instances:
        steps = max(args.points - 1, 1)
        capacities = sorted({int(inst.bound * (args.lo + (args.hi - args.lo) * k / steps))
                             for k in range(args.points)})
        for k, capacity in enumerate(capacities):
            here = []  # this capacity's records
            for name in names[k % len(names):] + names[:k % len(names)]:
                t = time.perf_counter()
                offsets, reported, status = solvers[name](inst, capacity)
                seconds = time.perf_counter() - t
                settled, end = False, None
                if offsets is not None:  # an answer, re-checked; above the capacity it is not one
                    chk = peers.check_placement(inst.lower, inst.upper, inst.size, offsets, capacity, reported)
                    if not chk.valid:
                        raise SystemExit(f"{name} on {inst.name} at {capacity}: invalid answer {chk.problems[:3]}")
                    settled, end = not chk.over_capacity, chk.max_end
                here.append({"instance": inst.name, "bound": inst.bound, "capacity": capacity,
                             "ratio": capacity / inst.bound, "solver": name, "settled": settled,
                             "status": status, "size": end if settled else None, "seconds": seconds})
            records += here
            print(f"{inst.name} {capacity} ({capacity / inst.bound:.4f}): " + "  ".join(
                f"{r['solver']} {'yes' if r['settled'] else 'no '} {r['seconds']:.2f}s" for r in here), flush=True)
        for name in names:
            mine = [r for r in records if r["instance"] == inst.name and r["solver"] == name]
            won = [r for r in mine if r["settled"]]
            rows.append({"instance": inst.name, "solver": name, "settled": f"{len(won)}/{len(mine)}",
                         "lowest": min(r["ratio"] for r in won) if won else None,
                         "smallest": min(r["size"] for r in won) / inst.bound if won else None,
                         "median_s": statistics.median(r["seconds"] for r in mine),
                         "total_s": sum(r["seconds"] for r in mine)})
    print()
    print(f"capacities {args.lo:g}-{args.hi:g} x the bound, {args.points} per instance, "
          f"{args.seconds:g} s each")
    print_table(rows, [("instance", "instance", ""), ("solver", "solver", ""), ("settled", "settled", ""),
                       ("lowest", "lowest settled / bound", ".4f"), ("smallest", "smallest answer / bound", ".4f"),
                       ("median_s", "median s", ".2f"),
                       ("total_s", "total s", ".1f")])
    for m in missing:
        print(f"missing: {m}")
    for solve in solvers.values():
        if hasattr(solve, "close"):
            solve.close()
    write_json("settle_rate", {"settings": vars(args), "missing": missing, "records": records,
                               "table": rows}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
