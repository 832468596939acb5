"""load_graph on big graphs: the dict path, the JSON file path, and
Graph.from_arrays beside them for reference.

The graph: N tensors, a chain of N/2 nodes each reading the previous
activation and one parameter (shape [64, 64], float32). Each case runs in a
fresh Python process: the time (wall and CPU) of the load alone, and the peak
memory it adds to what the process held before (the document, for the dict
path; nothing but the interpreter and NumPy, for the JSON path, whose text
is read and parsed inside the load).

    python bench/load_graph.py [--tensors 1000000] [--repeat 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import print_table, write_json

MiB = 2**20
ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, resource, sys, time
import numpy as np
import emel.memory as mm

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()

def document(n):
    tensors, nodes = [], []
    for i in range(n // 2):
        tensors.append({"id": f"w{i}", "shape": [64, 64], "dtype": "float32", "role": "parameter"})
        tensors.append({"id": f"a{i}", "shape": [64, 64], "dtype": "float32", "role": "activation"})
    for i in range(1, n // 2):
        nodes.append({"id": f"n{i}", "op": "matmul", "inputs": [f"a{i - 1}", f"w{i}"], "outputs": [f"a{i}"]})
    return {"format": "emel.graph/1", "name": "chain", "tensors": tensors, "nodes": nodes}

case, n, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if case == "write":
    with open(path, "w") as f:
        json.dump(document(n), f)
    sys.exit(0)
if case == "dict":
    source = document(n)
elif case == "json":
    source = path
else:  # from_arrays: the same chain as index arrays
    half = n // 2
    acts, params = np.arange(1, n, 2, dtype=np.uint64), np.arange(0, n, 2, dtype=np.uint64)
    ins = np.empty(2 * (half - 1), np.uint64)
    ins[0::2], ins[1::2] = acts[:-1], params[1:]
    source = (np.full(n, 64 * 64 * 4, np.uint64), (np.arange(0, 2 * half - 1, 2, dtype=np.uint64), ins),
              (np.arange(half, dtype=np.uint64), acts[1:]))
before = rss()
wall, cpu = time.perf_counter(), time.process_time()
g = mm.load_graph(source) if case != "from_arrays" else mm.Graph.from_arrays(*source)
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
assert len(g) == n
print(json.dumps({"wall_s": wall, "cpu_s": cpu, "added_bytes": max(peak, rss()) - before}))
"""


def run(case: str, n: int, path: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "python"),
                                                                      os.environ.get("PYTHONPATH")])),
           "OPENBLAS_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", CHILD, case, str(n), path], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out) if out.strip() else {}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tensors", type=int, default=10**6)
    ap.add_argument("--repeat", type=int, default=3, help="runs per case; the best is reported")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "graph.json")
        run("write", args.tensors, path)
        size = os.path.getsize(path)
        for case in ("dict", "json", "from_arrays"):
            runs = [run(case, args.tensors, path) for _ in range(args.repeat)]
            best = min(runs, key=lambda r: r["wall_s"])
            rows.append({"case": case, "tensors": args.tensors, "wall_s": best["wall_s"],
                         "cpu_s": min(r["cpu_s"] for r in runs),
                         "added_mib": min(r["added_bytes"] for r in runs) / MiB,
                         "runs_wall_s": [round(r["wall_s"], 3) for r in runs]})
    print(f"load_graph, {args.tensors} tensors (JSON file {size / MiB:.0f} MiB); "
          f"best of {args.repeat}, load {os.getloadavg()[0]:.1f}\n")
    print_table(rows, [("case", "path", ""), ("tensors", "tensors", "d"), ("wall_s", "wall s", ".2f"),
                       ("cpu_s", "CPU s", ".2f"), ("added_mib", "peak added MiB", ".0f")])
    write_json("load_graph", {"tensors": args.tensors, "json_bytes": size, "rows": rows}, args.out)


if __name__ == "__main__":
    main()
