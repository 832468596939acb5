"""remat(): recompute saved activations in the backward phase so that the
*placed* activations arena fits a budget (docs/below-bound.md).

A *unit* is a forward node N whose storage outputs are saved for backward,
together with the forward nodes that only alias or overwrite those outputs in
place (``relu_`` on N's result, ``t``/``view``/``detach`` of it): replaying
the unit in order rebuilds what backward reads. A unit may be recomputed
when its ops are deterministic (no random op), its outputs are plain
activations (not graph outputs), and no node after N writes any of its
other inputs (those are *kept*: recomputing reads them, so they stay live).

The rewrite adds a copy of the unit's nodes (``<id>@remat``, phase
``backward``) just before the first backward node that reads the unit, and
points every backward reader at the copies; the originals then die in the
forward phase. Choice: a deterministic greedy — among the units live at the
current peak of the arena's live bytes, the least recompute cost per saved
byte that lowers that peak — checked with a real ``auto`` plan whenever the
peak reaches the target, then pruned (a unit whose removal still fits is
dropped, most expensive first). The answer is always a placed, self-checked
plan, never an estimate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Iterator, Mapping

import numpy as np

from .arena_layout import roles_for_layout
from .cost_model import cost_function
from .errors import PlanError, check_u64, is_int
from .graph import Graph, load_graph
from .planning import plan as plan_graph
from .reorder import UNITS_PER_MS, LiveBytes, _order_of, is_view_op

#: Ops whose result changes from run to run: never recomputed.
RANDOM_OPS = ("rand", "dropout", "bernoulli", "normal", "uniform", "multinomial", "randperm",
              "randint", "poisson", "exponential", "cauchy", "geometric", "log_normal")
#: Ops that also update state they do not list as outputs (batch norm's
#: running statistics in training mode): replaying one would update it twice.
STATEFUL_OPS = ("native_batch_norm", "_native_batch_norm_legit", "batch_norm", "cudnn_batch_norm",
                "miopen_batch_norm", "_batch_norm_impl_index", "_fused_batch_norm")
SUFFIX = "@remat"
DEFAULT_REMAT_BUDGET_MS = 2000
#: A trial rewrites the graph and compiles its liveness before evaluating
#: it: charged as this many evaluations.
_TRIAL_EVALS = 40
#: The most nodes one unit replays (a saved tensor and the unsaved chain it comes from).
MAX_CHAIN = 8
#: The most units one replay joins (see candidates()), and the most joined
#: units kept per length, as a multiple of the single units (earliest first).
MERGE_DEPTH = 8
MERGE_WIDTH = 2


@dataclass(frozen=True)
class Unit:
    """One recomputable group: ``node`` and its in-place/alias followers."""
    node: str
    nodes: tuple[str, ...]          # in the given order
    saved: tuple[str, ...]          # the storage tensors backward no longer keeps
    rooted: frozenset[str]          # every tensor living in that storage
    inputs: tuple[str, ...]         # kept inputs the recompute reads
    bytes: int
    cost: int
    step: int                       # the given step of ``node`` (the final tie-break)


@dataclass
class RematReport:
    """What remat() did. Sizes are bytes of the ``arena`` placed by ``auto``."""
    budget_bytes: int
    arena: str
    recomputed: list[str]            # saved storage tensors now recomputed
    recompute_nodes: dict[str, str]  # new node id -> the forward node it repeats
    cost: int                        # total recompute cost (emel.memory.cost_model)
    arena_before: int
    arena_after: int
    bound_before: int                # the arena's peak of live bytes, given graph
    bound_after: int
    candidates: int                  # recomputable units found

    def rows(self) -> list[dict]:
        return [{"budget": self.budget_bytes, "arena_before": self.arena_before,
                 "arena_after": self.arena_after, "bound_before": self.bound_before,
                 "bound_after": self.bound_after, "recomputed": len(self.recomputed),
                 "cost": self.cost}]


@dataclass
class RematResult:
    """``graph, plan, report = mm.remat(...)`` unpacks it."""
    graph: Graph
    plan: Any
    report: RematReport
    units: list[Unit] = field(default_factory=list, repr=False)

    def __iter__(self) -> Iterator:
        return iter((self.graph, self.plan, self.report))


def _is_random(op: str) -> bool:
    """Not replayable: random (another result) or stateful (a second update)."""
    low = op.lower()
    return any(word in low for word in RANDOM_OPS) or low.split(".")[0] in STATEFUL_OPS


def candidates(graph: Any, cost="flops") -> list[Unit]:
    """The recomputable units of a training graph, in the given order."""
    g = load_graph(graph)
    lb = LiveBytes(g, "backward")
    cost_fn = cost_function(cost)
    tensors = {t["id"]: t for t in g.tensors}
    root = {t["id"]: g.tensors[lb.root[i]]["id"] for i, t in enumerate(g.tensors)}
    order = _order_of(g)
    step = {nid: s for s, nid in enumerate(order)}
    nodes = {n["id"]: n for n in g.nodes}
    outputs = set(g.outputs)
    size = {g.tensors[i]["id"]: int(lb.size[r]) for i, r in lb.storage_slot.items()}
    # Nodes that write a storage (make it, or alias it with an op that is not a pure view).
    writers: dict[str, list[str]] = {}
    for nid in order:
        n = nodes[nid]
        for tid in n["outputs"]:
            if root[tid] == tid or not is_view_op(n["op"]):
                writers.setdefault(root[tid], []).append(nid)
    backward_reads = {tid for nid in order if nodes[nid].get("phase") == "backward"
                      for tid in nodes[nid]["inputs"]}
    rooted_at: dict[str, list[str]] = {}
    for t in g.tensors:
        rooted_at.setdefault(root[t["id"]], []).append(t["id"])
    forward = [nid for nid in order if nodes[nid].get("phase") == "forward"]
    producer = {tid: nid for nid in forward for tid in nodes[nid]["outputs"] if root[tid] == tid}
    saved_roots = {root[t["id"]] for t in g.tensors if t.get("saved_for_backward")}

    def group_of(nid: str):
        """N and its alias/in-place followers, or None when they cannot be replayed."""
        n = nodes[nid]
        storage = [tid for tid in n["outputs"] if root[tid] == tid]
        if not storage or _is_random(n["op"]):
            return None
        mine = set(storage)
        if any(root[tid] not in mine for tid in n["outputs"]):
            return None  # N also writes a storage it does not own
        rooted = {tid for r in storage for tid in rooted_at[r]}
        if any(tensors[t]["role"] != "activation" or t in outputs for t in rooted):
            return None  # inputs, outputs, gradients and state are not recomputed
        followers = [f for f in forward if f != nid and any(
            root[tid] in mine for tid in nodes[f]["outputs"])]
        if any(_is_random(nodes[f]["op"]) or any(root[tid] not in mine for tid in nodes[f]["outputs"])
               for f in followers):
            return None
        return [nid] + followers, storage, rooted

    units = []
    for nid in forward:
        first = group_of(nid)
        if first is None or not any(r in saved_roots for r in first[1]):
            continue
        if not any(tid in backward_reads for tid in first[2]):
            continue
        # Replay back to tensors backward keeps anyway (saved, inputs, state):
        # an unsaved activation in between is recomputed too, up to MAX_CHAIN groups.
        group, storage, rooted = list(first[0]), list(first[1]), set(first[2])
        queue, ok = [nid], True
        while queue and ok:
            m = queue.pop()
            for tid in nodes[m]["inputs"]:
                r = root[tid]
                if tid in rooted or r in saved_roots or r not in producer:
                    continue
                more = group_of(producer[r]) if len(set(group)) < MAX_CHAIN else None
                if more is None:
                    ok = False
                    break
                for x in more[0]:
                    if x not in group:
                        group.append(x)
                        queue.append(x)
                storage.extend(more[1])
                rooted |= more[2]
        if not ok:
            continue
        group.sort(key=step.__getitem__)
        kept = list(dict.fromkeys(tid for m in group for tid in nodes[m]["inputs"] if tid not in rooted))
        # A kept input written after the replay starts would be read with other contents.
        start = step[group[0]]
        if any(step[w] > start for tid in kept for w in writers.get(root[tid], ())):
            continue
        saved = tuple(r for r in storage if r in saved_roots)
        nbytes = sum(size[r] for r in saved)
        if nbytes == 0:
            continue
        units.append(Unit(node=nid, nodes=tuple(group), saved=saved, rooted=frozenset(rooted),
                          inputs=tuple(kept), bytes=nbytes,
                          cost=int(sum(cost_fn(nodes[m], tensors) for m in group)), step=step[nid]))
    # Longer replays: a unit whose kept input another unit recomputes can be
    # replayed together with it (both recomputed, the other's inputs kept),
    # up to MERGE_DEPTH units; adjacent saved tensors then both go.
    owner = {tid: u for u in units for tid in u.rooted}
    seen = {u.nodes for u in units}
    frontier = singles = list(units)
    for _ in range(MERGE_DEPTH - 1):
        merged = []
        for u in frontier:
            for tid in u.inputs:
                v = owner.get(tid)
                if v is None or set(v.nodes) & set(u.nodes):
                    continue
                group = tuple(sorted(set(u.nodes) | set(v.nodes), key=step.__getitem__))
                if group in seen or len(group) > MAX_CHAIN * MERGE_DEPTH:
                    continue
                rooted = u.rooted | v.rooted
                kept = tuple(dict.fromkeys(t for t in v.inputs + u.inputs if t not in rooted))
                start = step[group[0]]
                if any(step[w] > start for t in kept for w in writers.get(root[t], ())):
                    continue
                seen.add(group)
                merged.append(Unit(node=u.node, nodes=group,
                                   saved=tuple(sorted(set(u.saved) | set(v.saved))),
                                   rooted=rooted, inputs=kept, bytes=u.bytes + v.bytes,
                                   cost=u.cost + v.cost, step=u.step))
        merged.sort(key=lambda m: (m.step, m.nodes))
        merged = merged[:MERGE_WIDTH * len(singles)]
        units.extend(merged)
        frontier = merged
    return units


def _conflict(u: Unit, chosen: list[Unit]) -> bool:
    """Two units may not feed each other (a kept input must stay kept) nor
    replay the same node."""
    return any(set(u.inputs) & c.rooted or set(c.inputs) & u.rooted or u.rooted & c.rooted
               for c in chosen)


def rewrite(graph: Any, units: list[Unit]) -> Graph:
    """``graph`` with ``units`` recomputed in the backward phase (module docstring)."""
    g = load_graph(graph)
    nodes = {n["id"]: n for n in g.nodes}
    order = _order_of(g)
    taken_t = {t["id"] for t in g.tensors}
    taken_n = set(nodes)

    def fresh(ident: str, taken: set) -> str:
        new, k = ident + SUFFIX, 1
        while new in taken:
            new, k = f"{ident}{SUFFIX}{k}", k + 1
        taken.add(new)
        return new

    units = sorted(units, key=lambda u: u.step)
    for i, u in enumerate(units):
        if _conflict(u, units[:i]):
            raise ValueError(f"units {u.node!r} and another one feed each other or replay the "
                             f"same node; recompute one of them")
    made_in_backward = {tid for n in g.nodes if n.get("phase") == "backward" for tid in n["outputs"]}
    rename: dict[str, str] = {}
    for u in units:
        for t in g.tensors:  # document order: deterministic ids
            if t["id"] in u.rooted and t["id"] not in made_in_backward:
                rename[t["id"]] = fresh(t["id"], taken_t)
    all_rooted = set().union(*(u.rooted for u in units)) if units else set()
    kept = {tid for u in units for tid in u.inputs}
    tensors = []
    for t in g.tensors:
        entry = {k: (dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v)
                 for k, v in t.items()}
        if t["id"] in rename:
            entry.pop("saved_for_backward", None)  # backward reads the copy now
        if t["id"] in kept and t["role"] in ("activation", "input"):
            entry["saved_for_backward"] = True    # backward reads it to recompute
        if t["id"] in made_in_backward and t["id"] in all_rooted:
            base = entry["view_of"]["base"]
            entry["view_of"]["base"] = rename.get(base, base)
        tensors.append(entry)
        if t["id"] in rename:
            copy = {k: (dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v)
                    for k, v in t.items()}
            copy["id"] = rename[t["id"]]
            copy.pop("saved_for_backward", None)
            if "view_of" in copy:
                base = copy["view_of"]["base"]
                copy["view_of"]["base"] = rename.get(base, base)
            tensors.append(copy)
    out_nodes = []
    for n in g.nodes:
        entry = dict(n, inputs=list(n["inputs"]), outputs=list(n["outputs"]))
        if n.get("phase") == "backward":
            entry["inputs"] = [rename.get(tid, tid) for tid in n["inputs"]]
        out_nodes.append(entry)
    copies: dict[str, list[dict]] = {}   # first backward reader -> copies to run before it
    recompute_of = {}
    by_id = {n["id"]: n for n in out_nodes}
    for u in units:
        mine = {rename[x] for x in u.rooted if x in rename}
        first = next((nid for nid in order if by_id[nid].get("phase") == "backward" and (
            mine.intersection(by_id[nid]["inputs"]) or u.rooted.intersection(by_id[nid]["outputs"]))),
            None)
        if first is None:  # pragma: no cover - candidates() requires a backward reader
            continue
        own = {x: rename[x] for x in u.rooted if x in rename}
        for m in u.nodes:
            n = nodes[m]
            new_id = fresh(m, taken_n)
            recompute_of[new_id] = m
            copies.setdefault(first, []).append({
                "id": new_id, "op": n["op"], "inputs": [own.get(x, x) for x in n["inputs"]],
                "outputs": [rename[x] for x in n["outputs"]], "phase": "backward"})
    new_order = []
    for nid in order:
        new_order.extend(c["id"] for c in copies.get(nid, ()))
        new_order.append(nid)
    out = Graph(name=g.name, source=g.source)
    out.tensors = tensors
    out.nodes = out_nodes + [c for nid in order for c in copies.get(nid, ())]
    out.execution_order = new_order
    out.outputs = list(g.outputs)
    out.safepoints = list(g.safepoints)
    out.recompute_of = recompute_of  # read by the report; not part of the document
    return out


def _arena_size(p, arena: str) -> int:
    return p.arenas[arena].size if arena in p.arenas else 0


def remat(graph: Any, budget_bytes: int, cost="flops", *, arena: str = "activations",
          time_budget_ms: int = DEFAULT_REMAT_BUDGET_MS, alignment: int | None = None,
          arenas: Mapping | None = None, role_arenas: Mapping | None = None,
          arena_layout: str | None = None) -> RematResult:
    """Recompute saved activations in the backward phase of a training graph
    so that ``arena`` planned by ``auto`` (backward mode) fits ``budget_bytes``
    at the least recompute cost found.

    ``cost``: ``"flops"`` (emel.memory.cost_model) or a callable
    ``(node, tensors_by_id) -> number``. ``time_budget_ms`` bounds the search
    in deterministic work units. Returns ``(graph, plan, report)``
    (:class:`RematResult`). When no choice fits, raises ``PlanError``
    (``ARENA_TOO_SMALL``) naming the arena and the smallest size reached.
    ``arena_layout`` as in plan(): by default gradients share the activations
    arena, so ``budget_bytes`` bounds both.
    """
    check_u64(budget_bytes, "budget_bytes", arena=arena)
    if not is_int(time_budget_ms) or time_budget_ms < 0:
        raise ValueError(f"time_budget_ms must be an integer >= 0; got {time_budget_ms!r}")
    cost_function(cost)  # an unknown cost model fails before any work
    role_arenas = roles_for_layout(arena_layout, "auto", role_arenas)  # the plan's and the bound's
    g = load_graph(graph)
    g.validate()
    if not any(n.get("phase") == "backward" for n in g.nodes):
        raise PlanError("INVALID_IR_SHAPES", f"remat needs a training graph: graph {g.name!r} has no "
                        f"node with phase 'backward'", node=g.nodes[0]["id"] if g.nodes else None)

    def place(h: Graph):
        return plan_graph(h, mode="backward", strategy="auto", alignment=alignment, arenas=arenas,
                          role_arenas=role_arenas, arena_layout="separate")  # layout applied above

    def bound_state(h: Graph):
        lb = LiveBytes(h, "backward", role_arenas)
        if arena not in lb.arenas:
            return 0, 0, lb, None
        pos = lb.positions(_order_of(h))
        live = lb.live(pos)[lb.arenas.index(arena)]
        peak = int(live.max())
        return peak, int((live == peak).sum()), lb, (pos, int(live.argmax()))

    base = place(g)
    before = _arena_size(base, arena)
    if arena not in base.arenas:
        raise PlanError("INVALID_IR_SHAPES", f"graph {g.name!r} has no arena {arena!r}", arena=arena)
    bound0 = base.arenas[arena].lower_bound
    units = candidates(g, cost)

    def result(h: Graph, p, chosen: list[Unit]) -> RematResult:
        report = RematReport(
            budget_bytes=budget_bytes, arena=arena,
            recomputed=[r for u in sorted(chosen, key=lambda u: u.step) for r in u.saved],
            recompute_nodes=dict(getattr(h, "recompute_of", {})),
            cost=sum(u.cost for u in chosen), arena_before=before,
            arena_after=_arena_size(p, arena), bound_before=bound0,
            bound_after=p.arenas[arena].lower_bound, candidates=len(units))
        return RematResult(graph=h, plan=p, report=report, units=sorted(chosen, key=lambda u: u.step))

    if before <= budget_bytes:
        return result(g, base, [])
    work = [min(time_budget_ms, 2**40) * UNITS_PER_MS // len(_PASSES)]
    trial_cost = _TRIAL_EVALS * bound_state(g)[2].work_per_eval

    def spend() -> bool:
        if work[0] < trial_cost:
            return False
        work[0] -= trial_cost
        return True

    def greedy(key):
        """Add units until the placed arena fits; (fit or None, smallest seen)."""
        chosen: list[Unit] = []
        peak, flat, lb, where = bound_state(g)
        best = (before, [])
        while True:
            # Units not chosen whose saved storage is live at the peak, in
            # ``key`` order; take the first that lowers the peak (or the
            # number of steps at it).
            pos, at = where
            birth, death = lb.lifetimes(pos)
            slot = {lb.graph.tensors[i]["id"]: r for i, r in lb.storage_slot.items()}
            live_at_peak = [u for u in units if u not in chosen and not _conflict(u, chosen) and any(
                birth[slot[r]] <= at <= death[slot[r]] for r in u.saved)]
            live_at_peak.sort(key=key)
            moved = False
            for u in live_at_peak:
                if not spend():
                    break
                trial = chosen + [u]
                t_peak, t_flat, t_lb, t_where = bound_state(rewrite(g, trial))
                if (t_peak, t_flat) < (peak, flat):
                    chosen, peak, flat, lb, where, moved = trial, t_peak, t_flat, t_lb, t_where, True
                    break
            if not moved:
                return None, best
            # Verify with the real placement (in-place reuse can put it below the bound).
            h = rewrite(g, chosen)
            p = place(h)
            size = _arena_size(p, arena)
            if size < best[0]:
                best = (size, list(chosen))
            if size <= budget_bytes:
                return prune(chosen, h, p), best

    def prune(chosen, h, p):
        """Drop the most expensive units the budget does not need."""
        for u in sorted(chosen, key=lambda u: (-u.cost, u.step)):
            if len(chosen) < 2 or not spend():
                break
            trial = [c for c in chosen if c is not u]
            th = rewrite(g, trial)
            tp = place(th)
            if _arena_size(tp, arena) <= budget_bytes:
                chosen, h, p = trial, th, tp
        return chosen, h, p

    fits, smallest = [], (before, [])
    for key in _PASSES:
        fit, best = greedy(key)
        if fit is not None:
            fits.append(fit)
        if best[0] < smallest[0]:
            smallest = best
        work[0] += min(time_budget_ms, 2**40) * UNITS_PER_MS // len(_PASSES)
    if not fits:
        raise PlanError(
            "ARENA_TOO_SMALL",
            f"remat cannot fit arena {arena!r} of graph {g.name!r} in {budget_bytes} bytes: the "
            f"smallest placed arena reached is {smallest[0]} bytes ({len(smallest[1])} of "
            f"{len(units)} recomputable units recomputed; {before} bytes without recompute)",
            arena=arena)
    # The cheapest fitting answer (ties: the smaller arena, then the first pass).
    chosen, h, p = min(fits, key=lambda f: (sum(u.cost for u in f[0]), _arena_size(f[2], arena)))
    return result(h, p, chosen)


#: The greedy's orders: the cheapest recompute per saved byte first, then the
#: most saved bytes first (it reaches lower arenas when small units would
#: block the longer replays that contain them).
_PASSES = (lambda u: (Fraction(u.cost, u.bytes), u.step),
           lambda u: (-u.bytes, Fraction(u.cost, u.bytes), u.step))


__all__ = ["Unit", "RematReport", "RematResult", "candidates", "rewrite", "remat", "RANDOM_OPS", "STATEFUL_OPS"]
