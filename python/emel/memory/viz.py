"""Pictures of plans (matplotlib; ``pip install '.[plot]' from a checkout``).

- :func:`plot_memory`: bytes over execution steps for one arena — the live
  bytes, the placement's high-water mark, the lower bound and the arena size.
- :func:`plot_placement`: every storage tensor of one arena as a rectangle
  from its birth to its death (x, steps) and from its offset to offset + size
  (y, bytes), coloured by role; the largest tensors are labelled.
- :func:`plot_strategies`: the placement picture of one graph under several
  strategies, side by side on one byte scale.
- :func:`plot`: memory over steps above the placement, sharing the step axis
  (what ``Plan.plot()`` and ``emel-plan --plot`` draw).

Every function returns a ``matplotlib.figure.Figure`` made without pyplot, so
nothing accumulates in pyplot's figure list; save it with ``fig.savefig``.
Views are not drawn: they occupy their root tensor's bytes.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .graph import load_graph
from .formats import format_bytes
from .peak import live_curve, saved_storages
from .plan_data import register_plan_method
from .planning import STRATEGIES, plan as make_plan

#: colour of each role (colour-blind-safe palette, Okabe & Ito).
ROLE_COLORS = {
    "input": "#0072B2", "parameter": "#999999", "activation": "#E69F00",
    "gradient": "#D55E00", "optimizer_state": "#CC79A7", "output": "#009E73",
    # activations kept for backward, apart from the temporaries (training plots)
    "saved activation": "#56B4E9",
}
KINDS = ("input", "parameter", "saved activation", "activation", "gradient", "optimizer_state",
         "output")


def _require_matplotlib():
    try:
        from matplotlib.figure import Figure
    except ImportError:  # pragma: no cover - exercised only without matplotlib
        raise ImportError("emel.memory.viz needs matplotlib: pip install 'emel[plot]' (in a checkout: pip install '.[plot]')") from None
    return Figure


_UNITS = ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))


def _unit(max_bytes: int, forced: str | None = None) -> tuple[float, str]:
    if forced is not None:
        return dict((name, float(scale)) for scale, name in _UNITS + ((1, "B"),))[forced], forced
    for scale, name in _UNITS:
        if max_bytes >= 2 * scale:
            return float(scale), name
    return 1.0, "B"


def default_arena(plan) -> str:
    """The arena worth drawing: the largest non-persistent one (else the largest)."""
    arenas = plan.arenas
    if not arenas:
        raise ValueError("the plan has no arena to draw")
    movable = [a for a in arenas.values() if not a.persistent] or list(arenas.values())
    return max(movable, key=lambda a: (a.size, a.name)).name


def _arena_index(plan, arena: str) -> int:
    names = [row["name"] for row in plan._arena_rows]
    if arena not in names:
        raise KeyError(f"the plan has no arena {arena!r}; arenas: {', '.join(names)}")
    return names.index(arena)


def _arena_info(plan, arena: str):
    _arena_index(plan, arena)  # a clear KeyError for an unknown name
    return plan.arenas[arena]


def _storage_rows(plan, arena: str) -> np.ndarray:
    """Indices of the storage tensors (not views) of ``arena``, in tensor order."""
    index = _arena_index(plan, arena)
    core = plan._core
    mask = (np.asarray(core.arena_of) == index) & (np.asarray(core.view_base) < 0)
    return np.flatnonzero(mask)


def live_bytes(plan, arena: str) -> np.ndarray:
    """Bytes of the arena's storage tensors live at each step, an in-place pair
    counted once (its maximum is the lower bound)."""
    _arena_index(plan, arena)  # a clear KeyError for an unknown name
    return live_curve(plan, arena)


def high_water(plan, arena: str) -> np.ndarray:
    """The highest byte any live tensor of the arena reaches, at each step."""
    rows = _storage_rows(plan, arena)
    steps = max(int(plan.steps), 1)
    top = np.zeros(steps, dtype=np.int64)
    ends = (plan.offsets[rows] + plan.sizes[rows]).astype(np.int64)
    for b, d, end in zip(plan.births[rows].tolist(), plan.deaths[rows].tolist(), ends.tolist()):
        np.maximum(top[b:d + 1], end, out=top[b:d + 1])
    return top


def _roles(plan, graph) -> list[str]:
    """Kind per tensor (a role, or "saved activation" for an activation kept for
    backward); without a graph, persistent arenas read as parameters."""
    graph = graph if graph is not None else getattr(plan, "graph", None)
    if graph is not None:
        graph = load_graph(graph)
        saved = saved_storages(plan, graph)
        by_id = {t["id"]: ("saved activation" if t["role"] == "activation" and t["id"] in saved
                           else t["role"]) for t in graph.tensors}
        return [by_id.get(tid, "activation") for tid in plan.tensor_ids]
    persistent = [row["persistent"] for row in plan._arena_rows]
    arena_of = np.asarray(plan._core.arena_of).tolist()
    return ["parameter" if persistent[a] else "activation" for a in arena_of]


def _graph(plan, graph):
    graph = graph if graph is not None else getattr(plan, "graph", None)
    return load_graph(graph) if graph is not None else None


def tensor_labels(plan, graph=None) -> list[str]:
    """A label per tensor: its module path when the importer kept one
    (``layers.3.mlp.up_proj``), else its id."""
    graph = _graph(plan, graph)
    if graph is None:
        return list(plan.tensor_ids)
    module = {t["id"]: t.get("module") for t in graph.tensors}
    return [module.get(tid) or tid for tid in plan.tensor_ids]


def backward_start(plan, graph=None) -> int | None:
    """The first step that runs a backward node (None: no phases, or no backward)."""
    graph = _graph(plan, graph)
    if graph is None:
        return None
    phase = {n["id"]: n.get("phase") for n in graph.nodes}
    order = graph.execution_order or [n["id"] for n in graph.nodes]
    return next((k for k, nid in enumerate(order) if phase.get(nid) == "backward"), None)


def _mark_backward(ax, plan, graph, text: bool) -> None:
    start = backward_start(plan, graph)
    if start:
        ax.axvline(start, color="#555555", linestyle=":", linewidth=1.2,
                   label="backward starts" if text else None)


def _legend_outside(ax) -> None:
    """Legends beside the axes, never over the data."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
              fontsize="small", frameon=False)


def plot_memory(plan, arena: str | None = None, ax=None, *, log: bool = False,
                annotate: int = 3, graph=None):
    """Bytes over steps for one arena (default: :func:`default_arena`).

    The peak is marked and annotated with its ``annotate`` largest live
    tensors (by module path where known; :meth:`Plan.peak`); a dotted line
    marks where the backward pass starts. ``log=True``: a logarithmic byte
    axis, so one huge tensor (the logits) does not flatten the rest.
    """
    Figure = _require_matplotlib()
    arena = arena or default_arena(plan)
    info = _arena_info(plan, arena)
    fig = ax.figure if ax is not None else Figure(figsize=(10, 3.5), layout="constrained")
    ax = ax if ax is not None else fig.add_subplot()
    live, top = live_bytes(plan, arena), high_water(plan, arena)
    scale, unit = _unit(max(info.size, int(live.max(initial=0))))
    steps = np.arange(len(live))
    ax.step(steps, live / scale, where="post", color="#0072B2", label="live bytes")
    ax.step(steps, top / scale, where="post", color="#E69F00", alpha=0.8,
            label="placement high-water")
    ax.axhline(info.lower_bound / scale, color="#009E73", linestyle="--",
               label=f"lower bound {format_bytes(info.lower_bound)}")
    ax.axhline(info.size / scale, color="#D55E00", linestyle="-",
               label=f"arena size {format_bytes(info.size)}")
    _mark_backward(ax, plan, graph, text=True)
    ax.set_xlabel("execution step")
    ax.set_ylabel(unit)
    ax.set_xlim(0, max(len(live) - 1, 1))
    upper = max(info.size, int(live.max(initial=0)), 1) / scale
    if log:   # three decades below the top: enough to read the small steps
        ax.set_yscale("log")
        ax.set_ylim(upper / 1000, upper * 1.6)
    else:
        ax.set_ylim(0, upper * 1.08)
    _annotate_peak(ax, plan, arena, graph, scale, unit, annotate)
    ax.set_title(f"{plan.graph_name or 'plan'} — {arena} over steps ({plan.mode}, {plan.strategy})")
    _legend_outside(ax)
    return fig


def _annotate_peak(ax, plan, arena, graph, scale, unit, annotate: int) -> None:
    """A marker on the peak of live bytes, with its largest tensors written beside it."""
    if getattr(plan, "graph", None) is None:    # the report needs the plan's own graph
        return
    curve = live_curve(plan, arena)
    if not len(curve) or curve.max() <= 0:
        return
    report = plan.peak(arena=arena, top=max(annotate, 0))
    labels = dict(zip(plan.tensor_ids, tensor_labels(plan, graph)))
    y = report.live_bytes / scale
    ax.plot([report.step], [y], marker="v", color="#CC0000", markersize=8, linestyle="none",
            label=f"peak {format_bytes(report.live_bytes)} at step {report.step}")
    if annotate > 0 and report.tensors:
        lines = [f"{labels[t.id]}  {format_bytes(t.bytes)} ({t.share:.0%})"
                 for t in report.tensors]
        right = report.step > 0.6 * len(curve)   # keep the text inside the axes
        ax.annotate("\n".join(lines), xy=(report.step, y), xytext=(-12 if right else 12, -4),
                    textcoords="offset points", ha="right" if right else "left", va="top",
                    fontsize=7, color="#660000",
                    bbox=dict(boxstyle="round,pad=0.3", fc="white", ec="#CC0000", alpha=0.9))


def plot_placement(plan, arena: str | None = None, graph=None, ax=None, labels: int = 8,
                   title: str | None = None, unit: str | None = None, *, log: bool = False):
    """Each storage tensor of ``arena`` as a rectangle: x = [birth, death + 1), y = [offset, offset + size).

    ``graph`` gives the roles (default: the graph the plan was made from).
    ``labels``: how many of the largest tensors to name in their rectangle.
    ``unit``: B, KiB, MiB or GiB for the byte axis (default: by the arena size).
    Rectangles are labelled with the tensor's module path when the graph has one.
    ``log=True``: a symmetric-log offset axis (linear up to 1% of the arena,
    logarithmic above), so the small tensors under one huge one get room.
    """
    Figure = _require_matplotlib()
    from matplotlib.collections import PolyCollection

    arena = arena or default_arena(plan)
    info = _arena_info(plan, arena)
    fig = ax.figure if ax is not None else Figure(figsize=(9, 4.5), layout="constrained")
    ax = ax if ax is not None else fig.add_subplot()
    rows = _storage_rows(plan, arena)
    roles = _roles(plan, graph)
    scale, unit = _unit(max(info.size, 1), unit)
    births = plan.births[rows].astype(np.float64)
    deaths = plan.deaths[rows].astype(np.float64) + 1.0
    lows = plan.offsets[rows].astype(np.float64) / scale
    highs = (plan.offsets[rows] + plan.sizes[rows]).astype(np.float64) / scale
    for role in KINDS:
        pick = [k for k, i in enumerate(rows.tolist()) if roles[i] == role]
        if not pick:
            continue
        boxes = [((births[k], lows[k]), (deaths[k], lows[k]), (deaths[k], highs[k]),
                  (births[k], highs[k])) for k in pick]
        ax.add_collection(PolyCollection(
            boxes, facecolors=ROLE_COLORS[role], edgecolors="black", linewidths=0.3,
            alpha=0.85, label=f"{role} ({len(pick)})"))
    if log:   # linear up to 1% of the arena, logarithmic above: the bottom gets a third
        ax.set_yscale("symlog", linthresh=max(info.size, 1) / scale / 100, linscale=1.0)
    _label_largest(ax, plan, rows, births, deaths, lows, highs, labels,
                   y_top=max(info.size, 1) / scale * 1.05, names=tensor_labels(plan, graph),
                   log=log)
    ax.axhline(info.size / scale, color="#D55E00", linewidth=1, label="arena size")
    ax.axhline(info.lower_bound / scale, color="#009E73", linestyle="--", linewidth=1,
               label="lower bound")
    _mark_backward(ax, plan, graph, text=False)
    ax.set_xlim(0, max(int(plan.steps), 1))
    ax.set_ylim(0, max(info.size, 1) / scale * 1.05)
    ax.set_xlabel("execution step")
    ax.set_ylabel(f"offset ({unit})")
    ratio = info.size / info.lower_bound if info.lower_bound else float("nan")
    ax.set_title(title or f"{plan.graph_name or 'plan'} — {arena}: {format_bytes(info.size)}, "
                          f"{ratio:.3f}× the lower bound ({plan.strategy})")
    _legend_outside(ax)
    return fig


def _overlap(p, q) -> bool:
    """Whether boxes (x0, x1, y0, y1) overlap."""
    return p[0] < q[1] and q[0] < p[1] and p[2] < q[3] and q[2] < p[3]


def _label_largest(ax, plan, rows, births, deaths, lows, highs, labels, y_top,
                   fontsize: float = 7.0, names: list[str] | None = None, log: bool = False) -> None:
    """Name the largest rectangles (bytes x steps), biggest first, ties by tensor order.

    Narrow rectangles get vertical text; a label that would cover one already
    placed is skipped for the next largest, so the names stay readable.
    """
    if labels <= 0 or not len(rows):
        return
    span = max(int(plan.steps), 1)
    width_in, height_in = ax.figure.get_size_inches()
    box = ax.get_position()
    # Points per unit of axes fraction, to size text boxes in data-free terms.
    ax_w, ax_h = max(width_in * box.width * 72, 1.0), max(height_in * box.height * 72, 1.0)
    area = plan.sizes[rows].astype(np.float64) * (deaths - births)
    order = sorted(range(len(rows)), key=lambda k: (-area[k], int(rows[k])))
    placed: list[tuple[float, float, float, float]] = []
    for k in order[:labels * 8]:
        if len(placed) == labels:
            break
        name = (names or plan.tensor_ids)[rows[k]]
        if log:   # place by the axis' own transform: the middle of the box as drawn
            to_axes = ax.transScale + ax.transLimits
            y = (to_axes.transform((0, lows[k]))[1] + to_axes.transform((0, highs[k]))[1]) / 2
            mid = to_axes.inverted().transform((0, y))[1]
        else:
            y, mid = (lows[k] + highs[k]) / 2 / y_top, (lows[k] + highs[k]) / 2
        x = (births[k] + deaths[k]) / 2 / span
        narrow = (deaths[k] - births[k]) / span < 0.05
        w, h = len(name) * fontsize * 0.6 / ax_w, fontsize * 1.3 / ax_h
        if narrow:
            w, h = h * ax_h / ax_w, w * ax_w / ax_h
        mine = (x - w / 2, x + w / 2, y - h / 2, y + h / 2)
        if mine[0] < 0 or mine[1] > 1 or mine[2] < 0 or mine[3] > 1:
            continue            # it would be cut at the axes' edge: the next largest instead
        if any(_overlap(mine, other) for other in placed):
            continue
        placed.append(mine)
        ax.text((births[k] + deaths[k]) / 2, mid, name, ha="center",
                va="center", fontsize=fontsize, clip_on=True, rotation=90 if narrow else 0)


def plot(plan, arena: str | None = None, graph=None, labels: int = 8, *, log: bool = False):
    """Memory over steps (top) above the placement picture (bottom) for one arena.

    A persistent arena (parameters) holds the same bytes at every step: its
    placement would be stripes, so it gets its largest tensors as bars
    instead (:func:`plot_persistent`). ``log``: logarithmic byte axes."""
    Figure = _require_matplotlib()
    arena = arena or default_arena(plan)
    if _arena_info(plan, arena).persistent:
        fig = Figure(figsize=(11, 5), layout="constrained")
        plot_persistent(plan, arena, graph=graph, ax=fig.add_subplot(), top=max(labels, 8))
        return fig
    fig = Figure(figsize=(11, 7.5), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[1, 2])
    plot_memory(plan, arena, ax=top, log=log, graph=graph)
    plot_placement(plan, arena, graph=graph, ax=bottom, labels=labels, log=log)
    return fig


def plot_persistent(plan, arena: str, graph=None, ax=None, top: int = 12):
    """A persistent arena as what it holds: its ``top`` largest tensors as
    horizontal bars (bytes, coloured by kind), the rest summed in one bar."""
    Figure = _require_matplotlib()
    info = _arena_info(plan, arena)
    fig = ax.figure if ax is not None else Figure(figsize=(9, 4.5), layout="constrained")
    ax = ax if ax is not None else fig.add_subplot()
    rows = _storage_rows(plan, arena)
    kinds = _roles(plan, graph)
    names = tensor_labels(plan, graph)
    order = sorted(rows.tolist(), key=lambda i: (-int(plan.sizes[i]), i))
    shown, rest = order[:top], order[top:]
    bars = [(names[i], int(plan.sizes[i]), ROLE_COLORS.get(kinds[i], "#999999")) for i in shown]
    if rest:
        bars.append((f"{len(rest)} others", int(sum(int(plan.sizes[i]) for i in rest)), "#DDDDDD"))
    scale, unit = _unit(max([b[1] for b in bars] + [1]))
    ys = np.arange(len(bars))[::-1]
    ax.barh(ys, [b[1] / scale for b in bars], color=[b[2] for b in bars], edgecolor="black",
            linewidth=0.3)
    ax.set_yticks(ys, [b[0] for b in bars], fontsize=8)
    for y, (_, nbytes, _) in zip(ys, bars):
        ax.text(nbytes / scale, y, f" {format_bytes(nbytes)}", va="center", fontsize=7)
    ax.set_xlim(0, max(b[1] for b in bars) / scale * 1.2 if bars else 1)
    ax.set_xlabel(unit)
    ax.set_title(f"{plan.graph_name or 'plan'} — {arena} (persistent): {format_bytes(info.size)} in "
                 f"{len(rows)} tensors, live at every step")
    return fig


def plot_strategies(graph, strategies: Sequence[str] | None = None, mode: str = "inference",
                    arena: str | None = None, labels: int = 0, **plan_kwargs):
    """One graph planned with each strategy, placement pictures side by side on one byte scale."""
    Figure = _require_matplotlib()
    g = load_graph(graph)
    strategies = list(strategies or STRATEGIES)
    plans = [make_plan(g, mode=mode, strategy=s, **plan_kwargs) for s in strategies]
    arena = arena or default_arena(plans[0])
    fig = Figure(figsize=(4 * len(plans), 4.5), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(plans), sharey=True))
    top = max(p.arenas[arena].size for p in plans)
    scale, unit = _unit(max(top, 1))
    for ax, p in zip(axes, plans):
        info = p.arenas[arena]
        ratio = info.size / info.lower_bound if info.lower_bound else float("nan")
        plot_placement(p, arena, graph=g, ax=ax, labels=labels, unit=unit,
                       title=f"{p.strategy}: {format_bytes(info.size)}, {ratio:.3f}× bound")
    axes[0].set_ylim(0, top / scale * 1.05)
    handles, names = axes[0].get_legend_handles_labels()
    for k, ax in enumerate(axes):
        if k:
            ax.set_ylabel("")
        legend = ax.get_legend()
        if legend is not None:
            legend.remove()
    # One legend for the row, right of the last panel (not between panels).
    fig.legend(handles, names, loc="outside right upper", fontsize="small", frameon=False)
    fig.suptitle(f"{g.name or 'graph'} — {arena} arena, mode {mode}")
    return fig


def save(fig, path: str, dpi: int = 120) -> None:
    """Write a figure as PNG, SVG or PDF (by the file's extension)."""
    fig.savefig(path, dpi=dpi)


__all__ = ["ROLE_COLORS", "backward_start", "default_arena", "high_water", "live_bytes", "plot",
           "plot_memory", "plot_placement", "plot_strategies", "save", "tensor_labels"]


# Plan.plot() (emel.memory.plan_data, a lower layer) calls plot through this slot.
register_plan_method("plot", plot)
