"""emel-sweep: plan every graph x mode x strategy of a directory, in parallel.

    emel-sweep DIR [--strategies S,S,...] [--modes M,M,...] [-j N | --scheduler ADDRESS]
               [-o results.json]

Graphs are the ``*.json`` (`emel.graph/1`) and ``*.onnx`` files of DIR, in
name order. Each (graph, mode, strategy) is planned in a worker process; a
progress bar (tqdm when installed, a plain counter otherwise) follows the
work, and the results come back in the order graph, mode, strategy whatever
order the workers finish in. The summary table gives, per graph and mode,
each strategy's ratio of its non-persistent arenas to their lower bound and
its planning time.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import json
import os
import sys
import time
from typing import Iterable, Sequence

from .cli import (add_input_shape_option, add_layout_option, check_output_path, layout_of,
                  load_model_or_graph, parse_input_shapes, write_output)
from .errors import PlanError
from .planning import MODES, STRATEGIES, plan

SWEEP_FORMAT = "emel.sweep/1"
#: How long --scheduler waits for the cluster before giving up.
CONNECT_TIMEOUT = "30s"


def graph_files(directory: str) -> list[str]:
    """The graph files of a directory, in name order."""
    names = sorted(n for n in os.listdir(directory) if n.endswith((".json", ".onnx")))
    return [os.path.join(directory, n) for n in names]


@functools.lru_cache(maxsize=8)
def _load(path: str, input_shapes: tuple = ()):
    """``input_shapes``: (name, dims) pairs for ONNX models (hashable, for the cache)."""
    shapes = {name: list(dims) for name, dims in input_shapes}
    if shapes and not path.lower().endswith(".onnx"):
        shapes = {}   # --input-shape is for the directory's ONNX models only
    return load_model_or_graph(path, shapes)


def plan_one(path: str, mode: str, strategy: str, time_budget_ms: int | None = None,
             arena_layout: str | None = None, input_shapes: tuple = ()) -> dict:
    """Plan one graph file; a row of the sweep's results (errors are rows too)."""
    row = {"graph": os.path.basename(path), "mode": mode, "strategy": strategy}
    try:
        graph = _load(path, input_shapes)
        start = time.perf_counter()
        result = plan(graph, mode=mode, strategy=strategy, time_budget_ms=time_budget_ms,
                      arena_layout=arena_layout)
        row["time_ms"] = (time.perf_counter() - start) * 1e3
    except PlanError as e:
        row.update(error=str(e), code=e.code)
        return row
    except (OSError, ValueError, ImportError) as e:
        row.update(error=str(e), code=type(e).__name__)
        return row
    arenas = result.arenas
    movable = [a for a in arenas.values() if not a.persistent]
    size = sum(a.size for a in movable)
    bound = sum(a.lower_bound for a in movable)
    row.update(
        name=result.graph_name, tensors=len(result.tensor_ids), steps=result.steps,
        allocation_time_ms=result.metrics["allocation_time_ns"] / 1e6,
        total_bytes=result.total_bytes, total_lower_bound=sum(a.lower_bound for a in arenas.values()),
        movable_bytes=size, movable_lower_bound=bound, ratio=(size / bound) if bound else None,
        arenas={a.name: {"size": a.size, "lower_bound": a.lower_bound} for a in arenas.values()})
    return row


def _progress(total: int, enabled: bool):
    """A tqdm bar when tqdm is installed; else a counter line on stderr."""
    if not enabled:
        return _Silent()
    try:
        from tqdm import tqdm
    except ImportError:
        return _Counter(total)
    return tqdm(total=total, unit="plan", desc="emel-sweep", file=sys.stderr, dynamic_ncols=True)


class _Silent:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


class _Counter(_Silent):
    def __init__(self, total: int):
        self.total, self.done = total, 0

    def update(self, n: int = 1) -> None:
        self.done += n
        print(f"\remel-sweep: {self.done}/{self.total} plans", end="", file=sys.stderr, flush=True)

    def close(self) -> None:
        print(file=sys.stderr)


def sweep(paths: Iterable[str], modes: Sequence[str] = ("inference",),
          strategies: Sequence[str] = STRATEGIES, jobs: int = 1, time_budget_ms: int | None = None,
          progress: bool = True, client=None, arena_layout: str | None = None,
          input_shapes: dict | None = None) -> list[dict]:
    """Plan every path x mode x strategy; rows in that order. ``jobs`` > 1 uses worker
    processes; ``client`` (a ``distributed.Client``) runs the cells on its Dask cluster
    instead, with the same rows in the same order. ``arena_layout``: as plan()'s;
    ``input_shapes``: name -> dims for ONNX inputs with symbolic dimensions."""
    for m in modes:
        if m not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}; got {m!r}")
    for s in strategies:
        if s not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}; got {s!r}")
    shapes = tuple(sorted((k, tuple(v)) for k, v in (input_shapes or {}).items()))
    tasks = [(p, m, s, time_budget_ms, arena_layout, shapes)
             for p in paths for m in modes for s in strategies]
    rows: list[dict | None] = [None] * len(tasks)
    bar = _progress(len(tasks), progress)
    try:
        if client is not None:
            _run_on_dask(client, tasks, rows, bar)
        elif jobs <= 1:
            for k, task in enumerate(tasks):
                rows[k] = plan_one(*task)
                bar.update()
        else:
            with concurrent.futures.ProcessPoolExecutor(max_workers=jobs) as pool:
                futures = {pool.submit(plan_one, *task): k
                           for k, task in enumerate(tasks)}
                for future in concurrent.futures.as_completed(futures):
                    rows[futures[future]] = future.result()
                    bar.update()
    finally:
        bar.close()
    return rows  # type: ignore[return-value]


def _run_on_dask(client, tasks, rows: list, bar) -> None:
    """Each cell a Dask task; results land in their task's row whatever order they finish in.

    The workers read the graph files themselves, so the paths must be valid on
    them (a shared file system, or the same checkout)."""
    from distributed import as_completed
    futures = [client.submit(plan_one, *task, pure=False,
                             key=f"emel-sweep-{k}-{os.getpid()}-{time.monotonic_ns()}")
               for k, task in enumerate(tasks)]
    index = {future.key: k for k, future in enumerate(futures)}
    for future in as_completed(futures):
        rows[index[future.key]] = future.result()
        bar.update()


def connect(address: str):
    """A ``distributed.Client`` for ``--scheduler ADDRESS``; ImportError naming the extra."""
    try:
        from distributed import Client
    except ImportError:
        raise ImportError("--scheduler needs Dask: pip install 'emel[sweep]' (in a checkout: '.[sweep]') "
                          "(or pip install 'dask[distributed]')") from None
    return Client(address, timeout=CONNECT_TIMEOUT)


def summary_table(rows: list[dict]) -> str:
    """Graph x mode lines, one column per strategy: 'ratio to the bound / time'."""
    strategies = list(dict.fromkeys(r["strategy"] for r in rows))
    keys = list(dict.fromkeys((r["graph"], r["mode"]) for r in rows))
    cell = {(r["graph"], r["mode"], r["strategy"]): r for r in rows}

    def text(r: dict | None) -> str:
        if r is None:
            return ""
        if "error" in r:
            return r["code"]
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.3f}"
        return f"{ratio} {r['time_ms']:.1f}ms"

    header = ["graph", "mode", *strategies]
    lines = [[g, m, *(text(cell.get((g, m, s))) for s in strategies)] for g, m in keys]
    widths = [max(len(x) for x in col) for col in zip(header, *lines)]
    fmt = lambda cells: "  ".join(  # noqa: E731
        c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    note = ("cells: size / lower bound of the non-persistent arenas, and planning time "
            "(wall, in the worker)")
    return "\n".join([fmt(header), *(fmt(line) for line in lines), note])


def _split(value: str, allowed: Sequence[str], what: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if items == ["all"]:
        return list(allowed)
    bad = [v for v in items if v not in allowed]
    if bad or not items:
        raise argparse.ArgumentTypeError(f"{what} must be a comma-separated list of "
                                         f"{', '.join(allowed)} (or 'all'); got {value!r}")
    return items


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="emel-sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("directory", help="a directory of emel.graph/1 .json and .onnx files")
    p.add_argument("--strategies", default="all",
                   type=lambda v: _split(v, STRATEGIES, "--strategies"),
                   help=f"comma-separated strategies (default: all = {','.join(STRATEGIES)})")
    p.add_argument("--modes", default="inference", type=lambda v: _split(v, MODES, "--modes"),
                   help=f"comma-separated modes (default: inference; all = {','.join(MODES)})")
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1,
                   help="worker processes (default: the number of CPUs)")
    p.add_argument("--time-budget-ms", type=int, default=None, metavar="MS",
                   help="work budget of auto and optimal (default: 200 when the first pass is within "
                        "0.5%% of the lower bound, else 4000; a proven optimum ends it sooner)")
    p.add_argument("-o", "--output", metavar="RESULTS.json", help="write every row as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_layout_option(p)
    add_input_shape_option(p)
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="run the plans on a Dask distributed cluster (e.g. tcp://host:8786) "
                        "instead of local processes; needs emel[sweep]")
    return p


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    try:
        shapes = parse_input_shapes(args.input_shape)
        check_output_path(args.output, "-o", dash_is_stdout=False)
    except ValueError as e:
        p.error(str(e))
    if not os.path.isdir(args.directory):
        print(f"emel-sweep: {args.directory} is not a directory", file=sys.stderr)
        return 1
    paths = graph_files(args.directory)
    if not paths:
        print(f"emel-sweep: no .json or .onnx graph in {args.directory}", file=sys.stderr)
        return 1
    client = None
    if args.scheduler:
        try:
            client = connect(args.scheduler)
        except ImportError as e:
            print(f"emel-sweep: {e}", file=sys.stderr)
            return 1
        except OSError as e:   # no answer within CONNECT_TIMEOUT
            print(f"emel-sweep: no Dask scheduler answered at {args.scheduler} ({e}); is "
                  f"`dask scheduler` running there, and `dask worker {args.scheduler}` on the "
                  f"workers?", file=sys.stderr)
            return 1
    start = time.perf_counter()
    try:
        rows = sweep(paths, args.modes, args.strategies, jobs=max(args.jobs, 1),
                     time_budget_ms=args.time_budget_ms, progress=not args.no_progress,
                     client=client, arena_layout=layout_of(args), input_shapes=shapes)
        count = (len(client.scheduler_info()["workers"]) if client is not None
                 else max(args.jobs, 1))
        workers = (f"{count} {'Dask ' if client is not None else ''}worker{'s' if count != 1 else ''}"
                   f"{' at ' + args.scheduler if client is not None else ''}")
    finally:
        if client is not None:
            client.close()
    elapsed = time.perf_counter() - start
    print(summary_table(rows))
    print(f"{len(rows)} plans of {len(paths)} graphs in {elapsed:.1f} s with {workers}")
    if args.output:
        doc = {"format": SWEEP_FORMAT, "directory": os.path.abspath(args.directory),
               "modes": args.modes, "strategies": args.strategies,
               "time_budget_ms": args.time_budget_ms, "jobs": args.jobs, "rows": rows}
        if not write_output(args.output, json.dumps(doc, indent=1, sort_keys=True) + "\n",
                            "emel-sweep"):
            return 1
        print(f"results written to {args.output}")
    return 1 if any("error" in r for r in rows) else 0


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    entry()
