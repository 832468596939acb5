"""emel as ExecuTorch's memory planner (docs/executorch.md; needs ``emel[executorch]``).

ExecuTorch plans each program's activations with a greedy algorithm and lets
the export script pass its own::

    from emel.memory.executorch import memory_planning_pass
    config = ExecutorchBackendConfig(memory_planning_pass=memory_planning_pass())
    program = edge.to_executorch(config)

:class:`EmelAlgorithm` is the algorithm under that pass, a member for a
user's own ``MemoryPlanningAlgorithmSuite``. It reads what ExecuTorch's
``greedy`` reads and writes what it writes (a ``MemoryAlgoResult``): every
``mem_id`` is its own arena placed by :func:`emel.memory.place`, lifetimes are
ExecuTorch's inclusive ``[first, last]`` node indices, specs that live inside
another spec's storage (``storage_base`` chains) follow their root, the space
reserved for control-flow submodules (``input_mem_buffer_sizes``) stays at
the bottom of each arena and ``extra_padding`` on top.

ExecuTorch is imported only when something here is called: ``import
emel.memory`` never needs it.
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

from .errors import PlanError, is_int
from .placement import place

__all__ = ["EmelAlgorithm", "ArenaStats", "CallStats", "BufferReport", "memory_planning_pass", "suite",
           "verify", "storage_reuse_pairs", "replan", "report"]

# ExecuTorch's default TensorSpec.alignment (executorch.exir.tensor.ALIGNMENT).
# A spec carrying any other alignment larger than the pass's was given it by
# someone (a backend pass): emel honours it instead of realigning it away.
_SPEC_DEFAULT_ALIGNMENT = 16


def _executorch():
    """The parts of ExecuTorch used here, or an ImportError saying how to get them."""
    try:
        import executorch.exir  # noqa: F401  (registers the schemas of ExecuTorch's own operators)
        from executorch.exir import memory_planning, schema
        from executorch.exir._serialize._program import deserialize_pte_binary, serialize_pte_binary
        from executorch.exir.passes import memory_planning_pass
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "emel.memory.executorch needs ExecuTorch: pip install 'emel[executorch]' "
            f"(or '.[executorch]' from a checkout); importing it failed: {e}") from None
    return SimpleNamespace(mp=memory_planning, mpp=memory_planning_pass, schema=schema,
                           load=deserialize_pte_binary, save=serialize_pte_binary)


def _align_up(n: int, a: int) -> int:
    return -(-n // a) * a


@dataclass
class ArenaStats:
    """What one call planned in one ``mem_id``: bytes and how they were found."""
    mem_id: int
    specs: int          # specs placed in the arena, storage-backed ones included
    buffers: int        # rows given to place(): the chains' roots
    reserved: int       # input_mem_buffer_sizes[mem_id], kept at the bottom
    padding: int        # extra_padding, kept on top
    size: int           # the arena's bytes as returned (reserved + placed + padding)
    placed: int         # bytes of the placement alone
    lower_bound: int    # peak of live bytes of the rows: no placement is smaller
    optimal: bool
    method: str
    alignment: int      # the alignment the placement used


@dataclass
class CallStats:
    """One call of :class:`EmelAlgorithm`: its arenas and its wall time."""
    seconds: float
    arenas: Dict[int, ArenaStats] = field(default_factory=dict)

    @property
    def planned_bytes(self) -> int:
        return sum(a.size for a in self.arenas.values())

    @property
    def lower_bound(self) -> int:
        return sum(a.reserved + a.lower_bound + a.padding for a in self.arenas.values())


class EmelAlgorithm:
    """An ExecuTorch memory planning algorithm placing each arena with emel.

    Called as ExecuTorch calls ``greedy``: ``(alignment, specs, graph_module,
    graph_signature, extra_padding) -> MemoryAlgoResult``. It changes no
    planning field of a spec (``mem_id``, ``mem_offset``, ``mem_obj_id``: the
    suite writes the winner's back) and nothing of the graph module; like
    ``greedy`` it realigns each spec (``spec.realign``) to the alignment it is
    planned at. ``__name__`` is ``emel_<strategy>``: a suite keys its members by
    name, so two members need two names (``name=``).
    After each call ``last`` holds a :class:`CallStats`.
    """

    def __init__(self, strategy: str = "auto", time_budget_ms: Optional[int] = None, *,
                 name: Optional[str] = None) -> None:
        # Fail on a wrong strategy or budget now, not inside an export
        # (None: place()'s default budget policy, docs/strategies.md §4).
        place([], [], [], strategy=strategy, time_budget_ms=time_budget_ms)
        self.strategy = strategy
        self.time_budget_ms = time_budget_ms
        self.__name__ = name or f"emel_{strategy}"
        self.last: Optional[CallStats] = None

    def __repr__(self) -> str:
        return f"EmelAlgorithm(strategy={self.strategy!r}, time_budget_ms={self.time_budget_ms})"

    def __call__(self, alignment: int, specs, graph_module, graph_signature=None,
                 extra_padding: int = 0):
        mp = _executorch().mp
        started = time.perf_counter()
        specs = _canonical_order(specs, graph_module)
        n = len(specs)
        nbytes = [s.realign(_spec_alignment(s, alignment)) for s in specs]   # allocated_memory
        # Spec i lives at offset(root[i]) + inner[i]: its own root unless it sits
        # in another spec's storage (a storage_base chain).
        root, inner = list(range(n)), [0] * n
        position = None
        for i, s in enumerate(specs):
            if s.storage_base is not None:
                if position is None:
                    position = {id(x): k for k, x in enumerate(specs)}
                r = position.get(id(_root_of(s)))
                if r is None:
                    raise PlanError("INVALID_IR_SHAPES",
                                    f"spec {_describe(s)} lives in the storage of a spec that is not planned "
                                    f"(its storage_base chain ends outside the specs given)")
                if s.storage_base_offset < 0:
                    raise PlanError("INVALID_IR_SHAPES",
                                    f"spec {_describe(s)} has a negative storage_base_offset")
                root[i], inner[i] = r, _offset_in_root(s)
                if inner[i] % int(s.alignment):
                    raise PlanError("ALIGNMENT_VIOLATION",
                                    f"spec {_describe(s)} sits {inner[i]} bytes into its storage root, "
                                    f"not a multiple of its alignment {s.alignment}")
        mem_of = [1 if s.mem_id is None else int(s.mem_id) for s in specs]
        arenas: Dict[int, List[int]] = {}       # mem_id -> every spec living there
        for i in range(n):
            arenas.setdefault(mem_of[root[i]], []).append(i)
        reserved = list(getattr(graph_module, "input_mem_buffer_sizes", None) or [])
        sizes = [0] * (max(arenas) + 1 if arenas else 2)
        for m in range(1, min(len(sizes), len(reserved))):
            sizes[m] = int(reserved[m])         # kept even for an arena with no spec of its own
        stats = CallStats(0.0)
        offset = [0] * n
        for m in sorted(arenas):
            arena = self._place_arena(m, arenas[m], specs, nbytes, root, inner,
                                      int(reserved[m]) if m < len(reserved) else 0, int(extra_padding), offset)
            sizes[m] = arena.size
            stats.arenas[m] = arena
        result = mp.MemoryAlgoResult({}, sizes)
        for i, s in enumerate(specs):
            result.spec_dict[s] = mp.SpecAllocResult(mem_id=mem_of[root[i]], mem_obj_id=0,
                                                     mem_offset=offset[root[i]] + inner[i])
        _assign_mem_obj_ids(specs, result.spec_dict, nbytes)
        stats.seconds = time.perf_counter() - started
        self.last = stats
        return result

    def _place_arena(self, mem_id, members, specs, nbytes, root, inner, reserved, padding,
                     offset) -> ArenaStats:
        """Place one arena's roots; ``offset[root]`` gets each root's offset."""
        # A root's row covers its whole chain: the union of the lifetimes, the
        # furthest byte any spec of it reaches and the largest alignment.
        row = {}
        lo, hi, need, align = [], [], [], []
        for i in members:
            s = specs[i]
            first, last = s.lifetime
            if first is None or last is None:
                raise PlanError("INVALID_IR_SHAPES", f"spec {_describe(s)} has no lifetime")
            k = row.get(root[i])
            if k is None:
                k = row[root[i]] = len(lo)
                lo.append(first)
                hi.append(last)
                need.append(0)
                align.append(1)
            lo[k] = min(lo[k], first)
            hi[k] = max(hi[k], last)
            need[k] = max(need[k], inner[i] + nbytes[i])
            align[k] = max(align[k], int(s.alignment))
        roots = list(row)
        upper = [h + 1 for h in hi]                     # inclusive [first, last] -> [first, last + 1)
        a_min, a_max = min(align), max(align)
        kw = dict(strategy=self.strategy, time_budget_ms=self.time_budget_ms)
        p = place(lo, upper, need, alignment=a_min, **kw)
        used = a_min
        if a_max != a_min and any(int(o) % a for o, a in zip(p.offsets, align)):
            p = place(lo, upper, need, alignment=a_max, **kw)   # every offset a multiple of every alignment
            used = a_max
        base = _align_up(reserved, a_max)
        for r, o in zip(roots, p.offsets.tolist()):
            offset[r] = base + o
        return ArenaStats(mem_id=mem_id, specs=len(members), buffers=len(roots), reserved=base,
                          padding=padding, size=base + p.size + padding, placed=p.size,
                          lower_bound=p.lower_bound, optimal=p.optimal, method=p.method, alignment=used)


def _describe(spec) -> str:
    return (f"(shape {list(spec.shape)}, {spec.dtype}, lifetime {spec.lifetime}, "
            f"{spec.allocated_memory} bytes)")


def _spec_alignment(spec, alignment: int) -> int:
    """The pass alignment, or more where the spec was given more by a backend."""
    own = int(getattr(spec, "alignment", alignment) or alignment)
    if own > alignment and own != _SPEC_DEFAULT_ALIGNMENT:
        return own
    return int(alignment)


def _root_of(spec):
    seen = set()
    while spec.storage_base is not None:
        if id(spec) in seen:
            raise PlanError("INVALID_IR_SHAPES", "circular storage_base chain")
        seen.add(id(spec))
        spec = spec.storage_base
    return spec


def _offset_in_root(spec) -> int:
    off = 0
    while spec.storage_base is not None:
        off += int(spec.storage_base_offset)
        spec = spec.storage_base
    return off


def _canonical_order(specs, graph_module) -> list:
    """The specs as given when they come in order (ExecuTorch's ``apply_algo``
    gives them in node order), else in the order their nodes appear.

    A ``set`` iterates in address order, which changes from run to run; the
    graph order does not, so the plan is the same on every export. Specs the
    graph does not hold follow, by lifetime and size.
    """
    if isinstance(specs, (list, tuple)):
        return list(specs)
    specs = list(specs)
    rank: Dict[int, int] = {}
    nodes = getattr(getattr(graph_module, "graph", None), "nodes", None)
    if nodes is not None:
        mp = _executorch().mp
        for node in nodes:
            for s in mp.get_node_tensor_specs(node):
                rank.setdefault(id(s), len(rank))
    unknown = len(rank)

    def key(item):
        i, s = item
        lt = s.lifetime
        return (rank.get(id(s), unknown), lt[0] if lt[0] is not None else -1,
                lt[1] if lt[1] is not None else -1, -s.allocated_memory, i)
    return [s for _, s in sorted(enumerate(specs), key=key)]


def _assign_mem_obj_ids(specs, spec_dict, nbytes) -> None:
    """One ``mem_obj_id`` per run of overlapping byte ranges in each arena.

    ExecuTorch's Verifier asks that any two specs whose bytes overlap share a
    ``mem_obj_id``; ranges are ``[offset, offset + allocated_memory)``.
    """
    by_arena: Dict[int, list] = {}
    for i, s in enumerate(specs):
        r = spec_dict[s]
        by_arena.setdefault(r.mem_id, []).append((r.mem_offset, -nbytes[i], r))
    for arena in by_arena.values():
        arena.sort(key=lambda e: (e[0], e[1]))
        obj, end = -1, -1
        for start, minus_size, r in arena:
            if obj < 0 or start >= end:
                obj += 1
                end = start
            end = max(end, start - minus_size)
            r.mem_obj_id = obj


def suite(*algorithms):
    """A ``MemoryPlanningAlgorithmSuite`` whose members cannot spoil each other.

    ExecuTorch's suite hands every member the same graph module, and its
    ``naive`` extends ``input_mem_buffer_sizes`` in place, so a member after it
    reserves naive's arenas too; members are keyed by ``__name__``, so two of
    one name leave one result. Here each member gets the reserved sizes as
    they were, and a repeated name is refused.
    """
    mp = _executorch().mp
    names = [_name_of(a) for a in algorithms]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"suite members are keyed by name; repeated: {repeated} "
                         f"(give EmelAlgorithm a name=)")

    class _Suite(mp.MemoryPlanningAlgorithmSuite):
        def __call__(self, alignment, specs, graph_module, graph_signature, extra_padding):
            original = getattr(graph_module, "input_mem_buffer_sizes", None)
            keep = None if original is None else list(original)

            def fresh(algo):
                def run(*args):
                    if keep is not None:
                        graph_module.input_mem_buffer_sizes = list(keep)
                    try:
                        return algo(*args)
                    finally:
                        if keep is not None:
                            graph_module.input_mem_buffer_sizes = original
                run.__name__ = _name_of(algo)
                return run

            inner = mp.MemoryPlanningAlgorithmSuite([fresh(a) for a in self.algo_list])
            return inner(alignment, specs, graph_module, graph_signature, extra_padding)

    return _Suite(list(algorithms))


def _name_of(algo) -> str:
    import functools
    if isinstance(algo, functools.partial):
        return algo.func.__name__
    return getattr(algo, "__name__", repr(algo))


def verify(graph_module, graph_signature=None, *, alloc_graph_input=True, alloc_graph_output=True,
           alloc_mutable_buffers=True, allow_lifetime_and_storage_overlap=False, exhaustive=False) -> int:
    """ExecuTorch's ``Verifier.verify_storage_reuse`` on a planned graph module; returns the reuse pairs.

    The same specs, rules, count and errors as ExecuTorch's check, which
    compares every pair of specs (and formats both specs' text for each
    pair: 15 s at 1,800 specs). By default only the pairs that can break a
    rule are looked at (:func:`storage_reuse_pairs`); where one does, or a
    spec is malformed, ExecuTorch's own loop runs and raises its error.
    ``exhaustive=True`` always runs ExecuTorch's loop. ``MemoryPlanningPass``
    runs it only when its algorithm is named ``greedy``; the pass of
    :func:`memory_planning_pass` calls this after every plan.
    """
    mp = _executorch().mp
    v = mp.Verifier(graph_module, alloc_graph_input, alloc_graph_output, alloc_mutable_buffers,
                    graph_signature)
    if exhaustive:
        return v.verify_storage_reuse(allow_lifetime_and_storage_overlap)
    # The specs ExecuTorch's loop collects, with the same arguments.
    specs = list(mp.collect_specs_from_nodes(
        graph_module.graph.nodes, graph_signature, ignore_const=True,
        ignore_graph_input=not alloc_graph_input, ignore_graph_output=not alloc_graph_output,
        ignore_mutable_buffers=not alloc_mutable_buffers, do_assertion=False,
        ignore_out_var_node=False, dedup=True))
    pairs = storage_reuse_pairs(specs, allow_lifetime_and_storage_overlap, mp.Verifier)
    return v.verify_storage_reuse(allow_lifetime_and_storage_overlap) if pairs is None else pairs


def storage_reuse_pairs(specs, allow_lifetime_and_storage_overlap, verifier) -> Optional[int]:
    """``verify_storage_reuse``'s count over ``specs`` without comparing every pair.

    ``None`` where ExecuTorch's loop would raise or might (a rule broken, or a
    spec it would refuse: mem_obj_id set on some specs only, an offset,
    size or lifetime not a non-negative int, or past 2^63 - 1, or a circular
    storage_base): the caller then runs that loop, so the error is ExecuTorch's own. ``verifier`` is ExecuTorch's
    ``Verifier`` class (its lifetime and storage-root rules are used as
    they are). Per ``mem_id``:

    - pairs whose bytes overlap: counted by sorting (``[offset, offset +
      allocated_memory)``, empty when 0 bytes);
    - such a pair with different ``mem_obj_id``: the bytes of each id merged
      into disjoint pieces, then any two pieces overlapping;
    - such a pair also live together (lifetimes inclusive at both ends),
      which is an error unless one spec backs the other's storage (or
      ``allow_lifetime_and_storage_overlap``): found from the specs sorted by
      birth, each compared only with those born before it dies.
    """
    if len(specs) < 2:
        return 0
    with_obj_id = [s.mem_obj_id is not None for s in specs]
    if any(with_obj_id) and not all(with_obj_id):
        return None
    groups: Dict[object, list] = {}
    for s in specs:
        life = s.lifetime
        if not (is_int(s.mem_offset) and s.mem_offset >= 0 and is_int(s.allocated_memory)
                and s.allocated_memory >= 0 and s.mem_offset + s.allocated_memory < 2**63
                and life is not None and len(life) == 2 and is_int(life[0]) and is_int(life[1])
                and -2**63 <= life[0] < 2**63 and -2**63 <= life[1] < 2**63):
            return None                         # (the sums below are int64)
        groups.setdefault(s.mem_id, []).append(s)
    pairs = 0
    for group in groups.values():
        group = [s for s in group if s.allocated_memory > 0]   # 0 bytes overlap nothing
        if len(group) < 2:
            continue
        lo = np.array([s.mem_offset for s in group], dtype=np.int64)
        hi = lo + np.array([s.allocated_memory for s in group], dtype=np.int64)
        # Pairs overlapping in bytes: for each spec in order of offset, those
        # before it that end after its offset (an interval ending at or
        # before it starts strictly before it, so it is sorted before it).
        starts = np.sort(lo)
        pairs += int(np.sum(np.arange(len(group)) - np.searchsorted(np.sort(hi), starts, side="right")))
        if not all(s.mem_obj_id is None for s in group) and _ids_share_bytes(group, lo, hi):
            return None
        if not allow_lifetime_and_storage_overlap and _live_together_overlap(group, lo, hi, verifier):
            return None
    return pairs


def _ids_share_bytes(group, lo, hi) -> bool:
    """Whether specs of two different mem_obj_ids overlap in bytes."""
    pieces = []
    by_id: Dict[object, list] = {}
    for i, s in enumerate(group):
        by_id.setdefault(s.mem_obj_id, []).append(i)
    for members in by_id.values():
        members.sort(key=lambda i: lo[i])
        start, end = lo[members[0]], hi[members[0]]
        for i in members[1:]:
            if lo[i] < end:
                end = max(end, hi[i])
            else:
                pieces.append((start, end))
                start, end = lo[i], hi[i]
        pieces.append((start, end))
    pieces.sort()
    return any(b[0] < a[1] for a, b in zip(pieces, pieces[1:]))


def _live_together_overlap(group, lo, hi, verifier) -> bool:
    """Whether two specs live together overlap in bytes, neither backing the other's
    storage (or a storage_base chain is circular, which ExecuTorch's loop refuses)."""
    birth = np.array([s.lifetime[0] for s in group], dtype=np.int64)
    death = np.array([s.lifetime[1] for s in group], dtype=np.int64)
    live = np.flatnonzero(birth <= death)                    # an empty lifetime meets nothing
    order = live[np.argsort(birth[live], kind="stable")]
    b, d, o_lo, o_hi = birth[order], death[order], lo[order], hi[order]
    ends = np.searchsorted(b, d, side="right")               # born at or before the death of each
    chains: Dict[int, set] = {}                               # each spec's storage root chain, once

    def chain(spec) -> set:
        if id(spec) not in chains:
            chains[id(spec)] = verifier._storage_root_chain(spec)
        return chains[id(spec)]
    try:
        for k in range(len(order)):
            if ends[k] <= k + 1:
                continue
            js = np.arange(k + 1, ends[k])
            hits = js[(o_lo[js] < o_hi[k]) & (o_lo[k] < o_hi[js])]
            for j in hits:
                lhs, rhs = group[order[k]], group[order[j]]
                if lhs not in chain(rhs) and rhs not in chain(lhs):
                    return True
    except _executorch().mp.InternalError:   # a circular chain: ExecuTorch's loop says so
        return True
    return False


_PASS_CLASS = None


def _pass_class():
    global _PASS_CLASS
    if _PASS_CLASS is None:
        mpp = _executorch().mpp

        class EmelMemoryPlanningPass(mpp.MemoryPlanningPass):
            """ExecuTorch's ``MemoryPlanningPass`` that checks every plan by its Verifier's rules (:func:`verify`)."""

            def __init__(self, memory_planning_algo, *, verify: bool = True, **options) -> None:
                super().__init__(memory_planning_algo=memory_planning_algo, **options)
                self.verify = verify
                self.reuse_pairs: List[int] = []   # the Verifier's count, one per method planned

            def run(self, graph_module, graph_signature=None):
                result = super().run(graph_module, graph_signature)
                if self.verify:
                    self.reuse_pairs.append(verify(
                        graph_module, graph_signature, alloc_graph_input=self.alloc_graph_input,
                        alloc_graph_output=self.alloc_graph_output,
                        alloc_mutable_buffers=self.alloc_mutable_buffers and not self.share_mutable_buffers,
                        allow_lifetime_and_storage_overlap=self.allow_lifetime_and_storage_overlap))
                return result

        _PASS_CLASS = EmelMemoryPlanningPass
    return _PASS_CLASS


def memory_planning_pass(strategy: str = "auto", time_budget_ms: Optional[int] = None,
                         keep_default: bool = True, **pass_options):
    """ExecuTorch's ``MemoryPlanningPass`` planning with emel.

    ``strategy`` and ``time_budget_ms`` go to :func:`emel.memory.place`
    (``auto`` by default; the budget is deterministic work, not wall time).
    ``keep_default=True`` also runs ExecuTorch's default ``greedy`` and keeps
    the smaller plan (emel's on a tie), so the program never needs more memory
    than it did. ``pass_options`` are ``MemoryPlanningPass``'s own
    (``alloc_graph_input``, ``alloc_graph_output``, ``alloc_mutable_buffers``,
    ``share_mutable_buffers``, ``alignment``,
    ``allow_lifetime_and_storage_overlap``) plus ``verify=True``: check
    every plan by the rules of ExecuTorch's Verifier (:func:`verify`).
    """
    mp = _executorch().mp
    if "memory_planning_algo" in pass_options:
        raise TypeError("memory_planning_pass() chooses the algorithm; build MemoryPlanningPass "
                        "yourself to pass memory_planning_algo")
    algo = EmelAlgorithm(strategy, time_budget_ms)
    members = [algo, mp.greedy] if keep_default else [algo]
    p = _pass_class()(suite(*members), **pass_options)
    p.emel_algorithm = algo
    return p


# ---------------------------------------------------------------- re-planning a .pte

_ELEMENT_BYTES = {0: 1, 1: 1, 2: 2, 3: 4, 4: 8, 5: 2, 6: 4, 7: 8, 8: 4, 9: 8, 10: 16, 11: 1, 12: 1, 13: 1,
                  14: 4, 15: 2, 22: 2, 23: 1, 24: 1, 25: 1, 26: 1, 27: 2, 28: 4}


@dataclass
class BufferReport:
    """One planned buffer (``mem_id``) of one method: its bytes before and after."""
    method: str
    mem_id: int
    tensors: int
    original: int       # the program's non_const_buffer_sizes[mem_id]
    emel: int           # emel's plan of the same tensors (never above original in the output)
    lower_bound: int
    optimal: bool


class _Timeline:
    """What a method's instruction chain does to its planned tensors.

    Time 0 is before the first instruction (the runtime writes the inputs),
    instruction i runs at time i + 1, and the caller reads the outputs at
    time n + 1. Tensors that share bytes on purpose (views, in-place results,
    storage inside another tensor) are grouped: a group keeps its inner
    layout and moves as one. A group read before anything writes its bytes is
    state that outlives a call (a mutable buffer) and holds its bytes for the
    whole program.
    """

    def __init__(self, plan, mp_schema):
        S = mp_schema
        self.plan = plan
        values = plan.values
        self.planned = {i: v.val for i, v in enumerate(values)
                        if isinstance(v.val, S.Tensor) and v.val.allocation_info is not None}
        if len(plan.chains) != 1:
            raise _refuse(plan, f"it has {len(plan.chains)} instruction chains")
        chain = plan.chains[0].instructions
        self.n = len(chain)
        self.events: list = []      # (time, value, "r" | "w")
        self.links: list = []       # value pairs that share bytes by construction
        for i, v in enumerate(plan.inputs):
            if v in self.planned:
                self.events.append((0, v, "w"))
        # Control flow first: a loop (torch's map) runs operators of its own
        # before its jump, and the jump is why the method cannot be re-planned.
        jumps = [t for t, ins in enumerate(chain) if isinstance(ins.instr_args, S.JumpFalseCall)]
        if jumps:
            raise _refuse(plan, f"instruction {jumps[0]} is a jump (control flow)")
        for t, ins in enumerate(chain, start=1):
            a = ins.instr_args
            if isinstance(a, S.KernelCall):
                self._kernel(t, a, values, S)
            elif isinstance(a, S.MoveCall):
                self._touch(t, a.move_from, "r", values, S)
                self._touch(t, a.move_to, "w", values, S)
            elif isinstance(a, S.FreeCall):
                if a.value_index in self.planned:
                    raise _refuse(plan, f"instruction {t - 1} frees planned value {a.value_index}")
            elif isinstance(a, S.DelegateCall):
                raise _refuse(plan, f"instruction {t - 1} calls a delegate (its use of planned memory "
                                    f"is not visible in the program)")
            elif isinstance(a, S.JumpFalseCall):
                raise _refuse(plan, f"instruction {t - 1} is a jump (control flow)")
            else:
                raise _refuse(plan, f"instruction {t - 1} is a {type(a).__name__}")
        for v in plan.outputs:
            if v in self.planned:
                self.events.append((self.n + 1, v, "r"))

    def _touch(self, t, index, kind, values, S):
        val = values[index].val
        if isinstance(val, (S.TensorList, S.OptionalTensorList)):
            for item in val.items:
                if item >= 0:
                    self._touch(t, item, kind, values, S)
        elif index in self.planned:
            self.events.append((t, index, kind))

    def _kernel(self, t, call, values, S):
        op = self.plan.operators[call.op_index]
        name = f"{op.name}.{op.overload}" if op.overload else op.name
        touched = [a for a in call.args if self._holds_planned(a, values, S)]
        if not touched:
            return
        if op.name == "executorch_prim::et_view":
            self._touch(t, call.args[0], "r", values, S)
            self.links.append((call.args[0], call.args[-1]))
            return
        import torch
        try:
            schema = torch._C._get_schema(op.name, op.overload or "")
        except RuntimeError:
            raise _refuse(self.plan, f"instruction {t - 1} runs {name}, whose schema is unknown here "
                                     f"(which arguments it writes cannot be told)") from None
        args = schema.arguments
        for k, index in enumerate(call.args):
            if k < len(args):
                alias = args[k].alias_info
                if alias is not None and alias.is_write:
                    if not (args[k].kwarg_only or args[k].name.startswith("out")):
                        self._touch(t, index, "r", values, S)      # in place: read, then written
                    self._touch(t, index, "w", values, S)
                else:
                    self._touch(t, index, "r", values, S)
            else:                                                      # a return: the result
                self._touch(t, index, "w", values, S)

    def _holds_planned(self, index, values, S):
        val = values[index].val
        if isinstance(val, (S.TensorList, S.OptionalTensorList)):
            return any(i >= 0 and i in self.planned for i in val.items)
        return index in self.planned

    def groups(self):
        """[(members, first, last, persistent)] with members [(value, original offset, bytes)]."""
        info = {v: (t.allocation_info.memory_id, t.allocation_info.memory_offset, _tensor_bytes(t))
                for v, t in self.planned.items()}
        parent = {v: v for v in info}

        def find(v):
            while parent[v] != v:
                parent[v] = parent[parent[v]]
                v = parent[v]
            return v

        def union(a, b):
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)

        def overlap(a, b):
            (ma, oa, na), (mb, ob, nb) = info[a], info[b]
            return ma == mb and oa < ob + nb and ob < oa + na and na > 0 and nb > 0

        for a, b in self.links:
            if a in info and b in info:
                union(a, b)
        span: Dict[int, list] = {}
        first_kind: Dict[int, str] = {}
        for t, v, kind in sorted(self.events, key=lambda e: (e[0], e[2] != "r")):
            first_kind.setdefault(v, kind)
            span.setdefault(v, [t, t])[1] = t
        by_mem: Dict[int, list] = {}
        for v in span:
            by_mem.setdefault(info[v][0], []).append(v)
        for vs in by_mem.values():        # bytes and times both shared: aliases by construction
            vs.sort(key=lambda v: info[v][1])
            for i, a in enumerate(vs):
                for b in vs[i + 1:]:
                    if info[b][1] >= info[a][1] + info[a][2]:
                        break
                    if overlap(a, b) and span[a][0] <= span[b][1] and span[b][0] <= span[a][1]:
                        union(a, b)
        # A tensor read before it is written reads bytes someone wrote earlier:
        # the last writer of overlapping bytes (a view of it), or nobody (state).
        writes = sorted((t, v) for t, v, kind in self.events if kind == "w")
        state = set()
        for v, kind in first_kind.items():
            if kind != "r" or v in self.plan.inputs:
                continue
            before = [w for t, w in writes if t < span[v][0] and w != v and overlap(v, w)]
            if before:
                union(v, before[-1])
            else:
                state.add(v)
        groups: Dict[int, list] = {}
        for v in span:
            groups.setdefault(find(v), []).append(v)
        for v in info:
            if v not in span:          # planned but never used: holds nothing
                groups.setdefault(find(v), [])
        out = []
        for root, members in groups.items():
            members = members or [root]
            if len({info[m][0] for m in members}) != 1:
                raise _refuse(self.plan, f"values {members} share bytes across memory ids")
            used = [m for m in members if m in span]
            first = min((span[m][0] for m in used), default=0)
            last = max((span[m][1] for m in used), default=-1)
            persistent = any(m in state for m in members)
            out.append(([(m, info[m][1], info[m][2]) for m in members], info[members[0]][0],
                        first, last, persistent))
        return out


def _tensor_bytes(t) -> int:
    n = _ELEMENT_BYTES.get(int(t.scalar_type))
    if n is None:
        raise PlanError("INVALID_IR_SHAPES", f"cannot re-plan: a tensor of scalar type {t.scalar_type}")
    for d in t.sizes:
        n *= int(d)
    return n


def _refuse(plan, why: str) -> PlanError:
    return PlanError("INVALID_IR_SHAPES", f"cannot re-plan method {plan.name!r}: {why}")


def _replan_method(plan, S, strategy, time_budget_ms, alignment):
    """New offsets for one method's planned tensors: ({value: offset}, [BufferReport])."""
    try:
        line = _Timeline(plan, S)
        groups = line.groups()
    except (IndexError, KeyError, TypeError, AttributeError) as e:
        # A loadable but damaged program: an index past its table, a missing field.
        raise _refuse(plan, f"the program is inconsistent ({type(e).__name__}: {str(e)[:120]}); "
                            f"export it again") from None
    end = line.n + 2
    align = alignment
    if align is None:
        # ExecuTorch's default alignment, or less if the program's offsets are
        # not all multiples of it. (Offsets say nothing more: most are multiples
        # of large powers of two because tensor sizes are.)
        offsets = [o for members, *_ in groups for _, o, _ in members if o]
        align = min([o & -o for o in offsets] + [_SPEC_DEFAULT_ALIGNMENT])
    by_mem: Dict[int, list] = {}
    for g in groups:
        by_mem.setdefault(g[1], []).append(g)
    new: Dict[int, int] = {}
    reports = []
    for mem_id in sorted(by_mem):
        rows = by_mem[mem_id]
        lower, upper, size, bases = [], [], [], []
        for members, _, first, last, persistent in rows:
            base = min(o for _, o, _ in members)      # a multiple of align: members keep o - base
            if persistent:
                first, last = 0, end - 1
            lower.append(first)
            upper.append(last + 1 if last >= first else first)
            size.append(max(o + n for _, o, n in members) - base)
            bases.append(base)
        # The groups in their original places must not collide, or the grouping
        # missed an alias: then nothing here can be trusted.
        _check_original(plan, lower, upper, bases, size)
        p = place(lower, upper, size, strategy=strategy, alignment=align, time_budget_ms=time_budget_ms)
        if not 0 <= mem_id < len(plan.non_const_buffer_sizes):
            raise _refuse(plan, f"tensors in buffer {mem_id}, which the program does not size "
                                f"({len(plan.non_const_buffer_sizes)} buffers); export it again")
        original = int(plan.non_const_buffer_sizes[mem_id])
        reports.append(BufferReport(plan.name, mem_id, sum(len(g[0]) for g in rows), original, int(p.size),
                                    int(p.lower_bound), bool(p.optimal)))
        if p.size < original:
            for (members, *_), base, off in zip(rows, bases, p.offsets):
                for v, o, _ in members:
                    new[v] = int(off) + (o - base)
    return new, reports


def _check_original(plan, lower, upper, bases, size):
    order = sorted(range(len(bases)), key=lambda i: bases[i])
    for x, i in enumerate(order):
        for j in order[x + 1:]:
            if bases[j] >= bases[i] + size[i]:
                break
            if size[i] and size[j] and lower[i] < upper[j] and lower[j] < upper[i]:
                raise _refuse(plan, "two tensors share bytes while both in use and no view, in-place "
                                    "or storage link between them was found")


def _replan(pte_bytes: bytes, strategy: str, time_budget_ms, alignment):
    et = _executorch()
    S, save = et.schema, et.save
    data = bytes(pte_bytes)
    # A .pte is a flatbuffer whose file identifier (bytes 4-7) is "ET" and two digits.
    ident = data[4:8]
    if len(data) < 8 or ident[:2] != b"ET" or not ident[2:].isdigit():
        raise PlanError("INVALID_IR_SHAPES", f"not an ExecuTorch program (.pte): {len(data)} bytes whose "
                                             f"bytes 4-7 are {ident!r}, where a .pte has b'ET' and two digits")
    try:
        pte = et.load(data)
    except Exception as e:  # the flatbuffer reader raises struct, Unicode, value errors ... on a damaged file
        raise PlanError("INVALID_IR_SHAPES", f"not a readable ExecuTorch program ({type(e).__name__}: "
                                             f"{str(e)[:200]}); export it again") from None
    program = pte.program
    if len(program.execution_plan) > 1:
        shared = {}
        for plan in program.execution_plan:
            for v in plan.values:
                t = v.val
                if isinstance(t, S.Tensor) and t.allocation_info is not None and t.allocation_info.memory_id > 1:
                    shared.setdefault(plan.name, True)
        if shared:
            raise PlanError("INVALID_IR_SHAPES", "cannot re-plan: several methods with buffers beyond "
                                                 "mem_id 1 (they may share state across methods)")
    budget = time_budget_ms   # None: place()'s default budget policy
    reports = []
    changes = []
    for plan in program.execution_plan:
        new, rep = _replan_method(plan, S, strategy, budget, alignment)
        reports += rep
        changes.append((plan, new, rep))
    return pte, save, changes, reports


def report(pte_bytes: bytes, strategy: str = "auto", time_budget_ms: Optional[int] = None,
           alignment: Optional[int] = None) -> List[BufferReport]:
    """Each planned buffer of a program against emel's plan of the same tensors and the bound.

    Lifetimes come from each method's instruction chain. A program this cannot
    prove safe to re-plan (delegates, control flow, operators of unknown
    schema, tensors sharing bytes with no visible link) is a ``PlanError``
    naming why. ``alignment`` (of every offset) defaults to ExecuTorch's 16,
    or less where the program's offsets are not multiples of 16; pass the
    ``alignment`` the program was exported with when it was more.
    """
    return _replan(pte_bytes, strategy, time_budget_ms, alignment)[3]


def replan(pte_bytes: bytes, strategy: str = "auto", time_budget_ms: Optional[int] = None,
           alignment: Optional[int] = None) -> bytes:
    """The same program with its planned memory placed by emel, as ``.pte`` bytes.

    A buffer emel cannot make smaller keeps its layout; a program with no
    smaller buffer comes back unchanged. Refuses what :func:`report` refuses.
    """
    pte, save, changes, _ = _replan(pte_bytes, strategy, time_budget_ms, alignment)
    if not any(new for _, new, _ in changes):
        return bytes(pte_bytes)
    for plan, new, reps in changes:
        for v, off in new.items():
            info = plan.values[v].val.allocation_info
            info.memory_offset_low = off & 0xFFFFFFFF
            info.memory_offset_high = off >> 32
        for r in reps:
            if r.emel < r.original:
                plan.non_const_buffer_sizes[r.mem_id] = r.emel
    return bytes(save(pte))
