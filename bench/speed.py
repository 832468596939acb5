"""Planning time against graph size, per strategy: C++ against the reference.

Synthetic graphs built from NumPy arrays (Graph.from_arrays), two families:
  - residual: a chain where ~30% of nodes also read a tensor 1-8 steps back,
    random sizes, ~20% of outputs in-place capable;
  - transformer: a stack of decoder layers (norm, q/k/v, scores, softmax in
    place, attention, projection, residual add, SwiGLU MLP, residual add).
Sizes 10^3 ... 10^6 tensors. For each: core = the C++ pipeline alone,
api = emel.memory.plan() from the array graph, ref = the pure-Python
reference (up to --ref-max tensors), and the log-log slope of api time
against size (1.0 = linear).

    python bench/speed.py [--max 1000000] [--ref-max 10000] [--out FILE]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

import emel.memory as mm
from _common import print_table, write_json
from emel.memory import reference


def residual_graph(n_tensors: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    n = n_tensors - 1
    sizes = rng.integers(1, 1 << 20, size=n + 1, dtype=np.uint64)
    back = np.maximum(0, np.arange(n) - rng.integers(1, 9, size=n))
    extra = rng.random(n) < 0.3
    counts = 1 + extra.astype(np.int64)
    in_start = np.concatenate([[0], np.cumsum(counts)])
    in_index = np.empty(int(in_start[-1]), dtype=np.uint64)
    in_index[in_start[:-1]] = np.arange(n)
    in_index[in_start[:-1][extra] + 1] = back[extra]
    roles = np.full(n + 1, mm.graph.ROLES.index("activation"), dtype=np.uint8)
    roles[0] = mm.graph.ROLES.index("input")
    return mm.Graph.from_arrays(sizes, (in_start, in_index), (np.arange(n + 1), np.arange(1, n + 1)),
                                roles=roles, can_inplace=rng.random(n + 1) < 0.2, outputs=[n],
                                name=f"residual-{n_tensors}")


def transformer_graph(n_tensors: int, d: int = 512, seq: int = 256, heads: int = 8):
    """Decoder layers until about n_tensors tensors (weights included)."""
    act, wide, score = seq * d * 4, seq * 4 * d * 4, heads * seq * seq * 4
    sizes, roles, inplace, nodes = [], [], [], []

    def tensor(size, role="activation", can_inplace=False):
        sizes.append(size)
        roles.append(mm.graph.ROLES.index(role))
        inplace.append(can_inplace)
        return len(sizes) - 1

    def node(inputs, *outs):
        nodes.append((inputs, list(outs)))
        return outs[0] if len(outs) == 1 else outs

    x = tensor(act, "input")
    while len(sizes) < n_tensors - 20:
        w = {k: tensor(s, "parameter") for k, s in
             (("n1", d * 4), ("q", d * d * 4), ("k", d * d * 4), ("v", d * d * 4), ("o", d * d * 4),
              ("n2", d * 4), ("up", 4 * d * d * 4), ("gate", 4 * d * d * 4), ("down", 4 * d * d * 4))}
        h = node([x, w["n1"]], tensor(act))
        q, k, v = (node([h, w[n]], tensor(act)) for n in ("q", "k", "v"))
        s = node([q, k], tensor(score))
        p = node([s], tensor(score, can_inplace=True))
        a = node([p, v], tensor(act))
        o = node([a, w["o"]], tensor(act))
        x1 = node([x, o], tensor(act, can_inplace=True))
        h2 = node([x1, w["n2"]], tensor(act))
        up = node([h2, w["up"]], tensor(wide))
        gate = node([h2, w["gate"]], tensor(wide))
        act_g = node([gate], tensor(wide, can_inplace=True))
        m = node([up, act_g], tensor(wide, can_inplace=True))
        dn = node([m, w["down"]], tensor(act))
        x = node([x1, dn], tensor(act, can_inplace=True))
    in_start, in_index, out_start, out_index = [0], [], [0], []
    for ins, outs in nodes:
        in_index += ins
        out_index += outs
        in_start.append(len(in_index))
        out_start.append(len(out_index))
    return mm.Graph.from_arrays(np.array(sizes, dtype=np.uint64), (in_start, in_index),
                                (out_start, out_index), roles=np.array(roles, dtype=np.uint8),
                                can_inplace=np.array(inplace), outputs=[x],
                                name=f"transformer-{len(sizes)}")


def timed(fn, repeat):
    best = math.inf
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def slope(points):
    """Least-squares slope of log(time) against log(size)."""
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(t) for _, t in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else float("nan")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max", type=int, default=1_000_000)
    ap.add_argument("--ref-max", type=int, default=10_000)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    sizes = [n for n in (1_000, 10_000, 100_000, 1_000_000) if n <= args.max]
    rows = []
    for family, build in (("residual", residual_graph), ("transformer", transformer_graph)):
        for n in sizes:
            t0 = time.perf_counter()
            graph = build(n)
            build_s = time.perf_counter() - t0
            doc = graph.to_dict() if n <= args.ref_max else None
            for strategy in ("tmmu", "greedy_by_size", "best_fit", "auto"):
                if strategy == "auto" and n > 100_000:
                    continue
                repeat = 3 if n <= 100_000 else 1
                api_s, plan = timed(lambda: mm.plan(graph, strategy=strategy), repeat)
                row = {"family": family, "tensors": len(graph), "strategy": strategy,
                       "build_s": build_s, "core_s": plan.metrics["allocation_time_ns"] / 1e9,
                       "api_s": api_s, "ratio": plan.total_bytes / plan.metrics["total_lower_bound"],
                       "reference_s": None, "speedup_core": None, "e0": None}
                if doc is not None and strategy in ("tmmu", "greedy_by_size", "best_fit"):
                    ref_s, ref = timed(lambda: reference.plan(doc, strategy=strategy), 1)
                    row.update(reference_s=ref_s, speedup_core=ref_s / row["core_s"],
                               e0=ref == plan.to_dict())
                rows.append(row)
                print(f"  {family} {len(graph)} {strategy}: api {api_s:.3f}s", flush=True)
    print()
    print_table(rows, [("family", "family", ""), ("tensors", "tensors", ","), ("strategy", "strategy", ""),
                       ("core_s", "core s", ".4f"), ("api_s", "api s", ".4f"),
                       ("reference_s", "ref s", ".3f"), ("speedup_core", "ref/core", ".0f"),
                       ("e0", "E0", ""), ("ratio", "size/bound", ".4f")])
    slopes = []
    for family in ("residual", "transformer"):
        for strategy in ("tmmu", "greedy_by_size", "best_fit"):
            pts = [(r["tensors"], r["api_s"]) for r in rows if r["family"] == family
                   and r["strategy"] == strategy and r["tensors"] >= 10_000]
            if len(pts) >= 2:
                slopes.append({"family": family, "strategy": strategy, "slope": slope(pts)})
    print("\nlog-log slope of api time against tensors (10^4 and up; 1.0 = linear):")
    print_table(slopes, [("family", "family", ""), ("strategy", "strategy", ""), ("slope", "slope", ".2f")])
    write_json("speed", {"rows": rows, "slopes": slopes}, args.out)


if __name__ == "__main__":
    main()
