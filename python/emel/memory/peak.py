"""Plan.peak(): why is the peak this high?

The peak is the execution step where the most bytes are live (storage
tensors only: views own no bytes). The report names the node running there
(and its module, when the importer recorded one), the largest tensors live at
that step with their bytes, role, producer, module and share of the peak, and
splits the live bytes into what a user can act on: parameters, gradients,
optimizer state, activations saved for backward, temporaries, inputs and
outputs. ``emel-plan --why`` prints it; Jupyter shows its HTML table.
"""

from __future__ import annotations

import html
from dataclasses import asdict, dataclass, field

import numpy as np

from .errors import PlanError, is_int
from .formats import format_bytes
from .plan_data import register_plan_method

#: The categories of the breakdown, in the order they are reported.
CATEGORIES = ("parameters", "gradients", "optimizer_state", "saved_activations", "temporaries",
              "inputs", "outputs")


@dataclass(frozen=True)
class PeakTensor:
    """One tensor live at the peak."""
    id: str
    bytes: int
    role: str
    category: str
    arena: str
    producer: str | None      # the node that writes it (None: an input or parameter)
    module: str | None        # the model's module path, when the importer kept it
    share: float              # bytes / live bytes at the peak
    birth: int
    death: int


@dataclass(frozen=True)
class PeakReport:
    """What is live at the peak step, and why."""
    graph: str
    mode: str
    strategy: str
    arena: str | None          # None: every arena together
    step: int
    node: str | None
    op: str | None
    phase: str | None
    module: str | None
    live_bytes: int            # bytes live at the peak step (the peak)
    planned_bytes: int         # what the plan reserves for the same arenas
    live_tensors: int
    tensors: list[PeakTensor] = field(default_factory=list)
    breakdown: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        where = self.arena or "all arenas"
        running = self.node or "-"
        if self.op:
            running += f" ({self.op}"
            running += f", {self.phase})" if self.phase else ")"
        lines = [f"peak of {self.graph or '(unnamed)'} ({self.mode}, {self.strategy}), {where}: "
                 f"{format_bytes(self.live_bytes)} in {self.live_tensors} live "
                 f"tensor{'s' if self.live_tensors != 1 else ''} at step {self.step}; the plan "
                 f"reserves {format_bytes(self.planned_bytes)}",
                 f"running: {running}" + (f" in {self.module}" if self.module else "")]
        parts = [f"{name.replace('_', ' ')} {format_bytes(n)} ({_share(n, self.live_bytes)})"
                 for name, n in self.breakdown.items() if n]
        lines.append("by kind: " + ", ".join(parts))
        rows = [(t.id, format_bytes(t.bytes), _share(t.bytes, self.live_bytes), t.category.replace("_", " "),
                 t.producer or "-", t.module or "-") for t in self.tensors]
        header = ("tensor", "bytes", "share", "kind", "producer", "module")
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        fmt = lambda r: "  ".join(  # noqa: E731
            c.rjust(w) if i in (1, 2) else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
        lines.append(f"top {len(rows)} live tensors:")
        lines.extend("  " + fmt(r).rstrip() for r in [header, *rows])
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        esc = html.escape
        body = "".join(
            f"<tr><td>{esc(t.id)}</td><td>{format_bytes(t.bytes)}</td>"
            f"<td>{_share(t.bytes, self.live_bytes)}</td><td>{esc(t.category.replace('_', ' '))}</td>"
            f"<td>{esc(t.producer or '-')}</td><td>{esc(t.module or '-')}</td></tr>"
            for t in self.tensors)
        kinds = ", ".join(f"{esc(k.replace('_', ' '))} {format_bytes(n)}"
                          for k, n in self.breakdown.items() if n)
        title = esc(f"{format_bytes(self.live_bytes)} live at step {self.step} "
                    f"({self.node or '-'}{' in ' + self.module if self.module else ''}), "
                    f"{self.arena or 'all arenas'}")
        return (f"<div><b>Peak</b> {title}<br>{kinds}<table><tr><th>tensor</th><th>bytes</th>"
                f"<th>share</th><th>kind</th><th>producer</th><th>module</th></tr>{body}</table></div>")


def _share(n: int, total: int) -> str:
    return f"{n / total:.1%}" if total else "-"


def saved_storages(plan, graph) -> frozenset:
    """The storage tensors kept for backward: those flagged saved_for_backward
    and those a flagged view (or a view of a view) lives in, by the plan's own
    view roots. A training import often saves a layer's output through
    `detach` or `view`, so the flag sits on the view while the bytes are the base's."""
    flagged = {t["id"] for t in graph.tensors if t.get("saved_for_backward")}
    ids, root = plan.tensor_ids, np.asarray(plan._core.root).tolist()
    return frozenset(ids[root[i]] for i, tid in enumerate(ids) if tid in flagged)


def category(entry: dict, saved: frozenset = frozenset()) -> str:
    """The breakdown category of a graph tensor entry; ``saved``: the
    storages kept for backward (:func:`saved_storages`)."""
    role = entry["role"]
    if role == "parameter":
        return "parameters"
    if role == "gradient":
        return "gradients"
    if role == "optimizer_state":
        return "optimizer_state"
    if role == "input":
        return "inputs"
    if role == "output":
        return "outputs"
    return ("saved_activations" if entry.get("saved_for_backward") or entry["id"] in saved
            else "temporaries")


def live_curve(plan, arena: str | None = None) -> np.ndarray:
    """Bytes of storage tensors live at each step, in one arena or (None) all of them.

    An in-place result and its victim count once: they are the same bytes, so
    the maximum is the plan's lower bound, never above what the plan reserves
    (``peak_live_bytes`` counts both)."""
    rows = _rows(plan, arena)
    steps = max(int(plan.steps), 1)
    sizes = _sizes(plan, rows)
    delta = np.zeros(steps + 1, dtype=sizes.dtype)
    np.add.at(delta, _births(plan)[rows], sizes)
    np.add.at(delta, plan.deaths[rows].astype(np.int64) + 1, -sizes)
    return np.cumsum(delta[:-1])


def _sizes(plan, rows: np.ndarray) -> np.ndarray:
    """The rows' sizes as int64, or as Python ints when their sum reaches 2^63
    (tensors near 2^64 bytes): sums of them must stay exact."""
    sizes = plan.sizes[rows]
    if len(sizes) and int(sizes.max()) * len(sizes) >= 2**63:
        return sizes.astype(object)
    return sizes.astype(np.int64)


def _births(plan) -> np.ndarray:
    """Births, counting an in-place result from the step after it takes its victim's
    bytes: at that step the victim already holds them (no double count). A result
    that dies at that same step is never counted apart from its victim (its birth
    passes its death), so no step counts more than the plan's lower bound."""
    births = plan.births.astype(np.int64)
    inplace = np.asarray(plan._core.inplace_of) >= 0
    return np.where(inplace, births + 1, births)


def _rows(plan, arena: str | None) -> np.ndarray:
    core = plan._core
    mask = np.asarray(core.view_base) < 0
    if arena is not None:
        names = [row["name"] for row in plan._arena_rows]
        if arena not in names:
            raise PlanError("INVALID_IR_SHAPES",
                            f"peak(arena={arena!r}): the plan has no such arena (arenas: "
                            f"{', '.join(names)})", arena=arena)
        mask &= np.asarray(core.arena_of) == names.index(arena)
    return np.flatnonzero(mask)


def peak(plan, arena: str | None = None, top: int = 10) -> PeakReport:
    """The report of ``plan``'s peak step (see the module docstring).

    ``arena``: one arena, or None for every arena together (parameters and
    gradients included: the whole footprint). ``top``: how many of the largest
    live tensors to list. Ties go to the earlier step and the earlier tensor,
    so the report is deterministic.
    """
    if not is_int(top) or top < 0:
        raise PlanError("INVALID_IR_SHAPES", f"peak(top={top!r}): top must be an integer >= 0")
    graph = plan.graph
    if graph is None:
        raise PlanError("INVALID_IR_SHAPES", "peak() needs the graph the plan was made from "
                                             "(a plan restored without its graph has none)")
    curve = live_curve(plan, arena)
    step = int(np.argmax(curve)) if len(curve) else 0
    rows = _rows(plan, arena)
    births, deaths = _births(plan)[rows], plan.deaths[rows]
    live = rows[(births <= step) & (deaths >= step)]
    sizes = _sizes(plan, live)
    total = int(sizes.sum())

    entries = {t["id"]: t for t in graph.tensors}
    producer = {}
    for node in graph.nodes:
        for out in node["outputs"]:
            producer.setdefault(out, node["id"])
    names = [row["name"] for row in plan._arena_rows]
    arena_of = np.asarray(plan._core.arena_of)
    ids = plan.tensor_ids

    saved = saved_storages(plan, graph)
    breakdown = dict.fromkeys(CATEGORIES, 0)
    for i, size in zip(live.tolist(), sizes.tolist()):
        breakdown[category(entries[ids[i]], saved)] += size
    order = sorted(range(len(live)), key=lambda k: (-int(sizes[k]), int(live[k])))[:top]
    tensors = []
    for k in order:
        i = int(live[k])
        entry = entries[ids[i]]
        tensors.append(PeakTensor(
            id=ids[i], bytes=int(sizes[k]), role=entry["role"], category=category(entry, saved),
            arena=names[int(arena_of[i])], producer=producer.get(ids[i]),
            module=entry.get("module"), share=(int(sizes[k]) / total) if total else 0.0,
            birth=int(plan.births[i]), death=int(plan.deaths[i])))

    order_ids = graph.execution_order or [n["id"] for n in graph.nodes]
    node = None
    if order_ids and step < len(order_ids):
        node = next((n for n in graph.nodes if n["id"] == order_ids[step]), None)
    module = None
    if node is not None:
        module = node.get("module") or next(
            (entries[o].get("module") for o in node["outputs"]
             if o in entries and entries[o].get("module")), None)
    planned = (plan.arenas[arena].size if arena is not None else plan.total_bytes)
    return PeakReport(
        graph=plan.graph_name, mode=plan.mode, strategy=plan.strategy, arena=arena, step=step,
        node=node["id"] if node else None, op=node["op"] if node else None,
        phase=node.get("phase") if node else None, module=module, live_bytes=total,
        planned_bytes=int(planned), live_tensors=len(live), tensors=tensors, breakdown=breakdown)


# Plan.peak() (emel.memory.plan_data, a lower layer) calls peak through this slot.
register_plan_method("peak", peak)
