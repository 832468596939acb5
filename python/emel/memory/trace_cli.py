"""emel-trace: record a plan's allocation trace, or verify one against a graph.

    emel-trace record GRAPH.json -o TRACE [--mode M] [--strategy S] [--alignment N]
                      [--replay-token HEX] [--rank R --world-size W] [--shard-spec JSON|FILE]
    emel-trace verify GRAPH.json TRACE [--replay-token HEX] [--shard-spec JSON|FILE]

TRACE ending in ``.cbor`` is written as canonical CBOR, anything else as JSON
Lines, gzipped when the name ends in ``.gz`` (``x.jsonl.gz``); ``verify``
reads any of them. ``verify`` plans the graph again with the
mode, strategy, arena configuration, rank and world size the trace's header
records and exits 0 when the traces are identical, 1 with the first
difference otherwise, 2 when the input cannot be read or planned.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import cbor
from .cli import (add_determinism_options, add_layout_option, check_output_path, determinism_kwargs,
                  layout_of, load_model_or_graph)
from .errors import PlanError
from .graph import read_input_file
from .planning import DEFAULT_STRATEGY, FITS, MODES, STRATEGIES, plan
from .trace import encode, first_difference, parse, to_jsonl, trace_records


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="emel-trace",
                                description="Record a plan as an allocation trace, or plan a graph again and verify it against a recorded trace (traces: one record per tensor, its arena, offset and lifetime; the hashes of the plan).")
    sub = p.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="plan GRAPH and write its trace")
    rec.add_argument("graph", help="an emel.graph/1 JSON file or an ONNX model (.onnx)")
    rec.add_argument("-o", "--output", required=True, help="trace file (.cbor: CBOR, else JSON Lines; .gz after either: gzipped; '-': stdout)")
    rec.add_argument("--mode", choices=MODES, default="inference")
    rec.add_argument("--strategy", choices=STRATEGIES, default=DEFAULT_STRATEGY)
    rec.add_argument("--alignment", type=int, default=None, metavar="N")
    add_layout_option(rec)
    add_determinism_options(rec)
    ver = sub.add_parser("verify", help="plan GRAPH again and compare with TRACE")
    ver.add_argument("graph", help="the emel.graph/1 JSON file (or ONNX model) the trace was recorded from")
    ver.add_argument("trace", help="a trace written by `emel-trace record`")
    add_determinism_options(ver, rank=False)  # verify takes rank and world size from the trace
    for q in (rec, ver):
        q.add_argument("--fit", choices=FITS, default="best")
        q.add_argument("--time-budget-ms", type=int, default=None, metavar="MS",
                       help="work budget of auto and optimal (default: 200 when the first pass is within "
                        "0.5%% of the lower bound, else 4000; a proven optimum ends it sooner)")
    return p


def record(args) -> int:
    result = plan(load_model_or_graph(args.graph), mode=args.mode, strategy=args.strategy,
                  alignment=args.alignment,
                  fit=args.fit, time_budget_ms=args.time_budget_ms, arena_layout=layout_of(args),
                  **determinism_kwargs(args))
    records = trace_records(result.to_dict())
    if args.output == "-":
        sys.stdout.write(to_jsonl(records))
    else:
        Path(args.output).write_bytes(encode(records, args.output))
    return 0


def _check_header(header: dict) -> None:
    """The fields replan_records reads, with the types it needs (ValueError)."""
    arenas = header.get("arenas")
    if not isinstance(arenas, dict) or not all(
            isinstance(a, dict) and all(k in a for k in _ARENA_FIELDS) for a in arenas.values()):
        raise ValueError(f"the header's 'arenas' must map names to objects with "
                         f"{', '.join(_ARENA_FIELDS)}; got {arenas!r:.200}")
    for key, kind in (("mode", str), ("strategy", str), ("rank", int), ("world_size", int)):
        if not isinstance(header.get(key), kind) or isinstance(header.get(key), bool):
            raise ValueError(f"the header's {key!r} must be a {kind.__name__}, got {header.get(key)!r:.200}")


_ARENA_FIELDS = ("alignment", "capacity_bytes", "page_size", "persistent")


def replan_records(graph, header: dict, replay_token=None, shard_spec=None, fit="best",
                   time_budget_ms=None) -> list[dict]:
    """The trace of ``graph`` planned as ``header`` (an allocation_header) says."""
    _check_header(header)
    arenas = {name: {"alignment_bytes": a["alignment"], "capacity_bytes": a["capacity_bytes"],
                     "page_size": a["page_size"], "persistent": a["persistent"]}
              for name, a in header["arenas"].items()}
    # A trace lists its arenas: a gradients arena of its own is the separate layout.
    layout = "separate" if "gradients" in header["arenas"] else "pooled"
    result = plan(graph, mode=header["mode"], strategy=header["strategy"], arenas=arenas,
                  arena_layout=layout,
                  fit=fit, time_budget_ms=time_budget_ms, replay_token=replay_token,
                  rank=header["rank"], world_size=header["world_size"], shard_spec=shard_spec)
    return trace_records(result.to_dict())


def verify(args) -> int:
    recorded = parse(read_input_file(args.trace))
    if not recorded or recorded[0].get("record") != "allocation_header":
        print(f"emel-trace: {args.trace}: the first record is not an allocation_header", file=sys.stderr)
        return 2
    fresh = replan_records(load_model_or_graph(args.graph), recorded[0], **determinism_kwargs(args),
                           fit=args.fit, time_budget_ms=args.time_budget_ms)
    if recorded[0].get("ir_hash") != fresh[0].get("ir_hash"):
        print(f"MISMATCH: {args.trace} was recorded from another graph than {args.graph} (their "
              f"ir_hash differ: {str(recorded[0].get('ir_hash'))[:16]}... in the trace, "
              f"{str(fresh[0].get('ir_hash'))[:16]}... for the graph); verify a trace against the "
              f"graph it was recorded from")
        return 1
    diff = first_difference(recorded, fresh)   # the trace is what is expected
    if diff is None:
        print(f"OK: {args.trace} matches {args.graph} ({len(recorded)} records, "
              f"plan hash {recorded[-1].get('plan_hash')})")
        return 0
    print(f"MISMATCH: {args.trace} differs from a fresh plan of {args.graph}: {diff}")
    return 1


def main(argv=None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    try:
        check_output_path(getattr(args, "output", None), "-o")
    except ValueError as e:
        p.error(str(e))
    try:
        return record(args) if args.command == "record" else verify(args)
    except (PlanError, OSError, ValueError, KeyError, TypeError, cbor.CBORError) as e:
        print(f"emel-trace: {e}", file=sys.stderr)
        return 2


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
