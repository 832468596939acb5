"""What fits in my budget? memory_curve(), max_fit() and the emel-fit command.

A dimension of the model (batch, sequence length, context) is swept or
searched. The graph is either a Graph (or document, or path) with a symbolic
dimension named ``dim`` (docs/dynamic-shapes-and-sharding.md), planned with
the symbol at each value and every other symbol at its maximum, or a
function ``value -> graph`` (e.g. a lambda that traces a model with
``from_torch`` at that batch size).

Plans need not grow with the dimension (a different size can change which
placement wins), so max_fit() trusts plans, not a model of them: every answer
comes with the plan that proves it fits and the plan of the next value that
proves it does not.

    emel-fit MODEL.onnx|GRAPH.json --budget 24GiB --dim batch [--strategy auto]
             [--mode M] [--min N] [--max N] [--arena NAME] [--curve V,V,...]
             [--input-shape NAME=D,D,...] [--separate-arenas] [--json OUT]
    emel-fit --torch MODULE:FUNCTION --budget 24GiB --dim batch [--training [--optimizer adam]] ...

With ``--torch``, ``FUNCTION(value)`` returns ``(model, example_inputs)`` for
that value of the dimension (build the model on the ``meta`` device: nothing is
computed); each value is traced with from_torch.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from .bisection import largest_fitting
from .errors import PlanError, is_int
from .formats import fit_sentence, format_bytes, format_bytes_exact
from .graph import Graph, load_graph
from .planning import MODES, STRATEGIES, mode_hint, plan
from .symbolic import is_symbolic

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9,
          "gb": 10**9, "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30,
          "tib": 2**40}


def parse_bytes(text: Any) -> int:
    """``"24GiB"``, ``"1.5 GB"``, ``"4096"`` or an int -> bytes; ValueError otherwise."""
    if is_int(text):
        if text < 0:
            raise ValueError(f"a byte budget must be >= 0, got {text}")
        return text
    # Exact decimal arithmetic, never float: "9007199254741119" is that many
    # bytes, not 2^53 + 128, and 400 digits are a budget, not an OverflowError.
    # The length bound keeps int() within Python's digit limit.
    m = re.fullmatch(r"\s*([0-9]+)(?:\.([0-9]*))?\s*([A-Za-z]*)\s*", str(text)[:1000])
    if not m or m.group(3).lower() not in _UNITS or len(str(text)) > 1000:
        raise ValueError(f"a byte budget looks like 24GiB, 512MiB, 1.5GB or 4096; got {text!r:.100}")
    whole, frac, unit = m.group(1), m.group(2) or "", _UNITS[m.group(3).lower()]
    return (int(whole + frac) * unit) // 10 ** len(frac)  # whole bytes, rounded down


def _symbols(doc: dict) -> dict[str, tuple[int, int]]:
    out = {}
    for t in doc["tensors"]:
        for d in t["shape"]:
            if is_symbolic(d):
                out.setdefault(d["sym"], (int(d.get("min") or 0), int(d["max"])))
    return out


def _at(doc: dict, dim: str, value: int) -> dict:
    """The document with ``dim`` = value and every other symbol at its maximum.

    Unlike shapes.resolve_at, a value above the declared maximum is allowed:
    the point of a fit is to ask what a larger value would need.
    """
    out = dict(doc)
    out["tensors"] = [dict(t, shape=[(value if d["sym"] == dim else d["max"]) if is_symbolic(d)
                                     else d for d in t["shape"]])
                      for t in doc["tensors"]]
    return out


def graph_at(graph: Any, dim: str) -> tuple[Callable[[int], Any], tuple[int, int] | None]:
    """(value -> graph, the symbol's declared (min, max) or None) for a graph or a function."""
    if callable(graph) and not isinstance(graph, Graph):
        return graph, None
    doc = load_graph(graph).to_dict()
    symbols = _symbols(doc)
    if dim not in symbols:
        known = ", ".join(sorted(symbols)) or "none"
        raise PlanError("INVALID_IR_SHAPES",
                        f"dim={dim!r} is not a symbolic dimension of graph {doc.get('name')!r} "
                        f"(its symbols: {known}); give a graph with {{\"sym\": {dim!r}, \"max\": N}} "
                        f"dims, or a function value -> graph (on the command line: emel-fit --torch "
                        f"MODULE:FUNCTION traces a PyTorch model at each value)")
    return (lambda value: _at(doc, dim, value)), symbols[dim]





def _check_value(value: Any, dim: str) -> int:
    if not is_int(value) or value < 0:
        raise PlanError("INVALID_IR_SHAPES", f"{dim} = {value!r}: values must be integers >= 0")
    return value


def _measure(result, arena: str | None) -> int:
    if arena is None:
        return result.total_bytes
    arenas = result.arenas
    if arena not in arenas:
        raise PlanError("INVALID_IR_SHAPES", f"arena={arena!r}: the plan has no such arena "
                                             f"(arenas: {', '.join(arenas)})", arena=arena)
    return arenas[arena].size


def memory_curve(graph: Any, dim: str, values: Iterable[int], *, arena: str | None = None,
                 **plan_kwargs) -> list[dict]:
    """Plan ``graph`` at each value of ``dim``; one row per value, in the order given.

    Each row: ``value``, ``bytes`` (the plan's total, or ``arena``'s size),
    ``lower_bound`` (the same arenas' bound), ``total_bytes`` and ``arenas``
    (name -> size and lower bound). ``plan_kwargs`` go to :func:`emel.memory.plan`.
    """
    make, _ = graph_at(graph, dim)
    rows = []
    for value in values:
        result = plan(make(_check_value(value, dim)), **plan_kwargs)
        arenas = result.arenas
        rows.append({
            "value": value, "bytes": _measure(result, arena),
            "lower_bound": (sum(a.lower_bound for a in arenas.values()) if arena is None
                            else arenas[arena].lower_bound),
            "total_bytes": result.total_bytes,
            "arenas": {a.name: {"size": a.size, "lower_bound": a.lower_bound}
                       for a in arenas.values()}})
    return rows


@dataclass
class FitResult:
    """The answer of max_fit(): the largest value found to fit, with the proof and counter-proof."""
    dim: str
    budget: int
    value: int | None          # None: not even the smallest value fits
    plan: Any                  # the Plan at ``value`` (fits), or None
    next_value: int | None     # value + 1 (or the smallest value), None when value is the maximum
    next_plan: Any             # its Plan (does not fit), or None
    bytes: int | None          # what ``plan`` needs
    next_bytes: int | None     # what ``next_plan`` needs
    tried: dict[int, int] = field(default_factory=dict)   # every value planned -> bytes

    def __str__(self) -> str:
        return fit_sentence(self.dim, self.budget, self.value, self.bytes, self.next_value, self.next_bytes)

    def to_dict(self) -> dict:
        return {"dim": self.dim, "budget": self.budget, "value": self.value, "bytes": self.bytes,
                "next_value": self.next_value, "next_bytes": self.next_bytes,
                "plan_hash": self.plan.plan_hash if self.plan is not None else None,
                "next_plan_hash": self.next_plan.plan_hash if self.next_plan is not None else None,
                "tried": {str(k): v for k, v in sorted(self.tried.items())}}


def max_fit(graph: Any, budget_bytes: Any, dim: str, *, lo: int | None = None,
            hi: int | None = None, arena: str | None = None,
            on_probe: Callable[[int, int], None] | None = None, **plan_kwargs) -> FitResult:
    """The largest value of ``dim`` in ``[lo, hi]`` whose plan needs at most ``budget_bytes``.

    ``budget_bytes``: an int or text (``"24GiB"``). ``lo``/``hi`` default to
    the symbol's declared range (required for a function graph). Bytes are
    the plan's total, or one ``arena``'s size. Bisection keeps a planned
    value that fits below a planned value that does not, so the answer is
    always backed by two real plans: ``plan`` (value fits) and ``next_plan``
    (value + 1 does not). If the need is not monotone in the value, a larger
    value past a non-fitting one may fit too: memory_curve() shows the whole
    curve.
    """
    budget = parse_bytes(budget_bytes)
    make, declared = graph_at(graph, dim)
    if declared is not None:
        lo = declared[0] if lo is None else lo
        hi = declared[1] if hi is None else hi
    if lo is None or hi is None:
        raise PlanError("INVALID_IR_SHAPES", f"max_fit over a function needs lo= and hi= for {dim!r}")
    lo, hi = _check_value(lo, dim), _check_value(hi, dim)
    if lo > hi:
        raise PlanError("INVALID_IR_SHAPES", f"max_fit: lo={lo} is above hi={hi} for {dim!r}")
    plans, tried = {}, {}

    def probe(value: int) -> bool:
        if value not in plans:
            plans[value] = plan(make(value), **plan_kwargs)
            tried[value] = _measure(plans[value], arena)
            if on_probe is not None:   # progress: a traced model takes seconds a value
                on_probe(value, tried[value])
        return tried[value] <= budget

    def result(value, nxt) -> FitResult:
        return FitResult(dim=dim, budget=budget, value=value, plan=plans.get(value),
                         next_value=nxt, next_plan=plans.get(nxt), bytes=tried.get(value),
                         next_bytes=tried.get(nxt), tried=tried)

    return result(*largest_fitting(probe, lo, hi))


# ---------------------------------------------------------------------------
# emel-fit
# ---------------------------------------------------------------------------
def torch_at(spec: str, training: bool, optimizer: str | None) -> Callable[[int], Graph]:
    """value -> the Graph of ``FUNCTION(value)``'s model traced with from_torch."""
    from .import_cli import load_factory, trace_made
    factory = load_factory(spec)
    return lambda value: trace_made(factory(value), spec, training, None, optimizer)


def _progress(dim: str, budget: int) -> Callable[[int, int], None]:
    """One line on standard error per value planned: a search over traced
    models takes seconds a value, and silence reads as a hang."""
    def report(value: int, need: int) -> None:
        print(f"emel-fit: {dim}={value}: {format_bytes(need)} "
              f"({'fits' if need <= budget else 'over'})", file=sys.stderr, flush=True)
    return report


def onnx_at(path: str, dim: str, input_shapes: dict | None = None) -> Callable[[int], Graph]:
    """value -> the ONNX model imported with every input dimension named ``dim`` at value.

    Other symbolic input dimensions need ``input_shapes`` (a fixed shape per input),
    where ``dim`` itself may stand for a size (``x=B,3,224,224``)."""
    from .onnx_importer import _load_shapes_only, _require_onnx, from_onnx
    onnx = _require_onnx()
    model = _load_shapes_only(onnx, path)
    fixed = dict(input_shapes or {})
    named = {}
    for name, dims in list(fixed.items()):
        if dim in dims:                          # x=B,3,32,32: B is searched, the rest fixed
            named[name] = [None if d == dim else d for d in fixed.pop(name)]
    for info in model.graph.input:
        dims = info.type.tensor_type.shape.dim
        if info.name in fixed or info.name in named or not any(d.dim_param == dim for d in dims):
            continue
        named[info.name] = [(None if d.dim_param == dim else
                             (d.dim_value if d.HasField("dim_value") else d.dim_param)) for d in dims]
    if not named:
        held = [name for name in fixed
                for info in model.graph.input if info.name == name
                and any(d.dim_param == dim for d in info.type.tensor_type.shape.dim)]
        also = (f" that --input-shape leaves free ({held[0]!r} is fixed there: write {dim} where "
                f"it goes)") if held else ""
        raise PlanError("INVALID_IR_SHAPES",
                        f"--dim {dim}: no input of {path} has a dimension named {dim!r}{also}")

    def make(value: int) -> Graph:
        shapes = dict(fixed)
        for name, dims in named.items():
            for d in dims:
                if isinstance(d, str):
                    example = ",".join(dim if e is None else ("D" if isinstance(e, str) else str(e))
                                       for e in dims)
                    raise PlanError("INVALID_IR_SHAPES",
                                    f"input {name!r} of {path} also has the symbolic dimension "
                                    f"{d!r}; fix it with --input-shape {name}={example}", tensor=name)
            shapes[name] = [value if d is None else d for d in dims]
        return from_onnx(model, input_shapes=shapes)
    return make


def _parser() -> argparse.ArgumentParser:
    from .cli import add_input_shape_option, add_layout_option
    from .import_cli import add_optimizer_option
    p = argparse.ArgumentParser(
        prog="emel-fit",
        description="The largest value of a model dimension (batch, sequence) whose plan fits "
                    "a memory budget, proven by planning it and the next value.")
    p.add_argument("model", nargs="?", help="an emel.graph/1 JSON file with symbolic dimensions, "
                                            "an ONNX model (.onnx) with a named input dimension, "
                                            "or a GGUF model (.gguf; --dim ctx or ubatch)")
    p.add_argument("--torch", metavar="MODULE:FUNCTION",
                   help="a PyTorch model instead: FUNCTION(value) returns (model, example_inputs) "
                        "at that value of --dim (MODULE may be a FILE.py path)")
    p.add_argument("--training", action="store_true",
                   help="with --torch: plan a training step (forward, backward and, with "
                        "--optimizer, the optimizer's state and step)")
    add_optimizer_option(p)
    p.add_argument("--budget", required=True, metavar="BYTES",
                   help="the memory budget: 24GiB, 512MiB, 1.5GB or a number of bytes")
    p.add_argument("--dim", required=True, metavar="NAME",
                   help="the symbolic dimension to search (e.g. batch, seq)")
    p.add_argument("--min", type=int, default=None, metavar="N", help="smallest value (default: "
                   "the symbol's declared minimum; 1 for ONNX)")
    p.add_argument("--max", type=int, default=None, metavar="N", help="largest value (default: "
                   "the symbol's declared maximum; 4096 for ONNX)")
    p.add_argument("--mode", choices=MODES, default=None,
                   help="lifetime mode (default: backward with --training, else inference)")
    p.add_argument("--strategy", choices=STRATEGIES, default="auto",
                   help="placement strategy (default: auto, the smallest plans)")
    p.add_argument("--arena", default=None, metavar="NAME",
                   help="count only this arena (default: every arena, parameters included)")
    p.add_argument("--curve", default=None, metavar="V,V,...",
                   help="also print the plan's bytes at these values")
    p.add_argument("--json", default=None, metavar="OUT", help="write the answer as JSON to OUT")
    add_input_shape_option(p)
    add_layout_option(p)
    from .gguf.fit import add_gguf_options
    add_gguf_options(p)
    return p


def main(argv: list[str] | None = None) -> int:
    from .cli import check_output_path, layout_of, parse_input_shapes, write_output
    from .import_cli import check_training_flags
    p = _parser()
    args = p.parse_args(argv)
    try:
        check_output_path(args.json, "--json", dash_is_stdout=False)
        budget = parse_bytes(args.budget)
        # --dim may stand for a size in --input-shape, unless it reads as one itself.
        shapes = parse_input_shapes(args.input_shape, symbols=() if args.dim.isdigit() else (args.dim,))
        curve_values = ([int(v) for v in args.curve.split(",") if v.strip()]
                        if args.curve else [])
    except ValueError as e:
        p.error(str(e))
    if (args.model is None) == (args.torch is None):
        p.error("give a MODEL file or --torch MODULE:FUNCTION (one of them)")
    if shapes and args.torch is not None:     # FUNCTION(value) makes its own inputs
        p.error("--input-shape applies to ONNX models only; --torch FUNCTION(value) returns its inputs")
    check_training_flags(p, args)
    if args.model is not None and args.model.lower().endswith(".gguf"):
        from .gguf.fit import run as run_gguf  # llama.cpp's buffers for a GGUF model (docs/gguf.md)
        return run_gguf(args, budget)
    mode = args.mode or ("backward" if args.training else "inference")
    kwargs = {"mode": mode, "strategy": args.strategy, "arena_layout": layout_of(args)}
    try:
        lo, hi = args.min, args.max
        if args.torch is not None:
            graph = torch_at(args.torch, args.training, args.optimizer)
            lo, hi = (1 if lo is None else lo), (4096 if hi is None else hi)
        elif args.model.lower().endswith(".onnx"):
            graph = onnx_at(args.model, args.dim, shapes)
            lo, hi = (1 if lo is None else lo), (4096 if hi is None else hi)
        else:
            if shapes:
                raise ValueError("--input-shape applies to ONNX models only")
            graph = load_graph(args.model)
            hint = mode_hint(graph, mode)
            if hint:
                print(f"emel-fit: {hint}", file=sys.stderr)
        answer = max_fit(graph, budget, args.dim, lo=lo, hi=hi, arena=args.arena,
                         on_probe=_progress(args.dim, budget), **kwargs)
        rows = memory_curve(graph, args.dim, curve_values, arena=args.arena, **kwargs)
    except (OSError, ValueError, ImportError) as e:  # PlanError is a ValueError
        print(f"emel-fit: {e}", file=sys.stderr)
        return 1
    print(answer)
    for value in sorted(answer.tried):
        mark = "fits" if answer.tried[value] <= budget else "over"
        print(f"  {args.dim}={value:<8} {format_bytes(answer.tried[value]):>12}  {mark}")
    if rows:
        print(f"curve ({args.strategy}):")
        for row in rows:
            print(f"  {args.dim}={row['value']:<8} {format_bytes(row['bytes']):>12}  "
                  f"bound {format_bytes(row['lower_bound'])}")
    if args.json:
        doc = answer.to_dict()
        doc["curve"] = rows
        if not write_output(args.json, json.dumps(doc, indent=1, sort_keys=True) + "\n", "emel-fit"):
            return 1
    return 0 if answer.value is not None else 1


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    entry()
