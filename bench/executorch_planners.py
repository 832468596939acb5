"""ExecuTorch's memory planners against emel's on 13 models.

(Named executorch_planners.py: a module named executorch beside the scripts
would shadow the executorch package on sys.path.)

Each model (bench/executorch_models.py) is exported once and planned by
ExecuTorch's default pass (``greedy``), greedy without overlapping
allocations, the Cadence backend's ``GreedyWithHeuristic`` and
``PositionBasedGreedyWithHierarchy`` (one memory, 16-byte alignment), emel
``auto`` at its default budget and emel ``optimal``, and ``replan`` of the
default-exported ``.pte``. For each: the planned
bytes (every non-constant buffer), the algorithm's wall time, and whether the
program runs in executorch.runtime with outputs bit-identical to the default
program's. emel's lower bound is the peak of live bytes of the specs it
places (plus reserved space and padding): no plan of these specs is smaller.

    python bench/executorch_planners.py [--models a,b] [--out results.json]
"""

from __future__ import annotations

import argparse
import functools
import sys
import time

import torch
from executorch.exir import memory_planning as mp
from executorch.exir.passes import MemoryPlanningPass

import executorch_models as em
from _common import print_table, write_json
from emel.memory.executorch import memory_planning_pass, replan

PLANNERS = ["default", "greedy_no_overlap", "cadence_heuristic", "cadence_position", "emel_auto",
            "emel_optimal", "replan"]


REPEATS = 5


def _timed(algo, seconds: list, name: str, calls: list = None):
    """algo timed per call; ``calls`` (when given) keeps each call's arguments."""
    @functools.wraps(algo if not isinstance(algo, functools.partial) else algo.func)
    def run(*args, **kwargs):
        if calls is not None:
            calls.append((args, kwargs))
        start = time.perf_counter()
        out = algo(*args, **kwargs)
        seconds.append(time.perf_counter() - start)
        return out
    run.__name__ = name
    return run


def _median_seconds(algo, calls: list) -> float:
    """The algorithm again on the arguments of the export's calls: the median of
    REPEATS runs of all of them (one export's time is noisy on a shared machine)."""
    runs = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for args, kwargs in calls:
            algo(*args, **kwargs)
        runs.append(time.perf_counter() - start)
    return sorted(runs)[REPEATS // 2]


def _cadence(kind: str):
    import executorch.backends.cadence.aot.ops_registrations  # noqa: F401 (its constraint passes need cadence ops)
    from executorch.backends.cadence.aot import memory_planning as cmp
    from executorch.backends.cadence.aot.utils import MemoryConfig
    cls = cmp.GreedyWithHeuristic if kind == "heuristic" else cmp.PositionBasedGreedyWithHierarchy
    return cls(memory_config=MemoryConfig(memory_sizes=[1 << 40], memory_alignments=[16]))


def plan_with(planner: str, edge):
    """(program, algorithm seconds, emel stats or None).

    The seconds are the median of REPEATS reruns of the algorithm on the
    arguments it got during the export, except for Cadence's planners, whose
    constraint passes rewrite the graph (their one timed call is kept).
    """
    seconds: list = []
    calls: list = []
    if planner == "replan":           # emel.memory.executorch.replan on the default .pte
        from types import SimpleNamespace
        from executorch.exir._serialize._program import deserialize_pte_binary
        original = em.to_program(edge).buffer
        start = time.perf_counter()
        new = replan(original)
        seconds = time.perf_counter() - start
        return SimpleNamespace(buffer=new, executorch_program=deserialize_pte_binary(new).program), seconds, None
    if planner in ("default", "greedy_no_overlap"):
        algo = mp.greedy if planner == "default" else \
            functools.partial(mp.greedy, allow_overlapping_allocations=False)
        p = MemoryPlanningPass(memory_planning_algo=mp.MemoryPlanningAlgorithmSuite(
            [_timed(algo, seconds, "greedy", calls)]))
    elif planner.startswith("cadence_"):
        algo = None
        p = MemoryPlanningPass(memory_planning_algo=_timed(_cadence(planner[8:]), seconds, planner),
                               allow_lifetime_and_storage_overlap=True)
    else:
        p = memory_planning_pass(planner[5:], keep_default=False)
        algo = p.emel_algorithm
        p.emel_algorithm = _timed(algo, seconds, algo.__name__, calls)
        p.memory_planning_algo.algo_list[0] = p.emel_algorithm
    program = em.to_program(edge, p)
    stats = algo.last if planner.startswith("emel_") else None
    if algo is not None:
        seconds = [_median_seconds(algo, calls)]
    return program, sum(seconds), stats


def bench_model(name: str) -> dict:
    t0 = time.perf_counter()
    try:
        edge, inputs = em.lower(name)
    except Exception as e:  # a model torch.export or to_edge cannot take
        return {"model": name, "export_error": f"{type(e).__name__}: {str(e)[:200]}"}
    steps = 2 if name == "kv_decoder" else 1
    row = {"model": name, "export_s": time.perf_counter() - t0}
    reference = None
    for planner in PLANNERS:
        try:
            program, seconds, stats = plan_with(planner, edge)
        except Exception as e:  # a heuristic that cannot plan this graph
            row[planner] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
            continue
        entry = {"bytes": em.planned_bytes(program), "ms": seconds * 1e3}
        try:
            outputs = em.run(program, inputs, steps)
        except RuntimeError as e:   # Cadence's constraints rewrite ops into its own no-op kernels
            entry.update(bit_identical=None, runtime_error=str(e)[:200])
        else:
            if reference is None:
                reference = outputs
            entry["bit_identical"] = all(len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))
                                         for a, b in zip(outputs, reference))
        if stats is not None:
            entry.update(lower_bound=stats.lower_bound, optimal=all(a.optimal for a in stats.arenas.values()),
                         specs=sum(a.specs for a in stats.arenas.values()))
        row[planner] = entry
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=None, help="comma-separated (default: all of the bench's)")
    ap.add_argument("--held-out", action="store_true",
                    help="plan the held-out models (bench/executorch_models.py HELD_OUT) instead")
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/executorch.json)")
    args = ap.parse_args(argv)
    rows = []
    names = args.models.split(",") if args.models else list(em.HELD_OUT if args.held_out else em.MODELS)
    for name in names:
        row = bench_model(name)
        rows.append(row)
        print(f"{name}: " + ", ".join(f"{k} {v.get('bytes', v.get('error'))}" for k, v in row.items()
                                       if isinstance(v, dict)), flush=True)
    table = []
    for r in rows:
        if "export_error" in r:
            print(f"{r['model']}: not exported: {r['export_error']}")
            continue
        # The heuristics whose programs run in the portable runtime: Cadence's constraint
        # passes rewrite some ops into its own no-op kernels (the graph is then another one).
        heur = [r[k]["bytes"] for k in PLANNERS[:4] if r[k].get("bit_identical")]
        auto, opt = r["emel_auto"], r["emel_optimal"]
        table.append({
            "model": r["model"], "specs": auto.get("specs"), "default": r["default"].get("bytes"),
            "no_overlap": r["greedy_no_overlap"].get("bytes"), "cad_heur": r["cadence_heuristic"].get("bytes"),
            "cad_pos": r["cadence_position"].get("bytes"), "auto": auto.get("bytes"), "optimal": opt.get("bytes"),
            "bound": auto.get("lower_bound"),
            "vs_best": (auto["bytes"] / min(heur) - 1) * 100 if heur and "bytes" in auto else None,
            "proven": "yes" if auto.get("optimal") or auto.get("bytes") == auto.get("lower_bound") else "no",
            "greedy_ms": r["default"].get("ms"), "auto_ms": auto.get("ms"), "opt_ms": opt.get("ms"),
            "replan": r["replan"].get("bytes"), "replan_ms": r["replan"].get("ms"),
            "same": all(r[k].get("bit_identical") is not False for k in PLANNERS),
            "cadence_runs": all(r[k].get("bit_identical") is not None for k in PLANNERS[2:4]),
        })
    print()
    print_table(table, [("model", "model", "s"), ("specs", "specs", "d"), ("default", "default", ",d"),
                        ("no_overlap", "no-overlap", ",d"), ("cad_heur", "cadence heur", ",d"),
                        ("cad_pos", "cadence pos", ",d"), ("auto", "emel auto", ",d"),
                        ("optimal", "emel optimal", ",d"), ("bound", "bound", ",d"),
                        ("vs_best", "auto vs best runnable %", "+.1f"), ("proven", "at bound", "s"),
                        ("greedy_ms", "greedy ms", ".1f"), ("auto_ms", "auto ms", ".1f"),
                        ("opt_ms", "optimal ms", ".1f"), ("replan", "replan .pte", ",d"),
                        ("replan_ms", "replan ms", ".0f"), ("same", "bit-identical", ""),
                        ("cadence_runs", "cadence runs", "")])
    command = "python bench/executorch_planners.py " + " ".join(argv or sys.argv[1:])
    write_json("executorch_held_out" if args.held_out else "executorch",
               {"command": command.strip(), "rows": rows, "table": table}, args.out)


if __name__ == "__main__":
    main()
