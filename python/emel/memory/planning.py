"""plan(): a graph in, a Plan out (the C++ core does the work).

The planning layer (tests/test_layers.py): the option checks and the driver.
The Plan data class and its placements live in emel.memory.plan_data, and
format_bytes in emel.memory.formats (both lower layers); they are re-exported
here, where they were defined before.
"""

from __future__ import annotations

from typing import Any, Mapping

from . import _core
from .arena_layout import ARENA_LAYOUTS, resolved_layout, roles_for_layout  # noqa: F401  (ARENA_LAYOUTS: re-export)
from .determinism import check_determinism_args
from .errors import PlanError, U64_MAX, is_int, is_text
from .formats import format_bytes  # noqa: F401  (re-export: emel.memory.planning.format_bytes)
from .graph import ROLES, Graph, load_graph, out_of_memory
from .plan_data import PLAN_FORMAT, ArenaPlacement, Plan, TensorPlacement  # noqa: F401  (re-exports)
# order="optimize" calls emel.memory.reorder directly: reorder only needs the
# graph (it takes the core call as a callback), so it sits *below* planning
# with sharding, as a graph transformation planning applies, rather than
# above it behind a registry; nothing in reorder or sharding imports planning.
from .reorder import optimize_order
from .sharding import shard_graph
from .symbolic import resolve
# The names come from the core's tables (core/tables.hpp), never spelled here.
from .vocabulary import FITS, MODES, STRATEGIES  # noqa: F401  (re-exports)
#: What plan() and every command that plans use unless told otherwise: the
#: smallest plans (docs/strategies.md §4). tmmu, the specification's slot
#: colouring, stays selectable by name.
DEFAULT_STRATEGY = "auto"
#: What ``time_budget_ms=None`` (the default) means: auto and optimal follow
#: the default-budget policy (docs/strategies.md §4): a deterministic work
#: budget from the instance: 200 ms worth where the first greedy answer is
#: within 0.5% of the lower bound, else 4,000 ms (at least the first pass plus
#: 1,000 ms where that pass takes nearly all of it), ending once within 0.5%
#: of it; every run stops at once on a proven optimum.
DEFAULT_TIME_BUDGET_MS = None
#: The budget ``time_budget_ms=None`` asks the core for (no explicit budget
#: reaches it: explicit ones are capped at 2**40 ms).
POLICY_BUDGET = 2**64 - 1
#: What order="optimize" gives the reorder search when no budget is given.
DEFAULT_ORDER_BUDGET_MS = 200


def core_budget(time_budget_ms: int | None) -> int:
    """The budget passed to the core: the policy's marker for None, else capped at 2**40 ms."""
    return POLICY_BUDGET if time_budget_ms is None else min(time_budget_ms, 2**40)
DEFAULT_ALIGNMENT = 128
_ARENA_KEYS = ("alignment_bytes", "capacity_bytes", "page_size", "persistent")


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
        raise ValueError(f"fit must be {' or '.join(repr(f) for f in FITS)}; got {fit!r}")
    if time_budget_ms is not None and (not is_int(time_budget_ms) or time_budget_ms < 0):
        raise ValueError(f"time_budget_ms must be an integer >= 0 or None; got {time_budget_ms!r}")


def plan(graph: Any, mode: str = "inference", strategy: str = DEFAULT_STRATEGY,
         arenas: Mapping | None = None, alignment: int | None = None, *,
         fit: str = "best", time_budget_ms: int | None = DEFAULT_TIME_BUDGET_MS,
         role_arenas: Mapping | None = None, replay_token: bytes | None = None,
         rank: int = 0, world_size: int = 1,
         shard_spec: Mapping[str, int] | None = None, order: str = "given",
         arena_layout: str | None = None) -> "Plan":
    """Plan the memory of ``graph`` (a Graph, a path, a dict or JSON text).

    ``mode``: inference, forward or backward. ``strategy``: auto (default:
    the smallest plans), tmmu (the specification's slot colouring),
    greedy_by_size (``fit="best"`` or ``"first"``), best_fit or optimal
    (docs/strategies.md); ``time_budget_ms`` bounds auto and optimal
    in deterministic work units, never wall time (None, the default: the
    default-budget policy of docs/strategies.md §4). ``arenas``: per-arena
    ``alignment_bytes``, ``capacity_bytes``, ``page_size``, ``persistent``.
    ``alignment``: the default alignment of every arena (128).
    ``role_arenas``: e.g. ``{"gradient": "activations"}`` to move a role's
    tensors to another arena. ``arena_layout``: "pooled" plans activations and
    gradients as one arena (the default, except under tmmu), "separate" gives
    gradients their own arena as the specification does. ``rank``, ``world_size``, ``shard_spec``
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
    roles = check_role_arenas(roles_for_layout(arena_layout, strategy, role_arenas))
    token, rank, world_size, spec = check_determinism_args(replay_token, rank, world_size, shard_spec)
    g = graph_to_plan(graph, rank, world_size, spec)
    def run(graph_):
        try:
            return _core.plan(graph_._core_input(), mode, strategy, fit, core_budget(time_budget_ms),
                              default_alignment, config, roles, token or b"", rank, world_size, spec)
        except MemoryError:  # std::bad_alloc from the core: the host's memory, not the plan's
            raise out_of_memory(graph_, "planning") from None
    if order == "optimize":
        g, core = optimize_order(g, mode, run,
                                 DEFAULT_ORDER_BUDGET_MS if time_budget_ms is None else time_budget_ms,
                                 role_arenas={ROLES[k]: v for k, v in roles.items()})
    else:
        core = run(g)
    # Everything that decides the plan, so that restore() plans it again alike: the
    # layout as resolved (a strategy's default one differs), and the order.
    options = {"mode": mode, "strategy": strategy, "fit": fit, "time_budget_ms": time_budget_ms,
               "alignment": default_alignment, "arenas": config,
               "role_arenas": {ROLES[k]: v for k, v in roles.items()}, "shard_spec": spec,
               "arena_layout": resolved_layout(arena_layout, strategy), "order": order}
    return Plan(core, graph_name=g.name, graph=g, options=options)


def mode_hint(graph: Any, mode: str) -> str | None:
    """One line when ``mode`` is probably not what was meant for ``graph``: a
    training step (gradients, tensors saved for backward) planned in inference
    mode, or a graph with neither planned in forward or backward mode; else None."""
    g = load_graph(graph)
    gradients = sum(1 for t in g.tensors if t.get("role") == "gradient")
    saved = sum(1 for t in g.tensors if t.get("saved_for_backward"))
    if mode == "inference" and (gradients or saved):
        return (f"note: {g.name or 'the graph'} is a training step ({gradients} gradients, {saved} "
                f"tensors saved for backward) planned in inference mode, where every tensor dies "
                f"at its last use; --mode backward (mode=\"backward\") plans the step as it runs")
    if mode != "inference" and not gradients and not saved:
        return (f"note: {g.name or 'the graph'} has no gradients and nothing saved for backward: "
                f"{mode} mode plans it as inference does; --mode inference is probably meant")
    return None


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
