"""E0 equivalence matrix (TMMU spec VIII.C): the C++ core against the pure
Python reference on the model graphs of data/graphs, for every preset x mode x seed.

    python scripts/e0_matrix.py [--seeds 10] [--json bench/results/e0_matrix.json]

A seed makes a different but equivalent input: the document's tensors, nodes
and object keys shuffled (execution_order given explicitly, so the steps stay
the same), a random 32-byte replay token, a random rank / world size. Each
cell passes when core and reference give identical logical addresses, slots,
lifetimes (which fix the live set of every step) and hashes, and the seed
changed nothing but what it may change: the ir_hash and the placement equal
those of the unshuffled document with the default token.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRAPHS = ROOT / "data" / "graphs"   # the model graphs of the repository (data/README.md)
if any(p.suffix in (".so", ".pyd") for p in (ROOT / "python" / "emel" / "memory").glob("_core*")):
    # a checkout with its core built in place; otherwise the emel on the path (a wheel)
    sys.path.insert(0, str(ROOT / "python"))

import emel.memory as mm  # noqa: E402
from emel.memory import reference  # noqa: E402
from emel.memory.presets import PRESETS, shuffled  # noqa: E402

MODES = ("inference", "forward", "backward")


def placement(plan_doc: dict) -> dict:
    """What E0 compares: per tensor arena, offset, size, slot, birth, death, plus arena sizes."""
    return {"tensors": {tid: (t["arena"], t["offset"], t["size"], t.get("slot"), t.get("birth"),
                              t.get("death"), t.get("inplace_of"), t.get("view_of"))
                        for tid, t in plan_doc["tensors"].items()},
            "arenas": {name: a["size"] for name, a in plan_doc["arenas"].items()}}


def run_case(document: dict, preset: str, mode: str, seed: int, baseline: dict | None = None) -> str | None:
    """None when the cell passes, else the first problem found."""
    rng = random.Random(seed)
    doc = shuffled(document, rng) if seed else document
    world_size = rng.randint(1, 4)
    kw = dict(PRESETS[preset], mode=mode, replay_token=rng.randbytes(32) if seed else None,
              rank=rng.randrange(world_size), world_size=world_size)
    core = mm.plan(copy.deepcopy(doc), **{"strategy": "tmmu", **kw}).to_dict()
    ref = reference.plan(doc, **kw)
    if placement(core) != placement(ref):
        return "core and reference place tensors differently"
    if core != ref:
        diff = sorted(k for k in set(core) | set(ref) if core.get(k) != ref.get(k))
        return f"core and reference documents differ in {', '.join(diff)}"
    if baseline is not None:
        if core["hashes"]["ir_hash"] != baseline["hashes"]["ir_hash"]:
            return "the shuffled document has another ir_hash"
        if placement(core) != placement(baseline):
            return "the seed changed the placement"
    return None


def matrix(seeds: int, graphs=None, first_seed: int = 0):
    """Rows (graph, preset, mode, passed seeds, failures) over the shared graphs,
    for seeds first_seed .. first_seed + seeds - 1 (seed 0: the document as given)."""
    rows = []
    for path in graphs or sorted(GRAPHS.glob("*.json")):
        document = json.loads(path.read_text())
        for preset in PRESETS:
            for mode in MODES:
                baseline = mm.plan(copy.deepcopy(document), mode=mode, **{"strategy": "tmmu", **PRESETS[preset]}).to_dict()
                problems = [(s, run_case(document, preset, mode, s, baseline))
                            for s in range(first_seed, first_seed + seeds)]
                rows.append({"graph": path.stem, "preset": preset, "mode": mode, "seeds": seeds,
                             "passed": sum(p is None for _, p in problems),
                             "failures": [f"seed {s}: {p}" for s, p in problems if p is not None]})
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="E0: C++ core vs reference on the model graphs of data/graphs")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "e0_matrix.json"))
    args = parser.parse_args(argv)
    start = time.perf_counter()
    rows = matrix(args.seeds)
    elapsed = time.perf_counter() - start
    modes_header = "".join(f"{m:>11}" for m in MODES)
    print(f"{'graph':<24}{'preset':<15}{modes_header}")
    for i in range(0, len(rows), len(MODES)):
        cells = rows[i:i + len(MODES)]
        print(f"{cells[0]['graph']:<24}{cells[0]['preset']:<15}" +
              "".join(f"{c['passed']:>7}/{c['seeds']:<3}" for c in cells))
    failures = [f"{r['graph']} {r['preset']} {r['mode']} {f}" for r in rows for f in r["failures"]]
    for f in failures:
        print("FAIL", f)
    total = sum(r["seeds"] for r in rows)
    print(f"{total - len(failures)}/{total} cells x seeds identical in {elapsed:.1f} s")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"seeds": args.seeds, "seconds": round(elapsed, 2),
                                           "rows": rows}, indent=1, sort_keys=True) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
