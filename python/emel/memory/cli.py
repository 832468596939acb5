"""emel-plan: plan a graph's memory from the command line.

    emel-plan GRAPH.json|MODEL.onnx [--mode inference|forward|backward] [--strategy S]
              [--alignment N] [--json OUT] [--plot FILE] [--why [--top N]]
              [--input-shape NAME=D,D,...]
              [--shape SYM=N ...] [--replay-token HEX] [--rank R --world-size W]
              [--shard-spec JSON|FILE]
    emel-plan --example [NAME]
    emel-plan MODEL.pte [--strategy S] [--alignment N] [--replan -o OUT.pte]   (docs/executorch.md)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from . import examples
from .graph import load_graph, read_input_file
from .formats import format_bytes
from .planning import DEFAULT_STRATEGY, MODES, STRATEGIES, mode_hint, plan
from .vocabulary import FITS, SEARCH_STRATEGIES
from .shapes import resolve_at


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="emel-plan",
        description="Plan tensor memory for an emel.graph/1 computation graph and print a "
                    "per-arena summary.")
    p.add_argument("graph", nargs="?",
                   help="path to an emel.graph/1 JSON file, an ONNX model (.onnx), or an "
                        "ExecuTorch program (.pte: its planned buffers against emel's plan)")
    p.add_argument("--example", nargs="?", const=examples.DEFAULT, metavar="NAME",
                   help=f"plan a bundled example instead ({', '.join(examples.names())}; "
                        f"default {examples.DEFAULT})")
    p.add_argument("--mode", choices=MODES, default="inference",
                   help="lifetime mode (default: inference)")
    p.add_argument("--strategy", choices=STRATEGIES, default=DEFAULT_STRATEGY,
                   help=f"placement strategy (default: {DEFAULT_STRATEGY}, the smallest plans; tmmu "
                        f"is the specification's slot colouring)")
    p.add_argument("--fit", choices=FITS, default="best",
                   help="gap choice of greedy_by_size (default: best)")
    p.add_argument("--time-budget-ms", type=int, default=None, metavar="MS",
                   help="work budget of auto and optimal, in deterministic work units "
                        "worth about MS milliseconds (default: 200 when the first pass is "
                        "within 0.5%% of the lower bound, else 4000; a proven optimum ends it sooner)")
    p.add_argument("--alignment", type=int, default=None, metavar="N",
                   help="alignment of every arena in bytes, a power of two (default: 128)")
    p.add_argument("--json", metavar="OUT",
                   help="also write the emel.plan/1 document to OUT ('-' for stdout)")
    p.add_argument("--plot", metavar="FILE",
                   help="also draw memory over steps and the placement of the largest "
                        "non-persistent arena to FILE (.png, .svg or .pdf; needs matplotlib)")
    p.add_argument("--why", action="store_true",
                   help="also explain the peak: the step, the node and module running there, "
                        "the largest live tensors and the bytes by kind (Plan.peak())")
    p.add_argument("--top", type=int, default=10, metavar="N",
                   help="with --why: how many live tensors to list (default: 10)")
    add_input_shape_option(p)
    p.add_argument("--shape", action="append", default=[], metavar="SYM=N",
                   help="plan for symbolic dimension SYM = N instead of its envelope's maximum "
                        "(repeatable); N outside the envelope is refused (SHAPE_ENVELOPE_EXCEEDED)")
    add_layout_option(p)
    add_determinism_options(p)
    p.add_argument("--replan", action="store_true",
                   help="with a .pte: write the program with its memory re-planned by emel to -o")
    p.add_argument("-o", "--output", metavar="OUT.pte", help="with --replan: where to write the program")
    return p


def add_layout_option(p: argparse.ArgumentParser) -> None:
    """--separate-arenas, shared by every command that plans; read it with :func:`layout_of`."""
    p.add_argument("--separate-arenas", action="store_true",
                   help="give gradients an arena of their own, as the specification does "
                        "(default: activations and gradients share one pooled arena, except "
                        "under tmmu)")


def layout_of(args) -> str | None:
    """plan()'s arena_layout from --separate-arenas (None: the strategy's default)."""
    return "separate" if args.separate_arenas else None


def add_determinism_options(p: argparse.ArgumentParser, rank: bool = True) -> None:
    """--replay-token and --shard-spec (and --rank / --world-size with ``rank``),
    shared by emel-plan and emel-trace; parse them with :func:`determinism_kwargs`."""
    p.add_argument("--replay-token", default=None, metavar="HEX",
                   help="32-byte replay token as 64 hex digits (default: derived from the graph "
                        "and mode); an input of the plan hash, so replays can be told apart")
    p.add_argument("--shard-spec", default=None, metavar="JSON|FILE",
                   help='tensor id -> split axis, as JSON text (e.g. \'{"w": 0}\') or a JSON file')
    if rank:
        p.add_argument("--rank", type=int, default=0, metavar="R",
                       help="plan rank R's share of the sharded graph (default: 0)")
        p.add_argument("--world-size", type=int, default=1, metavar="W",
                       help="number of ranks the shard spec splits over (default: 1)")


def check_output_path(path: str | None, flag: str, dash_is_stdout: bool = True) -> None:
    """ValueError unless ``path`` (None: none; '-': standard output, where the
    tool takes it) can be written: its directory exists and is writable and it
    is no directory. Checked before the work, so a mistyped path costs no
    planning and gets no traceback."""
    if path is None or (path == "-" and dash_is_stdout):
        return
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"{flag} {path}: is a directory")
    parent = target.parent
    if not parent.is_dir():
        raise ValueError(f"{flag} {path}: no directory {str(parent)!r} to write it in")
    if not os.access(target if target.exists() else parent, os.W_OK):
        raise ValueError(f"{flag} {path}: not writable")


def write_output(path: str, text: str, prog: str) -> bool:
    """Write ``text`` to ``path``; False, with one line on stderr, when that
    fails after :func:`check_output_path` passed (a full disk, a race)."""
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        print(f"{prog}: cannot write {path}: {e}", file=sys.stderr)
        return False
    return True


def parse_replay_token(text: str | None) -> bytes | None:
    """64 hex digits -> 32 bytes; ValueError saying what was expected otherwise."""
    if text is None:
        return None
    try:
        token = bytes.fromhex(text)
    except ValueError:
        raise ValueError(f"--replay-token must be 64 hexadecimal digits, got {text!r}") from None
    if len(token) != 32:
        raise ValueError(f"--replay-token must be exactly 32 bytes (64 hex digits), "
                         f"got {len(token)} bytes from {text!r}")
    return token


def parse_shard_spec(text: str | None) -> dict | None:
    """JSON text (``{"w": 0}``) or the path of a JSON file -> the shard spec;
    ValueError when it is neither."""
    if text is None:
        return None
    source = text
    if not text.lstrip().startswith("{"):
        if not Path(text).exists():
            raise ValueError(f"--shard-spec wants JSON text like '{{\"w\": 0}}' or a JSON file, "
                             f"got {text!r} (no such file)")
        source = read_input_file(text).decode("utf-8")
    try:
        spec = json.loads(source)
    except ValueError as e:
        raise ValueError(f"--shard-spec: {text!r:.100} is not valid JSON ({e})") from None
    except RecursionError:
        raise ValueError(f"--shard-spec: {text!r:.100} nests JSON too deeply") from None
    if not isinstance(spec, dict):
        raise ValueError(f"--shard-spec must be a JSON object (tensor id -> axis), got {spec!r}")
    return spec


def determinism_kwargs(args) -> dict:
    """plan()'s replay_token / shard_spec (and rank / world_size when parsed) from ``args``."""
    out = {"replay_token": parse_replay_token(args.replay_token),
           "shard_spec": parse_shard_spec(args.shard_spec)}
    if hasattr(args, "rank"):
        out.update(rank=args.rank, world_size=args.world_size)
    return out


def parse_symbol_values(items: list[str]) -> dict:
    """``["seq=128"]`` -> ``{"seq": 128}``; ValueError on a bad item."""
    values = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            values[name] = int(value)
        except ValueError:
            raise ValueError(f"--shape wants SYM=N (e.g. seq=128), got {item!r}") from None
    return values


def add_input_shape_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=D,D,...",
                   help="fix the shape of an ONNX graph input with symbolic dimensions "
                        "(repeatable), e.g. --input-shape x=1,3,224,224")


def parse_input_shapes(items: list[str], symbols: tuple = ()) -> dict:
    """``["x=1,3,224,224"]`` -> ``{"x": [1, 3, 224, 224]}``; ValueError on a bad item.
    A name in ``symbols`` (the dimension ``emel-fit --dim`` searches) may stand for a size."""
    shapes = {}
    for item in items:
        name, sep, dims = item.rpartition("=")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = [d.strip() if d.strip() in symbols else int(d)
                            for d in dims.split(",") if d.strip() != ""]
        except ValueError:
            also = f" or {'/'.join(symbols)}" if symbols else ""
            raise ValueError(f"--input-shape wants NAME=D,D,... with integer sizes{also} "
                             f"(e.g. x=1,3,224,224), got {item!r}") from None
    return shapes


def load_model_or_graph(path: str, input_shapes: dict | None = None):
    """A Graph from an emel.graph/1 JSON file or, by its .onnx extension, an ONNX model."""
    if str(path).lower().endswith(".onnx"):
        from .onnx_importer import from_onnx
        return from_onnx(path, input_shapes=input_shapes or None, _flag="--input-shape")
    if input_shapes:
        raise ValueError("--input-shape applies to ONNX models only")
    return load_graph(path)


def summary(result) -> str:
    """The human-readable per-arena table the CLI prints."""
    rows = result.summary_rows()
    header = ("arena", "size", "lower bound", "size/bound", "method", "proven", "slots", "tensors",
              "reuse", "slot slack")
    lines = [[r["arena"] + (" (persistent)" if r["persistent"] else ""), format_bytes(r["size"]),
              format_bytes(r["lower_bound"]),
              "-" if r["ratio"] is None else f"{r['ratio']:.3f}",
              r["method"] or "-",
              "-" if r["optimal"] is None else ("optimal" if r["optimal"]
                                                else f">= {format_bytes(r['proven_bound'])}"),
              "-" if r["slots"] is None else str(r["slots"]), str(r["tensors"]),
              "-" if r["reuse"] is None else f"{r['reuse']:.1%}",
              f"{r['fragmentation']:.1%}"] for r in rows]
    total = result.total_bytes
    bound = sum(r["lower_bound"] for r in rows)
    lines.append(["total", format_bytes(total), format_bytes(bound),
                  "-" if not bound else f"{total / bound:.3f}", "", "", "", "", "", ""])
    widths = [max(len(str(x)) for x in col) for col in zip(header, *lines)]
    fmt = lambda cells: "  ".join(  # noqa: E731
        c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    title = (f"{result.graph_name or '(unnamed graph)'}: mode {result.mode}, strategy "
             f"{result.strategy}, {len(result.tensor_ids)} tensors, {result.steps} steps, "
             f"planned in {result.metrics['allocation_time_ns'] / 1e6:.2f} ms")
    if result.world_size > 1:
        title += f", rank {result.rank} of {result.world_size}"
    notes = ["size/bound: arena size over the peak of live bytes (an in-place pair counted once); "
             "no plan of this order can go below 1.000.",
             "slot slack (internal_fragmentation_ratio): the share of the byte-steps reserved for "
             "tensors that their own bytes leave unused, e.g. a small tensor in a larger slot; it is "
             "not memory beyond the arena size."]
    return "\n".join([title, fmt(header), *(fmt(line) for line in lines), *notes,
                      f"plan hash {result.plan_hash}"])


def overhead_notes(result) -> list[str]:
    """A line for each figure more than 1% above the peak of live bytes: why,
    and which option lowers it."""
    notes = []
    rows = result.summary_rows()
    for r in rows:
        if r["persistent"] or r["ratio"] is None or r["ratio"] <= 1.01:
            continue
        head = f"{r['arena']} is {r['ratio']:.3f}x its lower bound: "
        if result.strategy == "tmmu":
            notes.append(head + "tmmu, the specification's slot colouring, rounds every slot up to "
                                "its largest tensor; --strategy auto (the default) places tensors "
                                "at byte offsets")
        elif result.strategy not in SEARCH_STRATEGIES:  # greedy_by_size, best_fit
            notes.append(head + f"{result.strategy} is one greedy pass; --strategy auto (the "
                                f"default) searches further")
        elif not r["optimal"]:
            notes.append(head + f"the search stopped at its work budget having proven no plan "
                                f"below {format_bytes(r['proven_bound'])}; a larger "
                                f"--time-budget-ms searches longer")
    transient = [r["arena"] for r in rows if not r["persistent"]]
    live = result.peak(top=0).live_bytes if result.graph is not None else 0
    if live and result.total_bytes > 1.01 * live:
        head = (f"total {format_bytes(result.total_bytes)} is {result.total_bytes / live:.3f}x the "
                f"{format_bytes(live)} live at the peak over all arenas: ")
        if len(transient) > 1:
            notes.append(head + f"{', '.join(transient)} each peak at their own step; pooled arenas "
                                f"(the default: drop --separate-arenas) plan them as one")
        elif not notes:   # every arena at its bound: what is left is padding
            alignment = max(r["alignment"] for r in result._arena_rows)
            notes.append(head + f"the rest is alignment padding (every tensor starts on a "
                                f"{alignment}-byte boundary; small tensors pay most); a smaller "
                                f"--alignment lowers it where the runtime allows")
    return notes


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if (args.graph is None) == (args.example is None):
        _parser().error("give a GRAPH file or --example (not both)")
    if args.graph is not None and args.graph.endswith(".pte"):
        return _program(args)
    if args.replan:
        _parser().error("--replan takes an ExecuTorch program (.pte)")
    try:
        shapes = parse_input_shapes(args.input_shape)
        symbols = parse_symbol_values(args.shape)
        determinism = determinism_kwargs(args)
        check_output_path(args.json, "--json")
        check_output_path(args.plot, "--plot")
    except (ValueError, OSError) as e:
        _parser().error(str(e))
    try:
        source = (examples.load(args.example) if args.example is not None
                  else load_model_or_graph(args.graph, shapes))
        if symbols:
            source = resolve_at(source.to_dict(), symbols)
        result = plan(source, mode=args.mode, strategy=args.strategy, alignment=args.alignment,
                      fit=args.fit, time_budget_ms=args.time_budget_ms,
                      arena_layout=layout_of(args), **determinism)
    except KeyError as e:  # an unknown --example: its message lists the names
        print(f"emel-plan: {e.args[0]}", file=sys.stderr)
        return 1
    except (OSError, ValueError, ImportError) as e:  # PlanError is a ValueError
        print(f"emel-plan: {e}", file=sys.stderr)
        return 1
    out = sys.stdout
    if args.json == "-":
        out.write(result.to_json(indent=1) + "\n")
        return 0
    print(summary(result))
    for note in overhead_notes(result):
        print(f"note: {note}")
    hint = mode_hint(result.graph, args.mode)
    if hint:
        print(hint)
    if args.why:
        print(result.peak(top=args.top))
    if args.json:
        if not write_output(args.json, result.to_json(indent=1) + "\n", "emel-plan"):
            return 1
        print(f"plan written to {args.json}")
    if args.plot:
        try:
            result.plot().savefig(args.plot, dpi=120)
        except (ImportError, ValueError, OSError) as e:
            print(f"emel-plan: cannot write the plot: {e}", file=sys.stderr)
            return 1
        print(f"plot written to {args.plot}")
    return 0


def _program(args) -> int:
    """emel-plan MODEL.pte [--replan -o OUT]: an ExecuTorch program's buffers, re-planned."""
    if args.replan and not args.output:
        _parser().error("--replan needs -o OUT.pte")
    try:
        from . import executorch as et
        data = read_input_file(args.graph)   # a regular file, of bounded size
        strategy = args.strategy
        kw = dict(strategy=strategy, time_budget_ms=args.time_budget_ms, alignment=args.alignment)
        rows = et.report(data, **kw)
        new = et.replan(data, **kw) if args.replan else None
    except (OSError, ValueError, ImportError) as e:  # PlanError is a ValueError
        print(f"emel-plan: {e}", file=sys.stderr)
        return 1
    print(f"{args.graph}: planned buffers, the program's against emel {strategy}")
    print(f"{'method':<16} {'mem_id':>6} {'tensors':>7} {'program':>14} {'emel':>14} {'bound':>14}  proven")
    for r in rows:
        print(f"{r.method:<16} {r.mem_id:>6} {r.tensors:>7} {r.original:>14,} {r.emel:>14,} "
              f"{r.lower_bound:>14,}  {'yes' if r.optimal else 'no'}")
    if new is not None:
        Path(args.output).write_bytes(new)
        kept = sum(min(r.emel, r.original) for r in rows)
        print(f"re-planned program written to {args.output}: {kept:,} planned bytes "
              f"(was {sum(r.original for r in rows):,})")
    return 0


def entry() -> None:
    """Console-script entry: like main(), but quiet when the reader closes the pipe."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # `emel-plan ... | head`: stop quietly; point stdout at devnull so the
        # interpreter's final flush does not raise again.
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    entry()
