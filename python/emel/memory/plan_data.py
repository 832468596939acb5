"""The plan data model: :class:`Plan`, :class:`TensorPlacement`, :class:`ArenaPlacement`.

Bottom layer (tests/test_layers.py): a Plan is the data the C++ core returns
plus its views and its `emel.plan/1` export. What *consumes* a plan lives in
the layers above and must not be imported from here: the convenience methods
``Plan.allocate()`` (emel.memory.arenas), ``Plan.checkpoint()``
(emel.memory.checkpoint), ``Plan.peak()`` (emel.memory.peak) and
``Plan.plot()`` (emel.memory.viz) reach their module through the registry
below, into which each of those modules registers itself when imported.
``emel/memory/__init__.py`` imports them all, so importing any
``emel.memory.*`` module fills every slot.

These names were defined in ``emel.memory.planning`` before; it re-exports them.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from .formats import format_bytes, format_percent, format_ratio
from .graph import Graph
from .vocabulary import SEARCH_STRATEGIES

PLAN_FORMAT = "emel.plan/1"

# ---------------------------------------------------------------------------
# the registry of plan methods provided by upper layers
# ---------------------------------------------------------------------------
#: slot -> the module that fills it (and the only names register_plan_method accepts).
PLAN_METHOD_PROVIDERS = {
    "allocate": "emel.memory.arenas",       # Plan.allocate(**options) -> Arenas
    "checkpoint": "emel.memory.checkpoint",  # Plan.checkpoint() -> bytes
    "peak": "emel.memory.peak",             # Plan.peak(arena, top) -> PeakReport
    "plot": "emel.memory.viz",              # Plan.plot(...) -> matplotlib Figure
}
_PLAN_METHODS: dict[str, Callable] = {}


def register_plan_method(name: str, func: Callable) -> Callable:
    """Fill the slot ``name`` (one of :data:`PLAN_METHOD_PROVIDERS`) with ``func(plan, ...)``.

    Called by the providing module at import time; returns ``func``."""
    if name not in PLAN_METHOD_PROVIDERS:
        raise ValueError(f"no plan method slot {name!r} (slots: {', '.join(PLAN_METHOD_PROVIDERS)})")
    _PLAN_METHODS[name] = func
    return func


def plan_method(name: str) -> Callable:
    """The function registered for ``Plan.<name>()``; ImportError if its module was never imported."""
    try:
        return _PLAN_METHODS[name]
    except KeyError:
        module = PLAN_METHOD_PROVIDERS.get(name, "?")
        raise ImportError(
            f"Plan.{name}() is provided by {module}, which has not registered itself "
            f"(it registers when imported: `import {module}`, or `import emel.memory`)") from None


@dataclass(frozen=True)
class TensorPlacement:
    """Where one tensor lives. Views have ``view_of`` and no slot or lifetime."""
    arena: str
    offset: int
    size: int
    slot: int | None
    birth: int | None
    death: int | None
    view_of: str | None = None
    inplace_of: str | None = None


@dataclass(frozen=True)
class ArenaPlacement:
    """One arena of a plan."""
    name: str
    size: int
    alignment: int
    slots: int | None
    lower_bound: int
    page_size: int
    persistent: bool
    capacity_bytes: int | None
    method: str | None = None
    optimal: bool | None = None
    # The best bound the search proved (auto / optimal): size == proven_bound
    # means optimal. peak_live_bytes counts an in-place pair twice at the step
    # where the taker overwrites its victim, so it can pass `size`;
    # lower_bound counts the pair once and never does.
    proven_bound: int | None = None
    peak_live_bytes: int | None = None


class Plan:
    """A memory plan: where every tensor lives, per arena, with metrics.

    ``offsets``, ``births`` and ``deaths`` are NumPy arrays in tensor order
    (``tensor_ids``); the dict views and the exported document read them, and
    :meth:`verify` re-checks them, so an edited plan is re-checkable.
    """

    def __init__(self, core, graph_name: str = "", graph: Graph | None = None,
                 options: dict | None = None):
        self._core = core
        self.graph_name = graph_name
        self.graph = graph  # shapes and dtypes for Arenas.array (a reference, no copy)
        self._options = options or {}
        #: The hashes of docs/determinism.md, hex: ir_hash, execution_order_hash,
        #: arena_config_hash, shard_spec_hash, plan_hash (of the plan as planned).
        self.hashes: dict[str, str] = core.hashes
        self.plan_hash: str = self.hashes["plan_hash"]
        self.replay_token: bytes = core.replay_token
        self.rank: int = core.rank
        self.world_size: int = core.world_size
        self.mode: str = core.mode
        self.strategy: str = core.strategy
        self.steps: int = core.steps
        self.tensor_ids: list[str] = core.tensor_ids
        self.offsets: np.ndarray = core.offset
        self.births: np.ndarray = core.birth
        self.deaths: np.ndarray = core.death
        self.sizes: np.ndarray = core.size
        self._arena_rows: list[dict] = core.arenas
        self._arena_sizes = [row["size"] for row in self._arena_rows]
        self._tensors: dict[str, TensorPlacement] | None = None

    # -- views --------------------------------------------------------------
    @property
    def tensors(self) -> Mapping[str, TensorPlacement]:
        """Placement by tensor id."""
        if self._tensors is None:
            self._tensors = {
                tid: TensorPlacement(**{k: v for k, v in entry.items()})
                for tid, entry in self._tensor_entries(full=True).items()}
        return self._tensors

    @property
    def arenas(self) -> dict[str, ArenaPlacement]:
        return {row["name"]: ArenaPlacement(
            name=row["name"], size=size, alignment=row["alignment"], slots=row["slots"],
            lower_bound=row["lower_bound"], page_size=row["page_size"],
            persistent=row["persistent"], capacity_bytes=row["capacity_bytes"],
            method=row["method"] or None,
            optimal=row["optimal"] if self._searched(row) else None,
            proven_bound=row["proven_bound"] if self._searched(row) else None,
            peak_live_bytes=row["peak_live_bytes"])
            for row, size in zip(self._arena_rows, self._arena_sizes)}

    def _searched(self, row: dict) -> bool:
        """auto and optimal prove a bound for each arena they place by offsets."""
        return self.strategy in SEARCH_STRATEGIES and row["slots"] is None

    @property
    def metrics(self) -> dict:
        """The document's metrics plus ``allocation_time_ns`` (wall time, C++)."""
        m = self._metrics()
        m["allocation_time_ns"] = self._core.allocation_time_ns
        return m

    @property
    def options(self) -> dict:
        """How the plan was made: mode, strategy, fit, time_budget_ms, alignment,
        arenas, shard_spec and role_arenas as applied (the arena layout
        included: pooled plans map gradients to activations). A copy."""
        return {k: (dict(v) if isinstance(v, dict) else v) for k, v in self._options.items()}

    @property
    def total_bytes(self) -> int:
        return sum(self._arena_sizes)

    def _tensor_entries(self, full: bool) -> dict[str, dict]:
        names = [row["name"] for row in self._arena_rows]
        ids = self.tensor_ids
        arena_of = self._core.arena_of.tolist()
        slot = self._core.slot.tolist()
        view_base = self._core.view_base.tolist()
        root = self._core.root.tolist()
        inplace_of = self._core.inplace_of.tolist()
        offsets, sizes = self.offsets.tolist(), self.sizes.tolist()
        births, deaths = self.births.tolist(), self.deaths.tolist()
        out = {}
        for i, tid in enumerate(ids):
            entry = {"arena": names[arena_of[i]], "offset": offsets[i], "size": sizes[i]}
            if view_base[i] >= 0:
                entry["view_of"] = ids[root[i]]
                if full:
                    entry.update(slot=None, birth=None, death=None)
            else:
                if slot[i] >= 0 or full:
                    entry["slot"] = slot[i] if slot[i] >= 0 else None
                entry.update(birth=births[i], death=deaths[i])
                if inplace_of[i] >= 0:
                    entry["inplace_of"] = ids[inplace_of[i]]
            out[tid] = entry
        return out

    def _metrics(self) -> dict:
        rows = self._arena_rows
        per = lambda key: {r["name"]: r[key] for r in rows}  # noqa: E731
        return {
            "peak_logical_slots": per("slots"),
            "peak_physical_bytes": {r["name"]: s for r, s in zip(rows, self._arena_sizes)},
            "lower_bound": per("lower_bound"),
            "peak_live_bytes": per("peak_live_bytes"),
            "max_live": per("max_live"),
            "storage_tensors": per("storage_tensors"),
            "memory_reuse_ratio": {r["name"]: (r["memory_reuse_ratio"] if r["slots"] is not None
                                               else None) for r in rows},
            "internal_fragmentation_ratio": per("internal_fragmentation_ratio"),
            "total_bytes": sum(self._arena_sizes),
            "total_lower_bound": sum(r["lower_bound"] for r in rows),
        }

    # -- export -------------------------------------------------------------
    def to_dict(self) -> dict:
        """The `emel.plan/1` document (docs/formats.md)."""
        arenas = {}
        for row, size in zip(self._arena_rows, self._arena_sizes):
            entry = {"size": size, "alignment": row["alignment"], "slots": row["slots"],
                     "lower_bound": row["lower_bound"], "page_size": row["page_size"],
                     "persistent": row["persistent"]}
            if row["capacity_bytes"] is not None:
                entry["capacity_bytes"] = row["capacity_bytes"]
            if row["slots"] is None:  # placed by an offset strategy: say how
                entry["method"] = row["method"]
                if self.strategy in SEARCH_STRATEGIES:
                    entry.update(work=row["work"], optimal=row["optimal"],
                                 proven_bound=row["proven_bound"])
            arenas[row["name"]] = entry
        return {
            "format": PLAN_FORMAT,
            "graph": self.graph_name,
            "mode": self.mode,
            "strategy": self.strategy,
            "steps": self.steps,
            "arenas": arenas,
            "tensors": self._tensor_entries(full=False),
            "metrics": self._metrics(),
            "hashes": dict(self.hashes),
            "replay_token": self.replay_token.hex(),
            "rank": self.rank,
            "world_size": self.world_size,
        }

    def to_json(self, indent: int | None = None) -> str:
        """The document as text, keys sorted: equal plans are equal strings."""
        return json.dumps(self.to_dict(), sort_keys=True, indent=indent)

    def allocate(self, **options) -> "Arenas":
        """Back this plan with real memory: ``Arenas(self, **options)`` (docs/arenas.md)."""
        return plan_method("allocate")(self, **options)

    def checkpoint(self) -> bytes:
        """The plan as canonical CBOR bytes (docs/determinism.md §7);
        :func:`emel.memory.restore` rebuilds it."""
        return plan_method("checkpoint")(self)

    def verify(self) -> "Plan":
        """Re-run the self-check (no live overlap, alignment) on the arrays as they are."""
        self._core.verify(self.offsets, self.births, self.deaths, self._arena_sizes)
        return self

    def peak(self, arena: str | None = None, top: int = 10):
        """Why the peak is this high: the peak step, the node and module running
        there, the ``top`` largest live tensors and the bytes by kind
        (emel.memory.peak; ``arena=None``: every arena together)."""
        return plan_method("peak")(self, arena=arena, top=top)

    # -- display ------------------------------------------------------------
    def plot(self, arena: str | None = None, graph: Any = None, labels: int = 8, *,
             log: bool = False):
        """Memory over steps above the placement picture: a matplotlib Figure (emel.memory.viz)."""
        return plan_method("plot")(self, arena=arena, graph=graph, labels=labels, log=log)

    def summary_rows(self) -> list[dict]:
        rows = []
        for row, size in zip(self._arena_rows, self._arena_sizes):
            lb = row["lower_bound"]
            rows.append({"arena": row["name"], "size": size, "lower_bound": lb,
                         "ratio": (size / lb) if lb else None, "slots": row["slots"],
                         "tensors": row["storage_tensors"],
                         "reuse": row["memory_reuse_ratio"] if row["slots"] is not None else None,
                         "fragmentation": row["internal_fragmentation_ratio"],
                         "persistent": row["persistent"],
                         "method": row["method"] or ("slots" if row["slots"] is not None else None),
                         "optimal": row["optimal"] if self._searched(row) else None,
                         "proven_bound": row["proven_bound"] if self._searched(row) else None})
        return rows

    def __repr__(self) -> str:
        parts = ", ".join(f"{r['arena']}={format_bytes(r['size'])}{_method_text(r)}"
                          for r in self.summary_rows())
        return (f"<Plan {self.graph_name or '(unnamed)'} mode={self.mode} strategy={self.strategy} "
                f"tensors={len(self.tensor_ids)} steps={self.steps} total={format_bytes(self.total_bytes)}"
                f"{' [' + parts + ']' if parts else ''}>")

    def _repr_html_(self) -> str:
        head = ("<tr><th>arena</th><th>size</th><th>lower bound</th><th>size / bound</th>"
                "<th>method</th><th>slots</th><th>tensors</th><th>reuse</th>"
                "<th title='internal_fragmentation_ratio: the share of the byte-steps reserved for "
                "tensors that their own bytes leave unused (a small tensor in a larger slot or "
                "buffer); size / bound is the overhead figure'>slot slack</th></tr>")
        body = "".join(
            f"<tr><td>{html.escape(r['arena'])}{' (persistent)' if r['persistent'] else ''}</td>"
            f"<td>{format_bytes(r['size'])}</td><td>{format_bytes(r['lower_bound'])}</td>"
            f"<td>{format_ratio(r['ratio'])}</td><td>{html.escape(_method_text(r).strip(' ()'))}</td>"
            f"<td>{'' if r['slots'] is None else r['slots']}</td><td>{r['tensors']}</td>"
            f"<td>{format_percent(r['reuse'])}</td>"
            f"<td>{format_percent(r['fragmentation'])}</td></tr>"
            for r in self.summary_rows())
        title = html.escape(f"{self.graph_name or '(unnamed)'}: {self.mode}, {self.strategy}, "
                            f"{len(self.tensor_ids)} tensors, {self.steps} steps, total "
                            f"{format_bytes(self.total_bytes)}")
        why = ""
        # The answer to "why this high?"; skipped for huge graphs, where
        # building every tensor entry would make display slow.
        if self.graph is not None and self.steps and len(self.tensor_ids) <= 200_000:
            why = self.peak(top=5)._repr_html_()
        return f"<div><b>Plan</b> {title}<table>{head}{body}</table>{why}</div>"


def _method_text(row: dict) -> str:
    """' (optimal)' / ' (within 0.4% of optimal)': what auto's or optimal's
    search proved of an arena (the pass that won is the document's `method`);
    ' (greedy_by_size_best_fit)': the single pass asked for; '' for slot arenas."""
    if row["slots"] is not None or not row["method"]:
        return ""
    if row["optimal"] is None:
        return f" ({row['method']})"
    if row["optimal"]:
        return " (optimal)"
    gap = row["size"] / row["proven_bound"] - 1 if row["proven_bound"] else None
    return f" ({'no bound proven' if gap is None else f'within {gap:.1%} of optimal'})"
