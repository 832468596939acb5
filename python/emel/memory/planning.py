"""plan(): a graph in, a Plan out (the C++ core does the work)."""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from . import _core
from .determinism import check_determinism_args
from .errors import PlanError, U64_MAX, is_int, is_text
from .graph import ROLES, Graph, load_graph, out_of_memory
from .shapes import resolve
from .sharding import shard_graph

MODES = ("inference", "forward", "backward")
STRATEGIES = ("tmmu", "greedy_by_size", "best_fit", "auto", "optimal")
FITS = ("best", "first")
DEFAULT_TIME_BUDGET_MS = 200
DEFAULT_ALIGNMENT = 128
PLAN_FORMAT = "emel.plan/1"
_ARENA_KEYS = ("alignment_bytes", "capacity_bytes", "page_size", "persistent")


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



def _check_alignment(value: Any, what: str, arena: str | None = None) -> int:
    if not is_int(value):
        raise PlanError("INVALID_IR_SHAPES", f"{what} must be an integer, got {value!r}", arena=arena)
    if value < 1 or value & (value - 1) or value > U64_MAX:
        raise PlanError("ALIGNMENT_VIOLATION", f"{what} must be a power of two, got {value}",
                        arena=arena)
    return value


def check_arena_config(arenas: Any) -> dict:
    """Check the ``arenas=`` argument (docs/algorithm.md §1, first step).

    Arenas in name order; per arena alignment_bytes, capacity_bytes,
    page_size, persistent, then unknown keys. ``None`` counts as absent.
    """
    if arenas is None:
        return {}
    if not isinstance(arenas, Mapping):
        raise PlanError("INVALID_IR_SHAPES", f"arenas must map arena names to configs, got {arenas!r}")
    for name in arenas:
        if not is_text(name) or not name:
            raise PlanError("INVALID_IR_SHAPES", f"arena names must be non-empty UTF-8 strings, got {name!r}")
    out = {}
    for name in sorted(arenas):
        cfg = arenas[name] if arenas[name] is not None else {}
        if not isinstance(cfg, Mapping):
            raise PlanError("INVALID_IR_SHAPES", f"arena {name!r}: config must be a mapping", arena=name)
        clean = {}
        if cfg.get("alignment_bytes") is not None:
            clean["alignment_bytes"] = _check_alignment(cfg["alignment_bytes"],
                                                        f"arena {name!r}: alignment_bytes", name)
        for key in ("capacity_bytes", "page_size"):
            if cfg.get(key) is not None:
                value = cfg[key]
                if not is_int(value) or value < 0:
                    raise PlanError("INVALID_IR_SHAPES",
                                    f"arena {name!r}: {key} must be an integer >= 0, got {value!r}",
                                    arena=name)
                if value > U64_MAX:
                    raise PlanError("ALLOCATION_OVERFLOW",
                                    f"arena {name!r}: {key} = {value} does not fit in 64 bits",
                                    arena=name)
                clean[key] = value
        if cfg.get("persistent") is not None:
            if not isinstance(cfg["persistent"], bool):
                raise PlanError("INVALID_IR_SHAPES", f"arena {name!r}: persistent must be a bool",
                                arena=name)
            clean["persistent"] = cfg["persistent"]
        unknown = sorted(str(key) for key in cfg if key not in _ARENA_KEYS)
        if unknown:
            raise PlanError("INVALID_IR_SHAPES",
                            f"arena {name!r}: unknown key {unknown[0]!r} (expected one of "
                            f"{', '.join(_ARENA_KEYS)})", arena=name)
        out[name] = clean
    return out


def check_role_arenas(role_arenas: Any) -> dict:
    """Check ``role_arenas=``: {role: arena name} overriding the role's default arena."""
    if role_arenas is None:
        return {}
    if not isinstance(role_arenas, Mapping):
        raise PlanError("INVALID_IR_SHAPES", f"role_arenas must map roles to arena names, got {role_arenas!r}")
    out = {}
    for role in sorted(role_arenas, key=str):
        name = role_arenas[role]
        if role not in ROLES:
            raise PlanError("INVALID_IR_SHAPES", f"role_arenas: unknown role {role!r} (expected one of "
                                                 f"{', '.join(ROLES)})")
        if not is_text(name) or not name:
            raise PlanError("INVALID_IR_SHAPES", f"role_arenas[{role!r}] must be a non-empty UTF-8 arena "
                                                 f"name, got {name!r}", arena=name if is_text(name) else None)
        out[ROLES.index(role)] = name
    return out


def check_strategy(strategy: str, fit: str, time_budget_ms: Any) -> None:
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}; got {strategy!r}")
    if fit not in FITS:
        raise ValueError(f"fit must be 'best' or 'first'; got {fit!r}")
    if not is_int(time_budget_ms) or time_budget_ms < 0:
        raise ValueError(f"time_budget_ms must be an integer >= 0; got {time_budget_ms!r}")


def plan(graph: Any, mode: str = "inference", strategy: str = "tmmu",
         arenas: Mapping | None = None, alignment: int | None = None, *,
         fit: str = "best", time_budget_ms: int = DEFAULT_TIME_BUDGET_MS,
         role_arenas: Mapping | None = None, replay_token: bytes | None = None,
         rank: int = 0, world_size: int = 1,
         shard_spec: Mapping[str, int] | None = None, order: str = "given") -> "Plan":
    """Plan the memory of ``graph`` (a Graph, a path, a dict or JSON text).

    ``mode``: inference, forward or backward. ``strategy``: tmmu (default),
    greedy_by_size (``fit="best"`` or ``"first"``), best_fit, auto or
    optimal (docs/strategies.md); ``time_budget_ms`` bounds auto and optimal
    in deterministic work units, never wall time. ``arenas``: per-arena
    ``alignment_bytes``, ``capacity_bytes``, ``page_size``, ``persistent``.
    ``alignment``: the default alignment of every arena (128).
    ``role_arenas``: e.g. ``{"gradient": "activations"}`` to move a role's
    tensors to another arena. ``rank``, ``world_size``, ``shard_spec``
    (``{tensor id: axis}``): plan rank ``rank``'s share of a sharded graph
    (docs/dynamic-shapes-and-sharding.md); with ``replay_token`` (32 bytes;
    default derived from the graph and mode) they are inputs of the plan hash
    (docs/determinism.md). Symbolic dimensions are planned at their envelope's
    maximum. ``order="optimize"``: plan the graph in a memory-aware
    execution order (emel.memory.reorder, within ``time_budget_ms``) when
    that gives a smaller plan, else in its given order; the plan's graph and
    ``execution_order_hash`` are the order planned. Raises PlanError with
    the failure code and the offending id.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    if order not in ("given", "optimize"):
        raise ValueError(f"order must be 'given' or 'optimize'; got {order!r}")
    check_strategy(strategy, fit, time_budget_ms)
    default_alignment = DEFAULT_ALIGNMENT if alignment is None else _check_alignment(
        alignment, "alignment")
    config = check_arena_config(arenas)
    roles = check_role_arenas(role_arenas)
    token, rank, world_size, spec = check_determinism_args(replay_token, rank, world_size, shard_spec)
    g = graph_to_plan(graph, rank, world_size, spec)
    def run(graph_):
        try:
            return _core.plan(graph_._core_input(), mode, strategy, fit, min(time_budget_ms, 2**40),
                              default_alignment, config, roles, token or b"", rank, world_size, spec)
        except MemoryError:  # std::bad_alloc from the core: the host's memory, not the plan's
            raise out_of_memory(graph_, "planning") from None
    if order == "optimize":
        from .reorder import optimize_order
        g, core = optimize_order(g, mode, run, time_budget_ms,
                                 role_arenas={ROLES[k]: v for k, v in roles.items()})
    else:
        core = run(g)
    options = {"mode": mode, "strategy": strategy, "fit": fit, "time_budget_ms": time_budget_ms,
               "alignment": default_alignment, "arenas": config,
               "role_arenas": {ROLES[k]: v for k, v in roles.items()}, "shard_spec": spec}
    return Plan(core, graph_name=g.name, graph=g, options=options)


def graph_to_plan(graph: Any, rank: int, world_size: int, shard_spec: Mapping) -> Graph:
    """The graph plan() plans: ``graph`` loaded, and for a non-empty shard
    spec, rank ``rank``'s share of it (sharding.py; symbolic dims resolved
    first). Its IR is the one ``ir_hash`` covers."""
    g = load_graph(graph)
    if shard_spec:
        g = Graph.from_dict(shard_graph(resolve(g.to_dict()), rank, world_size, shard_spec))
    return g


def plan_json(document: Any, **kwargs) -> dict:
    """JSON in, JSON out: the `emel.plan/1` dict of an `emel.graph/1` document."""
    return plan(document, **kwargs).to_dict()


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
        return self.strategy in ("auto", "optimal") and row["slots"] is None

    @property
    def metrics(self) -> dict:
        """The document's metrics plus ``allocation_time_ns`` (wall time, C++)."""
        m = self._metrics()
        m["allocation_time_ns"] = self._core.allocation_time_ns
        return m

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
                if self.strategy in ("auto", "optimal"):
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
        from .arenas import Arenas
        return Arenas(self, **options)

    def checkpoint(self) -> bytes:
        """The plan as canonical CBOR bytes (docs/determinism.md §7);
        :func:`emel.memory.restore` rebuilds it."""
        from .checkpoint import checkpoint_bytes
        return checkpoint_bytes(self.to_dict(), self._options)

    def verify(self) -> "Plan":
        """Re-run the self-check (no live overlap, alignment) on the arrays as they are."""
        self._core.verify(self.offsets, self.births, self.deaths, self._arena_sizes)
        return self

    def peak(self, arena: str | None = None, top: int = 10):
        """Why the peak is this high: the peak step, the node and module running
        there, the ``top`` largest live tensors and the bytes by kind
        (emel.memory.peak; ``arena=None``: every arena together)."""
        from .peak import peak
        return peak(self, arena=arena, top=top)

    # -- display ------------------------------------------------------------
    def plot(self, arena: str | None = None, graph: Any = None, labels: int = 8, *,
             log: bool = False):
        """Memory over steps above the placement picture: a matplotlib Figure (emel.memory.viz)."""
        from . import viz
        return viz.plot(self, arena=arena, graph=graph, labels=labels, log=log)

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
            f"<td>{_ratio_text(r['ratio'])}</td><td>{html.escape(_method_text(r).strip(' ()'))}</td>"
            f"<td>{'' if r['slots'] is None else r['slots']}</td><td>{r['tensors']}</td>"
            f"<td>{_percent(r['reuse'])}</td>"
            f"<td>{_percent(r['fragmentation'])}</td></tr>"
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
    """' (auto_search, optimal)' / ' (optimal_search, within 0.4% of optimal)': how an
    offset arena was placed and what the search proved; '' for slot arenas."""
    if row["slots"] is not None or not row["method"]:
        return ""
    if row["optimal"] is None:
        return f" ({row['method']})"
    if row["optimal"]:
        return f" ({row['method']}, optimal)"
    gap = row["size"] / row["proven_bound"] - 1 if row["proven_bound"] else None
    return f" ({row['method']}, {'no bound proven' if gap is None else f'within {gap:.1%} of optimal'})"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _ratio_text(ratio: float | None) -> str:
    return "" if ratio is None else f"{ratio:.3f}"


def format_bytes(n: int) -> str:
    """Human units, binary: 1536 -> '1.5 KiB'."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"
