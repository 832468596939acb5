"""Two builds of emel side by side on place(): wall time and answer, in one run.

A speed change of the placement code must keep every answer; this says by how much it is
faster, measured the only way a shared machine allows: both builds in turn, in the same run,
each call in a fresh process (so neither warms the other's caches), the order alternated
repeat by repeat, the median wall time kept. The answer (size, work, method and a hash of the
offsets) must be the same from both.

    python bench/place_ab.py --old /path/to/old/venv/bin/python          # this interpreter is "new"
    python bench/place_ab.py --old OLD --new NEW --cases uniform-1M:greedy_by_size,Y_1:default

A case is ``instance:strategy[@budget_ms]``; ``default`` is auto with no time_budget_ms (the
policy), ``auto@3000`` auto at 3,000 ms. Instances: the idealloc traces by name (S_1, Y_1,
pangu_2.6B), MiniMalloc's challenging ones by letter, and the synthetic traces as
``uniform-1M``, ``transformer-100k``, ``near_clique-20k`` (bench/synthetic_traces.py, seed 0;
``bursty-100k-s32``: seed 32; ``bursty-100k-s0-c8``: 8 burst centers), the
workload traces and perfect packings as ``family-buffers-sSEED`` (``pipeline_1f1b_noflush-21504-s3``,
``mixed-600-s0``; bench/workload_traces.py, bench/perfect_packing.py). The wall time is the
place() call only (the instance is built first, untimed); cpu is the process's CPU time over
the call (both threads of a greedy pass count).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from _common import print_table, write_json

HERE = Path(__file__).resolve().parent
DEFAULT_CASES = ("uniform-1M:greedy_by_size,transformer-1M:greedy_by_size,uniform-1M:auto@3000,"
                 "transformer-1M:auto@3000,uniform-100k:default,Y_1:default,S_1:default")

# Run in a fresh interpreter of the build under test: one place() call, its answer as JSON.
CHILD = r"""
import hashlib, json, sys, time
import numpy as np
import emel.memory as mm
from peers import load_instances
name, strategy = sys.argv[1], sys.argv[2]
import workload_traces, perfect_packing, synthetic_traces
fam, _, n = name.partition("-")
if fam in synthetic_traces.ALL_FAMILIES:  # family-buffers[-sSEED][-cCENTERS] (seed 0, bursty's 50 centers)
    n, _, centers = n.partition("-c")
    n, _, seed = n.partition("-s")
    n = int(float(n.replace("k", "e3").replace("M", "e6")))
    if centers:
        lower, upper, size = synthetic_traces.bursty(n, int(seed or 0), centers=int(centers))
        inst = type("Instance", (), {"lower": lower, "upper": upper, "size": size})
    else:
        inst = load_instances(["synthetic"], [], [n], [fam], int(seed or 0))[0]
elif fam in (*workload_traces.FAMILIES, "pipeline_1f1b_noflush", *perfect_packing.CUTS):  # family-buffers-sSEED
    size_, _, seed = n.partition("-s")
    if fam not in perfect_packing.CUTS:
        lower, upper, size = workload_traces.generate(fam, int(size_), int(seed))
    else:
        lower, upper, size = perfect_packing.cut_rectangle(int(size_), kind=fam, seed=int(seed))[:3]
    inst = type("Instance", (), {"lower": lower, "upper": upper, "size": size})
else:
    inst = load_instances(["challenging", "idealloc"], [name], [], [], 0)[0]
kw = {}
if "@" in strategy:
    strategy, budget = strategy.split("@")
    kw["time_budget_ms"] = int(budget)
if strategy == "default":
    strategy = "auto"
t0, c0 = time.perf_counter(), time.process_time()
p = mm.place(inst.lower, inst.upper, inst.size, strategy=strategy, **kw)
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
digest = hashlib.sha256(np.asarray(p.offsets, dtype=np.uint64).tobytes()).hexdigest()[:16]
print(json.dumps({"size": p.size, "ratio": p.size / p.lower_bound, "work": p.work, "method": p.method,
                  "offsets": digest, "wall_s": wall, "cpu_s": cpu, "module": mm.__file__}))
"""


def run_case(python: str, case: str) -> dict:
    name, strategy = case.split(":", 1)
    # bench/ on the child's path (peers.load_instances), as for a script run from it.
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
    out = subprocess.run([python, "-c", CHILD, name, strategy], capture_output=True, text=True,
                         env={**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": path})
    if out.returncode != 0:
        raise SystemExit(f"{python} failed on {case}:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="the python of the build to compare against")
    ap.add_argument("--new", default=sys.executable, help="the python of the build under test (this one)")
    ap.add_argument("--cases", default=DEFAULT_CASES, help="comma-separated instance:strategy[@budget]")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--work-may-differ", action="store_true",
                    help="a change of what a pass charges: compare size, method and offsets only, and print "
                         "both builds' size and work")
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/place_ab.json)")
    args = ap.parse_args(argv)
    load_before = os.getloadavg()[0]
    rows = []
    for case in [c for c in args.cases.split(",") if c]:
        runs = {"old": [], "new": []}
        for r in range(args.repeats):
            for which in (("old", "new") if r % 2 == 0 else ("new", "old")):
                runs[which].append(run_case(getattr(args, which), case))
        old, new = runs["old"], runs["new"]
        fields = ("size", "method", "offsets") + (() if args.work_may_differ else ("work",))
        same = all(tuple(a[f] for f in fields) == tuple(old[0][f] for f in fields) for a in old + new)
        row = {"case": case, "ratio": new[0]["ratio"], "method": new[0]["method"],
               "old_s": statistics.median(a["wall_s"] for a in old),
               "new_s": statistics.median(a["wall_s"] for a in new),
               "old_cpu": statistics.median(a["cpu_s"] for a in old),
               "new_cpu": statistics.median(a["cpu_s"] for a in new),
               "same": "yes" if same else "NO", "runs": runs}
        row["speedup"] = row["old_s"] / row["new_s"]
        rows.append(row)
        row.update(old_size=old[0]["size"], new_size=new[0]["size"], old_work=old[0]["work"],
                   new_work=new[0]["work"])
        extra = (f"  size {row['old_size']} -> {row['new_size']}, work {row['old_work'] / 1e6:.0f}M -> "
                 f"{row['new_work'] / 1e6:.0f}M" if args.work_may_differ else "")
        print(f"{case:32s} old {row['old_s']:6.2f} s  new {row['new_s']:6.2f} s  same answer: {row['same']}{extra}",
              flush=True)
    print()
    print_table(rows, [("case", "case", ""), ("ratio", "size/bound", ".4f"), ("old_s", "old s", ".2f"),
                       ("new_s", "new s", ".2f"), ("speedup", "x", ".2f"), ("old_cpu", "old cpu", ".2f"),
                       ("new_cpu", "new cpu", ".2f"), ("same", "same answer", "")])
    load_after = os.getloadavg()[0]
    print(f"load average {load_before:.1f} -> {load_after:.1f}; median of {args.repeats} per build")
    write_json("place_ab", {"command": "python bench/place_ab.py " + " ".join(argv or sys.argv[1:]),
                            "old": args.old, "new": args.new, "load_average": [load_before, load_after],
                            "rows": rows}, args.out)
    # Where the work may differ, auto's budget buys other passes: its answer may differ too.
    must_agree = [r for r in rows if not (args.work_may_differ and r["case"].split(":")[1].split("@")[0]
                                          in ("default", "auto"))]
    if any(r["same"] != "yes" for r in must_agree):
        raise SystemExit("an answer differs between the builds")


if __name__ == "__main__":
    main()
