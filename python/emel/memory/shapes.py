"""Dynamic shapes: symbolic dimensions with envelopes, and replanning.

A dimension may be symbolic, ``{"sym": "seq", "max": 4096}`` (optionally
``"min": 1``), instead of an integer (docs/dynamic-shapes-and-sharding.md).
A graph is planned for its envelope's maximum; at run time a
:class:`PlanSession` checks the actual sizes against the envelope and, by its
``replan_policy``, refuses (``ABORT``) or makes a plan for a widened envelope
at a declared safepoint (``REPLAN_AT_SAFEPOINT``).

The first half (parsing, :class:`ShapeEnvelope`, :func:`resolve`) is standard
library only and lives in the bottom layer, emel.memory.symbolic (the graph
document and the pure-Python reference call it); it is re-exported here.
This module, the replanning half, sits above the planner (tests/test_layers.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from .errors import PlanError, check_u64
from .graph import load_graph
from .planning import plan as make_plan
# The first half lives in the bottom layer (emel.memory.symbolic); re-exported here.
from .symbolic import (ENVELOPE_FORMAT, GROWTH, REPLAN_POLICIES, SYMBOLIC_DIM_KEYS,  # noqa: F401
                       ShapeEnvelope, _invalid, concrete_shape, document_envelope, envelope_of_tensors,
                       is_symbolic, parse_symbolic_dim, resolve, resolve_at)


# ---------------------------------------------------------------------------
# replanning
# ---------------------------------------------------------------------------
class DynamicPlanner:
    """Plans one graph for several shape envelopes, cached by replan key.

    The replan key is ``(shape_envelope_hash, mode, arena_config_hash)``.
    ``plan_kwargs`` are those of :func:`emel.memory.plan` (mode, strategy,
    arenas, alignment, rank, world_size, shard_spec, ...). ``safepoints``
    adds node ids to those the graph declares. The declared envelope's plan
    is made at construction (:attr:`base_plan`).
    """

    def __init__(self, graph, *, replan_policy: str = "ABORT", safepoints=(),
                 growth: str = "exact", **plan_kwargs):
        if replan_policy not in REPLAN_POLICIES:
            raise ValueError(f"replan_policy must be one of {', '.join(REPLAN_POLICIES)}; "
                             f"got {replan_policy!r}")
        if growth not in GROWTH:
            raise ValueError(f"growth must be one of {', '.join(GROWTH)}; got {growth!r}")
        self.graph = load_graph(graph)
        self.document = self.graph.to_dict()
        self.envelope = self.graph.shape_envelope
        self.replan_policy = replan_policy
        self.growth = growth
        self.plan_kwargs = dict(plan_kwargs)
        self.mode = self.plan_kwargs.get("mode", "inference")
        node_ids = [n["id"] for n in self.graph.nodes]
        known = self.node_ids = frozenset(node_ids)
        wanted = list(self.graph.safepoints) + list(safepoints)
        for nid in wanted:
            if nid not in known:
                raise _invalid(f"safepoint {nid!r} is not a node of the graph", node=nid)
        wanted_set = set(wanted)
        self.safepoints = tuple(nid for nid in node_ids if nid in wanted_set)
        # The first tensor (document order) using each symbol: what an error names.
        self._first_tensor: dict[str, str] = {}
        for t in self.graph.tensors:
            for dim in t["shape"]:
                if is_symbolic(dim):
                    self._first_tensor.setdefault(dim["sym"], t["id"])
        self.cache: dict[tuple, object] = {}
        self.plan_hashes: dict[tuple, str] = {}  # replan key -> plan hash, computed once
        self.hits = 0
        self.misses = 0
        self.base_plan = self._make_plan(self.envelope)
        self.arena_config_hash = self.base_plan.hashes["arena_config_hash"]
        self._store(self.replan_key(self.envelope), self.base_plan)

    def replan_key(self, envelope: ShapeEnvelope) -> tuple[str, str, str]:
        return (envelope.hash, self.mode, self.arena_config_hash)

    def _make_plan(self, envelope: ShapeEnvelope):
        return make_plan(resolve(self.document, envelope), **self.plan_kwargs)

    def plan_for(self, envelope: ShapeEnvelope):
        """``(plan, replan_key, cache_hit)`` for ``envelope``."""
        key = self.replan_key(envelope)
        if key in self.cache:
            self.hits += 1
            return self.cache[key], key, True
        self.misses += 1
        plan = self._make_plan(envelope)
        self._store(key, plan)
        return plan, key, False

    def _store(self, key: tuple, plan) -> None:
        self.cache[key] = plan
        self.plan_hashes[key] = plan.plan_hash

    def first_tensor(self, symbol: str) -> str | None:
        return self._first_tensor.get(symbol)

    def symbols_from_shapes(self, tensor_shapes: Mapping) -> dict:
        """Symbol values read off runtime tensor shapes ``{tensor id: shape}``.

        Concrete dimensions must match the graph; a symbol read twice must
        have one value. PlanError (INVALID_IR_SHAPES) names the tensor.
        """
        if not isinstance(tensor_shapes, Mapping):
            raise _invalid(f"runtime shapes must map tensor ids to shapes, got {tensor_shapes!r}")
        declared = {t["id"]: t["shape"] for t in self.graph.tensors}
        values: dict[str, int] = {}
        origin: dict[str, str] = {}
        for tid in sorted(tensor_shapes, key=str):
            if tid not in declared:
                raise _invalid(f"runtime shape for unknown tensor {tid!r}", tensor=tid)
            shape = tensor_shapes[tid]
            if not isinstance(shape, (list, tuple)) or len(shape) != len(declared[tid]):
                raise _invalid(f"tensor {tid!r}: runtime shape {shape!r} does not have the "
                               f"{len(declared[tid])} dimensions of {declared[tid]!r}", tensor=tid)
            for j, (dim, value) in enumerate(zip(declared[tid], shape)):
                check_u64(value, f"tensor {tid!r}: runtime dimension {j}", tid)
                if not is_symbolic(dim):
                    if dim != value:
                        raise _invalid(f"tensor {tid!r}: dimension {j} is fixed at {dim}, got {value}",
                                       tensor=tid)
                    continue
                name = dim["sym"]
                if values.setdefault(name, value) != value:
                    raise _invalid(f"tensor {tid!r}: symbol {name!r} is {value} here but "
                                   f"{values[name]} in tensor {origin[name]!r}", tensor=tid)
                origin.setdefault(name, tid)
        return values

    def session(self) -> "PlanSession":
        """A new run, starting from the declared envelope and its plan."""
        return PlanSession(self)


class PlanSession:
    """One run of a dynamic-shape graph: the current envelope and plan, and a
    trace of the replans made (docs/dynamic-shapes-and-sharding.md)."""

    def __init__(self, planner: DynamicPlanner):
        self.planner = planner
        self.envelope: ShapeEnvelope = planner.envelope
        self.plan = planner.base_plan
        self.replan_key = planner.replan_key(planner.envelope)
        self.trace: list[dict] = []

    @property
    def replan_policy(self) -> str:
        return self.planner.replan_policy

    def check(self, symbols: Mapping, node: str | None = None):
        """Check runtime symbol values ``{name: size}`` reached at ``node``;
        returns the plan to run with.

        Inside the current envelope: the current plan. Outside it: under
        ``ABORT``, PlanError ``SHAPE_ENVELOPE_EXCEEDED``; under
        ``REPLAN_AT_SAFEPOINT``, the plan of the widened envelope when ``node``
        is a safepoint (and a ``replan`` record in :attr:`trace`), else the same
        error. The error names ``node`` and the first tensor using the symbol.
        """
        if node is not None and node not in self.planner.node_ids:
            raise _invalid(f"unknown node {node!r}", node=node)
        violations = self.envelope.violations(symbols)
        if not violations:
            return self.plan
        name, value, lo, hi = violations[0]
        what = f"symbol {name!r} = {value} is outside its envelope [{lo}, {hi}]"
        at = f" at node {node!r}" if node is not None else ""
        tensor = self.planner.first_tensor(name)
        if self.replan_policy == "ABORT":
            raise PlanError("SHAPE_ENVELOPE_EXCEEDED", f"{what}{at} (replan_policy ABORT)",
                            tensor=tensor, node=node)
        if node not in self.planner.safepoints:
            listed = ", ".join(repr(n) for n in self.planner.safepoints) or "none"
            where = f"{at}, which is not a safepoint" if node is not None else "; no node given"
            raise PlanError("SHAPE_ENVELOPE_EXCEEDED",
                            f"{what}{where}: replanning happens only at a safepoint "
                            f"(safepoints: {listed})", tensor=tensor, node=node)
        envelope = self.envelope.widened(symbols, self.planner.growth)
        plan, key, hit = self.planner.plan_for(envelope)
        self.trace.append({
            "record": "replan",
            "node": node,
            "old_plan_hash": self.planner.plan_hashes[self.replan_key],
            "new_plan_hash": self.planner.plan_hashes[key],
            "replan_key": list(key),
            "shape_envelope": envelope.to_dict(),
            "cache_hit": hit,
        })
        self.envelope, self.plan, self.replan_key = envelope, plan, key
        return plan

    def check_shapes(self, tensor_shapes: Mapping, node: str | None = None):
        """:meth:`check` with symbol values read off ``{tensor id: runtime shape}``."""
        return self.check(self.planner.symbols_from_shapes(tensor_shapes), node)


def session(graph, **kwargs) -> PlanSession:
    """``DynamicPlanner(graph, **kwargs).session()``."""
    return DynamicPlanner(graph, **kwargs).session()
