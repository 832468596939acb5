"""Tensor-parallel plans per rank, and what dynamic-shape replanning costs.

Part 1: for the Llama graphs of data/graphs (the bundled
llama-tiny-inference when that directory is absent), each world size: the
Megatron-style spec of sharding.tensor_parallel_spec, every rank's arena
sizes against the unsharded plan, and the time of plan(..., rank=0,
world_size=w, shard_spec=spec) against plan() (median of --repeat runs).

Part 2: a symbolic graph (a chain of --layers [seq, 4096] float32 tensors,
seq in [1, 4096]): a session's check inside the envelope, a replan at a
safepoint (cache miss), and the same replan from a new session (cache hit).

Prints tables and writes JSON (default bench/results/sharding.json).

    python bench/sharding.py [--repeat 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import emel.memory as mm
from emel.memory import examples, shapes, sharding

from _common import DATA, print_table, write_json

CASES = (("llama-tiny-inference", "inference"), ("llama-tiny-training", "backward"))


def median_time(fn, repeat):
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def load(name):
    path = DATA / "graphs" / f"{name}.json"
    if path.is_file():
        return json.loads(path.read_text())
    if name in examples.names():
        return examples.load(name).to_dict()
    return None


def tensor_parallel_rows(repeat):
    rows = []
    for name, mode in CASES:
        doc = load(name)
        if doc is None:
            continue
        whole_time, whole = median_time(lambda: mm.plan(doc, mode=mode), repeat)
        for w in (2, 4, 8):
            spec_time, spec = median_time(lambda: sharding.tensor_parallel_spec(doc, w), repeat)
            plan_time, _ = median_time(
                lambda: mm.plan(doc, mode=mode, rank=0, world_size=w, shard_spec=spec), repeat)
            plans = [mm.plan(doc, mode=mode, rank=r, world_size=w, shard_spec=spec) for r in range(w)]
            for arena in sorted(whole.arenas):
                sizes = [p.arenas[arena].size for p in plans]
                rows.append({"graph": name, "mode": mode, "world_size": w, "arena": arena,
                             "unsharded": whole.arenas[arena].size, "rank_max": max(sizes),
                             "rank_min": min(sizes),
                             "ratio": whole.arenas[arena].size / max(sizes),
                             "spec_tensors": len(spec), "spec_ms": spec_time * 1e3,
                             "plan_ms": plan_time * 1e3, "unsharded_plan_ms": whole_time * 1e3})
    return rows


def chain_doc(layers):
    seq = {"sym": "seq", "min": 1, "max": 4096}
    tensors = [{"id": f"a{k}", "shape": [dict(seq), 4096], "dtype": "float32",
                "role": "input" if k == 0 else "activation"} for k in range(layers + 1)]
    nodes = [{"id": f"n{k}", "op": "op", "inputs": [f"a{k}"], "outputs": [f"a{k + 1}"]}
             for k in range(layers)]
    return {"format": "emel.graph/1", "name": "chain", "tensors": tensors, "nodes": nodes,
            "safepoints": [f"n{layers - 1}"]}


def replan_rows(repeat, layers):
    doc = chain_doc(layers)
    safepoint = f"n{layers - 1}"
    build_time, planner = median_time(
        lambda: shapes.DynamicPlanner(doc, replan_policy="REPLAN_AT_SAFEPOINT"), repeat)
    inside_time, _ = median_time(lambda: planner.session().check({"seq": 2048}, node=safepoint),
                                 repeat)

    def miss():
        fresh = shapes.DynamicPlanner(doc, replan_policy="REPLAN_AT_SAFEPOINT")
        session = fresh.session()
        start = time.perf_counter()
        session.check({"seq": 5000}, node=safepoint)
        return time.perf_counter() - start

    miss_time = statistics.median(miss() for _ in range(repeat))
    planner.session().check({"seq": 5000}, node=safepoint)          # fill the cache
    hit_time, _ = median_time(lambda: planner.session().check({"seq": 5000}, node=safepoint),
                              repeat)
    return [{"case": "DynamicPlanner (plans the envelope)", "ms": build_time * 1e3},
            {"case": "check inside the envelope", "ms": inside_time * 1e3},
            {"case": "replan at a safepoint (miss)", "ms": miss_time * 1e3},
            {"case": "replan at a safepoint (cache hit)", "ms": hit_time * 1e3}]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--layers", type=int, default=200)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    tp = tensor_parallel_rows(args.repeat)
    print_table(tp, [("graph", "graph", ""), ("world_size", "w", "d"), ("arena", "arena", ""),
                     ("unsharded", "unsharded B", "d"), ("rank_max", "largest rank B", "d"),
                     ("ratio", "unsharded/rank", ".3f"), ("spec_tensors", "spec", "d"),
                     ("spec_ms", "spec ms", ".1f"), ("plan_ms", "sharded plan ms", ".1f"),
                     ("unsharded_plan_ms", "plan ms", ".1f")])
    print()
    rp = replan_rows(args.repeat, args.layers)
    print(f"symbolic chain of {args.layers} nodes, [seq, 4096] float32, seq in [1, 4096]:")
    print_table(rp, [("case", "case", ""), ("ms", "ms", ".3f")])
    write_json("sharding", {"repeat": args.repeat, "tensor_parallel": tp,
                            "replan": {"layers": args.layers, "rows": rp}}, args.out)


if __name__ == "__main__":
    main()
