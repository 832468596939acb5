"""reorder(): a memory-aware execution order (docs/below-bound.md).

The lower bound every placement strategy chases is the peak of live bytes for
one execution order. This module searches for another valid order with a lower
peak: a memory-aware list scheduler (Kahn's algorithm, preferring the ready
node that frees the most bytes), then a local search that moves one node at a
time to either end of its topological window. Every order is scored by
:class:`LiveBytes`, a vectorised evaluator of the liveness rules of
docs/algorithm.md §2 and of its in-place pairs (§4), that gives the core's
``lower_bound`` per arena (tests/test_reorder.py checks it on every shared
graph and mode, and on random graphs).

Valid means: every node after the producers of what it reads (and of the
bases of the views it reads or makes), forward nodes before backward nodes,
and the given order kept between a node that writes a storage (its producer,
or a node that makes an alias of it and is not a known pure view op) and
every other node that touches that storage. Work is counted in deterministic
units, never wall time, so an input and a budget give one order everywhere.
"""

from __future__ import annotations

import heapq
from typing import Any, Callable, Mapping

import numpy as np

from .errors import PlanError
from .graph import Graph, load_graph, tensor_bytes
from .symbolic import concrete_shape

#: ATen ops that only alias their input (no write), by base name (``t``,
#: ``t.default``, ``transpose.int`` all match): making one of them never orders
#: a node against the readers of its storage. Any other node whose output is
#: an alias (``relu_``, ``add_``) is treated as a write.
VIEW_OPS = frozenset((
    "view", "_unsafe_view", "_reshape_alias", "reshape", "t", "transpose", "permute", "expand",
    "slice", "select", "unsqueeze", "squeeze", "detach", "alias", "as_strided", "split",
    "split_with_sizes", "unbind", "diagonal", "narrow", "unfold", "view_as_real",
    "view_as_complex", "lift_fresh", "numpy_T", "movedim", "expand_as", "view_as",
    "unsafe_split", "chunk", "reshape_as", "flatten", "unflatten",
))


def is_view_op(op: str) -> bool:
    """``op`` (an ATen name, with or without overload) only makes an alias."""
    return op.split("::")[-1].split(".")[0] in VIEW_OPS

_PERSISTENT_ROLES = ("parameter", "optimizer_state")
#: Work units per millisecond of ``time_budget_ms``. One evaluation of an
#: order costs nodes + touches + 2 x storage tensors units; 30,000 units took
#: about a millisecond of search on the benchmark machine (bench/below_bound.py).
UNITS_PER_MS = 30_000
DEFAULT_REORDER_BUDGET_MS = 1000


def _order_of(g: Graph) -> list[str]:
    return list(g.execution_order) if g.execution_order is not None else [n["id"] for n in g.nodes]


class LiveBytes:
    """The liveness rules of docs/algorithm.md §2, compiled to arrays, so the
    peak of live bytes of any order of one graph costs a few NumPy passes.

    ``peaks(pos)`` takes ``pos[node index] = step`` and returns the per-arena
    peaks (arena order: :attr:`arenas`) and the area under the live-bytes
    curve (the tie-break of the search).
    """

    def __init__(self, graph: Any, mode: str = "inference",
                 role_arenas: Mapping[str, str] | None = None):
        g = load_graph(graph)
        g.validate()  # bad input is the core's PlanError, before any search
        role_arenas = dict(role_arenas or {})
        self.graph = g
        self.mode = mode
        tensors, nodes = g.tensors, g.nodes
        self.node_ids = [n["id"] for n in nodes]
        self.node_index = {nid: k for k, nid in enumerate(self.node_ids)}
        index = {t["id"]: i for i, t in enumerate(tensors)}
        self.tensor_index = index
        n_t, n = len(tensors), len(nodes)
        self.n = n
        root = list(range(n_t))
        for i, t in enumerate(tensors):
            j = i
            while "view_of" in tensors[j]:
                j = index[tensors[j]["view_of"]["base"]]
            root[i] = j
        self.root = root
        storage = [i for i in range(n_t) if root[i] == i]
        slot = {i: k for k, i in enumerate(storage)}  # storage tensor -> row
        self.storage = storage
        self.storage_slot = slot
        size = []
        arena_names: list[str] = []
        arena_of = []
        for i in storage:
            t = tensors[i]
            entry = t if all(type(d) is int for d in t["shape"]) else {
                **t, "shape": concrete_shape(t["shape"])}
            size.append(tensor_bytes(entry))
            name = t.get("arena") or role_arenas.get(t["role"]) or _default_arena(t["role"])
            if name not in arena_names:
                arena_names.append(name)
            arena_of.append(name)
        self.arenas = sorted(arena_names)
        # Python ints past int64 (tensors near 2^64 bytes): sums stay exact.
        self.size = np.array(size, dtype=np.int64 if max(size, default=0) < 2**63 else object)
        self.arena = np.array([self.arenas.index(a) for a in arena_of], dtype=np.int64)

        # Which storage each node touches (each once), and who produces it.
        producer = np.full(len(storage), -1, dtype=np.int64)
        touches: list[list[int]] = []
        for k, node in enumerate(nodes):
            seen: list[int] = []
            for tid in node["inputs"] + node["outputs"]:
                r = slot[root[index[tid]]]
                if r not in seen:
                    seen.append(r)
            for tid in node["outputs"]:
                if root[index[tid]] == index[tid]:
                    producer[slot[index[tid]]] = k
            touches.append(seen)
        self.touches = touches
        self.producer = producer

        # Pinned storage lives to the last step; persistent roles from step 0.
        outputs = set(g.outputs)
        pinned = np.zeros(len(storage), dtype=bool)
        persistent = np.zeros(len(storage), dtype=bool)
        for i, t in enumerate(tensors):
            r = slot[root[i]]
            if t["role"] == "output" or t["id"] in outputs:
                pinned[r] = True
            if mode == "forward" and t.get("saved_for_backward"):
                pinned[r] = True
        for i in storage:
            if tensors[i]["role"] in _PERSISTENT_ROLES:
                persistent[slot[i]] = True
        self.pinned = pinned | persistent
        self.persistent = persistent
        t_root = np.array([r for ts in touches for r in ts], dtype=np.int64)
        t_node = np.array([k for k, ts in enumerate(touches) for _ in ts], dtype=np.int64)
        by_root = np.argsort(t_root, kind="stable")
        self._t_root = t_root[by_root]
        self._t_node = t_node[by_root]
        self._starts = np.flatnonzero(np.r_[True, self._t_root[1:] != self._t_root[:-1]]) \
            if len(t_root) else np.zeros(0, dtype=np.int64)
        self._touched_roots = self._t_root[self._starts] if len(t_root) else self._starts
        self.work_per_eval = n + len(t_root) + 2 * len(storage) + 1
        self._exact = sum(size) < 2**53  # bincount weights are doubles
        self._inplace_pairs(outputs)

    def _inplace_pairs(self, outputs: set) -> None:
        """The (node, taker, victim) rows that may form an in-place pair
        (docs/algorithm.md §4 step 2), every condition checked but the one an
        order decides: the victim dies at the taker's node. In node order,
        then the sweep's order of the node's takers (size descending, id),
        then the victim preferred (largest, id)."""
        g, index, root, slot = self.graph, self.tensor_index, self.root, self.storage_slot
        tensors = g.tensors
        rank = {tid: k for k, tid in enumerate(sorted(index))}  # id order (UTF-8 byte order)
        saved = set()   # roots of saved tensors (forward and backward modes)
        output = set()  # roots of outputs
        for i, t in enumerate(tensors):
            if self.mode != "inference" and t.get("saved_for_backward"):
                saved.add(root[i])
            if t["role"] == "output" or t["id"] in outputs:
                output.add(root[i])
        partners: dict[int, set] = {}
        for i, t in enumerate(tensors):
            for other in t.get("must_not_alias") or ():
                a, b = root[i], root[index[other]]
                partners.setdefault(a, set()).add(b)
                partners.setdefault(b, set()).add(a)
        size, arena, producer = self.size, self.arena, self.producer
        # The persistent arena (by default only "parameters") reuses nothing.
        persistent_arena = self.arenas.index("parameters") if "parameters" in self.arenas else -1
        rows = []
        for k, node in enumerate(g.nodes):
            views_here = {root[index[x]] for x in node["inputs"] + node["outputs"]
                          if root[index[x]] != index[x]}
            takers = [index[x] for x in dict.fromkeys(node["outputs"])
                      if root[index[x]] == index[x] and tensors[index[x]].get("can_inplace")
                      and tensors[index[x]]["role"] not in _PERSISTENT_ROLES
                      and arena[slot[index[x]]] != persistent_arena]
            takers.sort(key=lambda t: (-int(size[slot[t]]), rank[tensors[t]["id"]]))
            for t in takers:
                victims = [i for i in dict.fromkeys(index[x] for x in node["inputs"])
                           if i != t and root[i] == i and arena[slot[i]] == arena[slot[t]]
                           and tensors[i]["role"] not in ("input", "output", *_PERSISTENT_ROLES)
                           and i not in output and i not in saved and i not in views_here
                           and size[slot[i]] >= size[slot[t]] and i not in partners.get(t, ())]
                victims.sort(key=lambda i: (-int(size[slot[i]]), rank[tensors[i]["id"]]))
                for i in victims:
                    # Born at the same step (step 0, no producer), the victim
                    # must come first in the sweep to be taken.
                    after = (producer[slot[i]] < 0 and size[slot[i]] == size[slot[t]]
                             and rank[tensors[i]["id"]] > rank[tensors[t]["id"]])
                    rows.append((k, slot[t], slot[i], after))
        cols = list(zip(*rows)) or [(), (), (), ()]
        self._pair_node, self._pair_taker, self._pair_victim = (
            np.array(c, dtype=np.int64) for c in cols[:3])
        self._pair_after = np.array(cols[3], dtype=bool)
        # must_not_alias partners, by storage row: a taker joins no buffer
        # (its chain of in-place takers) that holds one of its partners.
        self._partners = {slot[a]: {slot[b] for b in bs} for a, bs in partners.items()}

    def shared(self, pos: np.ndarray, death: np.ndarray) -> list[tuple[int, int, int]]:
        """(arena, step, bytes) of each in-place pair that forms in order
        ``pos``: the taker's bytes are its victim's at the taker's step."""
        if not len(self._pair_node):
            return []
        step = pos[self._pair_node]
        ok = np.flatnonzero((death[self._pair_victim] == step) & ~(self._pair_after & (step == 0)))
        ok = ok[np.argsort(step[ok], kind="stable")]  # chains form in step order
        taken, takers, chain = set(), set(), {}
        out = []
        for p in ok.tolist():
            t, v = int(self._pair_taker[p]), int(self._pair_victim[p])
            if t in takers or v in taken:
                continue
            members = chain.get(v, (v,))
            if self._partners and self._partners.get(t, set()).intersection(members):
                continue
            takers.add(t)
            taken.add(v)
            chain[t] = members + (t,)
            out.append((int(self.arena[t]), int(step[p]), int(self.size[t])))
        return out

    def lifetimes(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(birth, death) per storage tensor for node positions ``pos``."""
        last = max(self.n - 1, 0)
        produced = self.producer >= 0
        # (a graph of no nodes has no positions: everything is born at step 0)
        birth = (np.where(produced, pos[np.maximum(self.producer, 0)], 0) if self.n
                 else np.zeros(len(self.producer), dtype=np.int64))
        birth[self.persistent] = 0
        death = birth.copy()
        if len(self._t_root):
            steps = pos[self._t_node]
            death[self._touched_roots] = np.maximum(
                death[self._touched_roots], np.maximum.reduceat(steps, self._starts))
        death[self.pinned] = last
        return birth, death

    def live(self, pos: np.ndarray) -> np.ndarray:
        """Live bytes per arena (rows: ``self.arenas``) per step (columns)."""
        birth, death = self.lifetimes(pos)
        width = max(self.n, 1) + 1  # steps and one past the last (no nodes: one step)
        n_arenas = len(self.arenas)
        if self._exact:
            diff = np.bincount(self.arena * width + birth, weights=self.size,
                               minlength=n_arenas * width)
            diff -= np.bincount(self.arena * width + death + 1, weights=self.size,
                                minlength=n_arenas * width)
            live = np.rint(np.cumsum(diff.reshape(n_arenas, width), axis=1)).astype(np.int64)
        else:  # arenas beyond 2^53 bytes
            diff = np.zeros(n_arenas * width, dtype=object)
            np.add.at(diff, self.arena * width + birth, self.size.astype(object))
            np.subtract.at(diff, self.arena * width + death + 1, self.size.astype(object))
            live = np.cumsum(diff.reshape(n_arenas, width), axis=1)
        for a, step, nbytes in self.shared(pos, death):
            live[a, step] -= nbytes  # an in-place pair's bytes, counted once
        return live[:, :max(self.n, 1)]

    def peaks(self, pos: np.ndarray) -> tuple[np.ndarray, int]:
        """Per-arena peak of live bytes (arena order: ``self.arenas``) and the area."""
        live = self.live(pos)
        return live.max(axis=1), int(live.sum())

    def bounds(self, order: list[str] | None = None) -> dict[str, int]:
        """The per-arena lower bound (docs/algorithm.md §7) for ``order``
        (default: the graph's own)."""
        peaks, _ = self.peaks(self.positions(order or _order_of(self.graph)))
        return {a: int(p) for a, p in zip(self.arenas, peaks)}

    def positions(self, order: list[str]) -> np.ndarray:
        pos = np.empty(self.n, dtype=np.int64)
        pos[[self.node_index[nid] for nid in order]] = np.arange(self.n)
        return pos


def _default_arena(role: str) -> str:
    if role in _PERSISTENT_ROLES:
        return "parameters"
    return "gradients" if role == "gradient" else "activations"


def live_bytes_bound(graph: Any, mode: str = "inference", order: list[str] | None = None, *,
                     role_arenas: Mapping[str, str] | None = None) -> dict[str, int]:
    """Per-arena peak of live bytes of ``graph`` run in ``order`` (default: its
    own), an in-place pair's shared bytes counted once: the ``lower_bound``
    that ``plan()`` reports, without planning (``peak_live_bytes`` counts both
    tensors of a pair, so it can be higher)."""
    return LiveBytes(graph, mode, role_arenas).bounds(order)


class _Constraints:
    """The edges a valid order keeps (module docstring), as predecessor and
    successor lists per node index, plus each node's phase."""

    def __init__(self, lb: LiveBytes):
        g, index, root = lb.graph, lb.tensor_index, lb.root
        tensors, nodes = g.tensors, g.nodes
        n = lb.n
        prod_of = {}
        for k, node in enumerate(nodes):
            for tid in node["outputs"]:
                prod_of[index[tid]] = k
        preds: list[set[int]] = [set() for _ in range(n)]

        def ancestors(i: int, strict: bool):
            if not strict:
                yield i
            while "view_of" in tensors[i]:
                i = index[tensors[i]["view_of"]["base"]]
                yield i

        for k, node in enumerate(nodes):
            for tid in node["inputs"]:
                for a in ancestors(index[tid], strict=False):
                    if a in prod_of and prod_of[a] != k:
                        preds[k].add(prod_of[a])
            for tid in node["outputs"]:
                for a in ancestors(index[tid], strict=True):
                    if a in prod_of and prod_of[a] != k:
                        preds[k].add(prod_of[a])
        # Hazards: keep the given order between a writer of a storage and
        # every other node touching it (readers before a write stay before).
        given = [lb.node_index[nid] for nid in _order_of(g)]
        step = {k: s for s, k in enumerate(given)}
        writes: list[set[int]] = [set() for _ in range(len(lb.storage))]
        for k, node in enumerate(nodes):
            for tid in node["outputs"]:
                i = index[tid]
                if root[i] == i or not is_view_op(node["op"]):
                    writes[lb.storage_slot[root[i]]].add(k)
        accessors: list[list[int]] = [[] for _ in range(len(lb.storage))]
        for k in given:
            for r in lb.touches[k]:
                accessors[r].append(k)
        for r, acc in enumerate(accessors):
            if not writes[r] or len(acc) < 2:
                continue
            last_write, since = None, []  # nodes after the last write
            for k in acc:
                if k in writes[r]:
                    for j in since:
                        preds[k].add(j)
                    if last_write is not None and not since:
                        preds[k].add(last_write)
                    last_write, since = k, []
                else:
                    if last_write is not None:
                        preds[k].add(last_write)
                    since.append(k)
        for k in range(n):
            preds[k].discard(k)
        self.preds = [sorted(p, key=step.__getitem__) for p in preds]
        succs: list[list[int]] = [[] for _ in range(n)]
        for k in given:
            for p in self.preds[k]:
                succs[p].append(k)
        self.succs = succs
        self.phase = [node.get("phase") for node in nodes]
        self.given = given
        # The given order must itself keep forward before backward.
        first_backward = None
        for k in given:
            if self.phase[k] == "backward" and first_backward is None:
                first_backward = k
            elif self.phase[k] == "forward" and first_backward is not None:
                raise PlanError("INVALID_IR_SHAPES",
                                f"forward node {nodes[k]['id']!r} runs after backward node "
                                f"{nodes[first_backward]['id']!r} in the given order, so there is "
                                f"no phase-respecting order to start from", node=nodes[k]["id"])


class _Budget:
    def __init__(self, units: int):
        self.left = units

    def spend(self, units: int) -> bool:
        """Spend ``units``; False (and nothing spent) once the budget is gone."""
        if self.left < units:
            return False
        self.left -= units
        return True


def _list_schedule(lb: LiveBytes, c: _Constraints, tie: str) -> list[int]:
    """Kahn's algorithm, taking the ready node with the least net new bytes
    (bytes it allocates minus bytes whose last toucher it is). Ties: the
    given order (``tie="given"``) or the node reading the most recently made
    tensor (``tie="depth"``, a depth-first flavour), then the given order."""
    n = lb.n
    given_step = np.empty(n, dtype=np.int64)
    given_step[c.given] = np.arange(n)
    size = lb.size.tolist()
    pinned = lb.pinned.tolist()
    producer = lb.producer.tolist()
    alloc = [0] * n
    for r, k in enumerate(producer):
        if k >= 0:
            alloc[k] += size[r]
    remaining = [0] * len(size)
    touchers: list[list[int]] = [[] for _ in size]
    for k, ts in enumerate(lb.touches):
        for r in ts:
            remaining[r] += 1
            touchers[r].append(k)
    missing = [len(p) for p in c.preds]
    forward_left = sum(1 for p in c.phase if p == "forward")
    made_at = [-1] * len(size)  # step each storage was last touched (recency)
    done = [False] * n
    ready_score: dict[int, tuple] = {}
    heap: list[tuple] = []
    held: list[int] = []  # backward nodes waiting for the forward phase to end
    step = 0

    def key(k: int) -> tuple:
        freed = sum(size[r] for r in lb.touches[k] if not pinned[r] and remaining[r] == 1)
        net = alloc[k] - freed
        if tie == "depth":
            recent = max((made_at[r] for r in lb.touches[k]), default=-1)
            return (net, -recent, int(given_step[k]))
        return (net, int(given_step[k]))

    def push(k: int) -> None:
        kk = key(k)
        ready_score[k] = kk
        heapq.heappush(heap, (kk, k))

    def make_ready(k: int) -> None:
        if c.phase[k] == "backward" and forward_left:
            held.append(k)
        else:
            push(k)

    for k in c.given:
        if missing[k] == 0:
            make_ready(k)
    order: list[int] = []
    while heap:
        kk, k = heapq.heappop(heap)
        if done[k] or ready_score.get(k) != kk:
            continue
        done[k] = True
        order.append(k)
        del ready_score[k]
        changed = set()
        for r in lb.touches[k]:
            remaining[r] -= 1
            made_at[r] = step
            if remaining[r] == 1 and not pinned[r]:
                changed.update(u for u in touchers[r] if not done[u])
        if tie == "depth":  # recency changed for every ready reader of k's storage
            changed.update(u for r in lb.touches[k] for u in touchers[r] if not done[u])
        step += 1
        if c.phase[k] == "forward":
            forward_left -= 1
            if forward_left == 0:
                for u in held:
                    push(u)
                held.clear()
        for s in c.succs[k]:
            missing[s] -= 1
            if missing[s] == 0:
                make_ready(s)
        for u in sorted(changed):
            if u in ready_score:
                push(u)
    if len(order) != n:  # pragma: no cover - the core validated the order
        raise PlanError("LIVENESS_CYCLE", "the graph's dataflow has a cycle")
    return order


def _local_search(lb: LiveBytes, c: _Constraints, order: list[int], budget: _Budget,
                  score: Callable) -> list[int]:
    """Move one node at a time to the first or last step of its window (after
    its last predecessor, before its first successor, inside its phase);
    keep a move when it lowers (peak sum, area). Sweeps until a sweep
    finds nothing or the budget is spent."""
    n = lb.n
    best = score(order)
    forward = np.array([p == "forward" for p in c.phase], dtype=bool)
    backward = np.array([p == "backward" for p in c.phase], dtype=bool)
    improved = True
    while improved:
        improved = False
        for k in list(order):
            pos = np.empty(n, dtype=np.int64)
            pos[order] = np.arange(n)
            i = int(pos[k])
            lo = max((int(pos[p]) + 1 for p in c.preds[k]), default=0)
            hi = min((int(pos[s]) - 1 for s in c.succs[k]), default=n - 1)
            if c.phase[k] == "forward" and backward.any():
                hi = min(hi, int(pos[backward].min()) - 1)
            elif c.phase[k] == "backward" and forward.any():
                lo = max(lo, int(pos[forward].max()) + 1)
            for target in (lo, hi):
                if target == i:
                    continue
                if not budget.spend(lb.work_per_eval):
                    return order
                trial = order[:i] + order[i + 1:]
                trial.insert(target, k)
                s = score(trial)
                if s < best:
                    best, order, improved = s, trial, True
                    break
    return order


def reorder(graph: Any, mode: str = "inference", time_budget_ms: int = DEFAULT_REORDER_BUDGET_MS,
            *, role_arenas: Mapping[str, str] | None = None) -> Graph:
    """A copy of ``graph`` whose ``execution_order`` lowers the peak of live
    bytes in ``mode`` (the sum over arenas of the per-arena lower bound), or
    the given order when no order found within ``time_budget_ms`` (converted
    to deterministic work units) is strictly better. The order is valid
    (module docstring) and the same for the same graph, mode and budget.
    """
    if mode not in ("inference", "forward", "backward"):
        raise ValueError(f"mode must be one of inference, forward, backward; got {mode!r}")
    if type(time_budget_ms) is not int or time_budget_ms < 0:
        raise ValueError(f"time_budget_ms must be an integer >= 0; got {time_budget_ms!r}")
    lb = LiveBytes(graph, mode, role_arenas)
    c = _Constraints(lb)
    out = Graph.from_dict(lb.graph.to_dict())
    given = list(c.given)
    out.execution_order = [lb.node_ids[k] for k in given]
    if lb.n < 2:
        return out
    budget = _Budget(min(time_budget_ms, 2**40) * UNITS_PER_MS)

    def score(order: list[int]) -> tuple[int, int]:
        pos = np.empty(lb.n, dtype=np.int64)
        pos[order] = np.arange(lb.n)
        peaks, area = lb.peaks(pos)
        return int(peaks.sum()), area

    start = score(given)
    best, best_order = start, given
    for tie in ("given", "depth"):
        # A schedule costs about as much as a few evaluations: charge it so.
        if not budget.spend(4 * lb.work_per_eval):
            break
        cand = _list_schedule(lb, c, tie)
        s = score(cand)
        if s < best:
            best, best_order = s, cand
    best_order = _local_search(lb, c, best_order, budget, score)
    best = score(best_order)
    if best[0] < start[0]:  # strictly lower peak: else the given order stands
        out.execution_order = [lb.node_ids[k] for k in best_order]
    return out


def optimize_order(g: Graph, mode: str, plan_core: Callable, time_budget_ms: int,
                   role_arenas: Mapping[str, str] | None = None) -> tuple[Graph, Any]:
    """``plan(..., order="optimize")``: plan the given order and the
    reordered one with the same settings; keep the reordered graph only when
    its total bytes are strictly smaller (never worse than the given order)."""
    given_core = plan_core(g)
    better = reorder(g, mode, time_budget_ms, role_arenas=role_arenas)
    if better.execution_order == _order_of(g):
        return g, given_core
    core = plan_core(better)
    if sum(row["size"] for row in core.arenas) < sum(row["size"] for row in given_core.arenas):
        return better, core
    return g, given_core


__all__ = ["LiveBytes", "live_bytes_bound", "reorder", "optimize_order", "VIEW_OPS", "is_view_op"]
