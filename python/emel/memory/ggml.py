"""ggml-alloc parity: llama.cpp's graph allocator, modelled exactly.

The planning pass, the dynamic allocator and the graph allocator's state
(buffers that only grow, shared buffer types, needs_realloc) run in the C++
core (src/emel/memory/ggml/ggml_alloc.cpp, graph_allocator.cpp); this module holds
the ggml-shaped graph model, the converter from `emel.graph/1` (the mapping
of the shared ggml-alloc baselines) and thin wrappers over the core.

GraphAllocator(..., strategy="ggml") is exact parity (the default); any
strategy of `plan()` ("auto", "greedy_by_size", ...) keeps ggml's lifetimes
and in-place decisions but places the tensors with that strategy instead, so
a ggml-style runtime gets a smaller buffer without changing how it calls the
allocator. The same allocators are in the C API (include/emel/memory.h,
docs/c_api.md).
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Sequence

from . import _core
from .errors import PlanError, check_u64, is_int, is_text
from .graph import load_graph
from .planning import STRATEGIES, check_strategy, plan as _plan

SIZE_MAX = 2**64 - 1
MAX_SRC = 10
INPUT, OUTPUT, HAS_DATA = 1, 2, 4

#: ggml_op_can_inplace: the only ops ggml runs in place (llama.cpp as of 2026, which added CLAMP).
INPLACE_OPS = frozenset({
    "FILL", "SCALE", "DIAG_MASK_ZERO", "DIAG_MASK_INF", "ADD", "ADD_ID", "ADD1", "SUB", "MUL",
    "DIV", "SQR", "SQRT", "LOG", "UNARY", "ROPE", "ROPE_BACK", "SILU_BACK", "RMS_NORM",
    "RMS_NORM_BACK", "CLAMP", "SOFT_MAX", "SOFT_MAX_BACK",
})


@dataclass(eq=False)
class BufferType:
    """A backend buffer type: allocations are aligned to `alignment`; one
    buffer (chunk) holds at most `max_size` bytes. The same object passed
    twice to a GraphAllocator means one shared buffer, as in ggml."""
    alignment: int = 32
    max_size: int = SIZE_MAX
    name: str = "CPU"


@dataclass(eq=False)
class Tensor:
    name: str
    nbytes: int
    op: str = "NONE"
    src: list = field(default_factory=list)   # Tensor objects, at most 10
    view_src: "Tensor | None" = None           # the ROOT tensor (ggml flattens views)
    view_offs: int = 0
    flags: int = 0
    layout: Any = None                         # equal layouts may share in place (default: nbytes)
    address: "tuple[int, int, int] | None" = None  # (buffer id, chunk, offset) once allocated

    @property
    def is_view(self) -> bool:
        return self.view_src is not None


@dataclass
class Graph:
    """A ggml cgraph: nodes in execution order, leafs."""
    nodes: list = field(default_factory=list)
    leafs: list = field(default_factory=list)


def build_forward(outputs: Sequence[Tensor], graph: Graph | None = None) -> Graph:
    """ggml_build_forward_expand for each tensor: depth-first over sources in
    slot order; op NONE tensors become leafs, the rest nodes."""
    graph = graph or Graph()
    seen = {id(t) for t in graph.nodes} | {id(t) for t in graph.leafs}
    for root in outputs:
        stack = [(root, 0)]
        while stack:
            t, i = stack.pop()
            if i == 0:
                if id(t) in seen:
                    continue
                seen.add(id(t))
            if i < len(t.src):
                stack.append((t, i + 1))
                if t.src[i] is not None and id(t.src[i]) not in seen:
                    stack.append((t.src[i], 0))
                continue
            (graph.leafs if t.op == "NONE" else graph.nodes).append(t)
    return graph


def from_emel_graph(document: Any) -> tuple[Graph, dict]:
    """The ggml graph of an `emel.graph/1` document, by the mapping the shared
    baselines were measured with (see docs/ggml.md). Returns (graph, tensors by id)."""
    g = load_graph(document)
    doc = g.to_dict()
    planned = _plan(g)  # validates, and gives sizes and view roots
    sizes = dict(zip(planned.tensor_ids, planned.sizes.tolist()))
    offsets = dict(zip(planned.tensor_ids, planned.offsets.tolist()))
    entries = {t["id"]: t for t in doc["tensors"]}
    produced = {o: n for n in doc["nodes"] for o in n["outputs"]}
    read = {i for n in doc["nodes"] for i in n["inputs"]}
    listed = set(doc.get("outputs", []))
    order = doc.get("execution_order") or [n["id"] for n in doc["nodes"]]
    nodes_by_id = {n["id"]: n for n in doc["nodes"]}

    ts: dict[str, Tensor] = {}
    for tid, e in entries.items():
        ts[tid] = Tensor(name=tid, nbytes=sizes[tid])
    for tid, e in entries.items():
        t = ts[tid]
        if "view_of" in e:
            root = planned.tensors[tid].view_of
            t.view_src, t.view_offs = ts[root], offsets[tid] - offsets[root]
            t.op = "VIEW"
            if tid not in produced:
                t.src = [ts[e["view_of"]["base"]]]
        elif e["role"] in ("parameter", "optimizer_state"):
            t.flags |= HAS_DATA
        elif tid not in produced:
            t.flags |= INPUT
    for tid, e in entries.items():
        if e["role"] == "output" or tid in listed or (e["role"] == "gradient" and tid not in read):
            ts[tid].flags |= OUTPUT
            if ts[tid].view_src is not None:
                ts[tid].view_src.flags |= OUTPUT

    helpers = 0

    def helper(srcs):
        nonlocal helpers
        helpers += 1
        h = Tensor(name=f"#helper{helpers}", nbytes=0, op="HELPER")
        h.src = list(srcs)
        return h

    sequence: list[Tensor] = []
    for nid in order:
        node = nodes_by_id[nid]
        inputs = [ts[i] for i in node["inputs"]]
        for out_id in node["outputs"]:
            t = ts[out_id]
            if not t.is_view:
                t.op = "ADD" if entries[out_id].get("can_inplace") else "OP"
            t.src = inputs[:MAX_SRC]
            sequence.append(t)
            rest = inputs[MAX_SRC:]
            while rest:
                sequence.append(helper(rest[:MAX_SRC]))
                rest = rest[MAX_SRC:]
            if out_id not in read and not (t.flags & OUTPUT):
                sequence.append(helper([t]))
        if not node["outputs"]:
            rest = inputs
            while rest:
                sequence.append(helper(rest[:MAX_SRC]))
                rest = rest[MAX_SRC:]
    graph = build_forward(sequence)
    build_forward([t for t in ts.values() if t.flags & OUTPUT], graph)
    build_forward(list(ts.values()), graph)
    return graph, ts


def _check_buffer_type(bt: Any) -> BufferType:
    """A BufferType the core can take: PlanError naming the field otherwise."""
    if not isinstance(bt, BufferType):
        raise PlanError("INVALID_IR_SHAPES", f"expected a BufferType, got {type(bt).__name__}")
    a = bt.alignment
    if not is_int(a) or a < 1 or a & (a - 1) or a > SIZE_MAX:
        raise PlanError("ALIGNMENT_VIOLATION",
                        f"buffer type {bt.name!r}: alignment must be a power of two below 2^64, got {a!r}")
    check_u64(bt.max_size, f"buffer type {bt.name!r}: max_size")
    return bt


def _check_ids(ids: Any, count: int, what: str) -> list:
    """Buffer ids: integers in [0, count); None = all 0."""
    ids = list(ids or [])
    for i, b in enumerate(ids):
        if not is_int(b) or not 0 <= b < count:
            raise PlanError("INVALID_IR_SHAPES", f"{what}[{i}]: buffer id {b!r} out of range "
                                                 f"({count} buffer ids)")
    return ids


class GraphAllocator:
    """ggml_gallocr: reserve a worst-case graph into buffers that only grow.

    A thin wrapper over the core's GraphAllocator (src/emel/memory/ggml/
    graph_allocator.cpp), which holds the buffers and the last plan. Safe to
    share between threads: each call holds the allocator's lock, so calls on
    one allocator run one at a time (different allocators run in parallel)."""

    def __init__(self, buffer_types: Sequence[BufferType] | BufferType, strategy: str = "ggml",
                 time_budget_ms: int = 200):
        if strategy != "ggml" and strategy not in STRATEGIES:
            raise ValueError(f"strategy must be 'ggml' or one of {', '.join(STRATEGIES)}; got {strategy!r}")
        if strategy != "ggml":
            check_strategy(strategy, "best", time_budget_ms)
        self.strategy, self.time_budget_ms = strategy, time_budget_ms
        if isinstance(buffer_types, BufferType):
            buffer_types = [buffer_types]
        self.buffer_types = [_check_buffer_type(bt) for bt in buffer_types]
        if not is_int(time_budget_ms) or time_budget_ms < 0:
            raise PlanError("INVALID_IR_SHAPES", f"time_budget_ms must be an integer >= 0, got {time_budget_ms!r}")
        self._lock = threading.Lock()
        # The same BufferType object twice means one shared buffer, as in ggml.
        self._allocator_of, distinct = [], []
        for bt in self.buffer_types:
            for k, other in enumerate(distinct):
                if other is bt:
                    self._allocator_of.append(k)
                    break
            else:
                self._allocator_of.append(len(distinct))
                distinct.append(bt)
        self._core = _core.GgmlGraphAllocator([(bt.alignment, bt.max_size) for bt in distinct],
                                              self._allocator_of, strategy,
                                              min(time_budget_ms, 2**40) if strategy != "ggml" else 0)
        self.addresses: dict[str, tuple[int, int, int]] = {}
        self.inplace_of: dict[str, str] = {}
        # What alloc_graph bound, with the core's stamp (owner, plan, bytes reserved):
        # honoured while the tensor is still at that address.
        self._stamps: "weakref.WeakKeyDictionary[Tensor, tuple]" = weakref.WeakKeyDictionary()

    @staticmethod
    def _to_core(graph: Graph):
        """The graph as the core's rows (:func:`_core_graph`) with its nodes and leafs."""
        return _core_graph(graph.leafs + graph.nodes, graph.nodes, graph.leafs)

    def _stamp(self, t: Tensor) -> tuple:
        record = self._stamps.get(t)
        return record[1] if record is not None and record[0] == _bound([t])[0] else (0, 0, 0)

    def _planned(self, tensors) -> None:
        """Name the last plan's addresses and in-place partners."""
        self.addresses = {t.name: a for t, a in zip(tensors, self._core.addresses) if a[0] >= 0}
        self.inplace_of = {tensors[i].name: tensors[p].name
                           for i, p in enumerate(self._core.inplace_of) if p >= 0}

    def reserve_n_size(self, graph: Graph, node_buffer_ids=None, leaf_buffer_ids=None) -> list[int]:
        """Bytes each buffer id needs for `graph` (ids sharing a buffer repeat its size);
        allocates nothing, and frees a buffer the plan outgrows, as ggml does."""
        core, tensors = self._to_core(graph)
        nodes, leafs = self._ids(node_buffer_ids, leaf_buffer_ids)
        with self._lock:  # the plan and the names given to it, together
            sizes = self._core.reserve_n_size(core, nodes, leafs, _bound(tensors))
            self._planned(tensors)
        return sizes

    def reserve_n(self, graph: Graph, node_buffer_ids=None, leaf_buffer_ids=None) -> bool:
        core, tensors = self._to_core(graph)
        nodes, leafs = self._ids(node_buffer_ids, leaf_buffer_ids)
        with self._lock:
            ok = self._core.reserve_n(core, nodes, leafs, _bound(tensors))
            self._planned(tensors)
        return ok

    def _ids(self, node_buffer_ids, leaf_buffer_ids) -> tuple[list, list]:
        n = len(self.buffer_types)
        return (_check_ids(node_buffer_ids, n, "node_buffer_ids"),
                _check_ids(leaf_buffer_ids, n, "leaf_buffer_ids"))

    def reserve(self, graph: Graph) -> bool:
        return self.reserve_n(graph)

    def needs_realloc(self, graph: Graph) -> bool:
        """ggml_gallocr_needs_realloc: different node/leaf counts, or a node (or one
        of its sources) without data (neither HAS_DATA nor an address) that was not
        placed or has grown."""
        core, tensors = self._to_core(graph)
        with self._lock:
            return self._core.needs_realloc(core, _bound(tensors))

    def alloc_graph(self, graph: Graph) -> bool:
        """ggml_gallocr_alloc_graph: re-reserve automatically with one buffer (False
        with several when the graph no longer fits), then bind every tensor without an
        address. A tensor with one counts as pre-allocated, as in ggml; PlanError
        (ARENA_TOO_SMALL) naming it, with nothing changed, when this allocator bound it
        and it grew since, or a reserve since (or the one this call needs) replaced the
        plan it was bound under (docs/ggml.md)."""
        core, tensors = self._to_core(graph)
        bound = _bound(tensors)
        with self._lock:
            replanned = self._core.needs_realloc(core, bound)
            ok, addresses, stamps = self._core.alloc_graph(core, bound, [self._stamp(t) for t in tensors])
            if not ok:
                return False
            if replanned:
                self._planned(tensors)
            for t, before, a, stamp in zip(tensors, bound, addresses, stamps):
                a = tuple(a)
                if before[0] >= 0:  # had an address: pre-allocated, so no place of the plan's
                    if not t.is_view and self.addresses.get(t.name, before) != before:
                        del self.addresses[t.name]
                    continue
                if a[0] < 0:
                    continue
                t.address = a
                if stamp[0]:
                    self._stamps[t] = (a, tuple(stamp))
                if not t.is_view:  # where it is bound, also when the graph differs from the plan's
                    self.addresses[t.name] = a
        return True

    def get_buffer_size(self, buffer_id: int) -> int:
        _check_ids([buffer_id], len(self.buffer_types), "buffer_id")
        return self._core.buffer_size(buffer_id)

    def get_chunk_sizes(self, buffer_id: int) -> list[int]:
        """The sizes of the chunks of ``buffer_id``'s buffer, in chunk order: they add
        up to :meth:`get_buffer_size`. Empty before a reserve, and for an id that
        shares an earlier id's buffer (as the C API's ``emel_ggml_gallocr_chunk_size``)."""
        _check_ids([buffer_id], len(self.buffer_types), "buffer_id")
        return self._core.chunk_sizes(buffer_id)


class TensorAllocator:
    """ggml_tallocr: tensors one after another in one buffer, never freed."""

    def __init__(self, buffer_size: int, buffer_type: BufferType | None = None):
        self.buffer_type = _check_buffer_type(buffer_type or BufferType())
        check_u64(buffer_size, "buffer_size")
        self._core = _core.GgmlTensorAllocator(buffer_size, self.buffer_type.alignment)

    def alloc(self, tensor: Tensor) -> int:
        """Place `tensor` (PlanError ARENA_TOO_SMALL when it does not fit); its offset."""
        _check_tensor(tensor)
        offset = self._core.alloc(tensor.nbytes, tensor.name)
        tensor.address = (0, 0, offset)
        return offset

    @property
    def offset(self) -> int:
        return self._core.offset


def alloc_ctx_tensors_size(tensors: Sequence[Tensor], buffer_type: BufferType) -> int:
    """Bytes ggml_backend_alloc_ctx_tensors_from_buft would allocate (nothing is bound)."""
    return sum(_alloc_ctx(tensors, buffer_type)[0])


def alloc_ctx_tensors(tensors: Sequence[Tensor], buffer_type: BufferType) -> list[int]:
    """Weights into buffers of at most buffer_type.max_size bytes, in creation
    order (a tensor larger than that gets a buffer of its own). Sets each
    tensor's address (buffer index, 0, offset) and HAS_DATA, and binds the
    views of bound tensors; returns the sizes."""
    sizes, bound_tensors, bound, flags = _alloc_ctx(tensors, buffer_type)
    for t, a, f in zip(bound_tensors, bound, flags):
        if a[0] >= 0:
            t.address = tuple(a)
        t.flags = f
    return sizes


def _alloc_ctx(tensors, buffer_type):
    """The core's alloc_ctx_tensors (graph_allocator.cpp, the C API's too) on a
    copy of the tensors as rows: ``(buffer sizes, rows' tensors, their
    addresses, their flags)``; the caller decides whether to bind them."""
    _check_buffer_type(buffer_type)
    core, all_tensors = _core_graph(list(tensors), [], [])
    index = {id(t): i for i, t in enumerate(all_tensors)}
    sizes, bound, flags = _core.ggml_alloc_ctx_tensors(
        core, [index[id(t)] for t in tensors], buffer_type.alignment, buffer_type.max_size,
        _bound(all_tensors))
    return sizes, all_tensors, bound, flags


def _bound(tensors) -> list:
    """Each tensor's address for the core: (-1, -1, 0) when it has none."""
    return [(-1, -1, 0) if t.address is None else tuple(t.address) for t in tensors]


def _check_tensor(t: Any) -> None:
    """What the core's row conversion needs of a tensor, as PlanError naming it."""
    if not isinstance(t, Tensor):
        raise PlanError("INVALID_IR_SHAPES", f"expected a ggml Tensor, got {type(t).__name__}")
    if not is_text(t.name):
        raise PlanError("INVALID_IR_SHAPES", f"a tensor's name must be a UTF-8 string, got {t.name!r}")
    a = t.address
    if a is not None and not (isinstance(a, (tuple, list)) and len(a) == 3 and all(is_int(x) for x in a)
                              and -1 <= a[0] < 2**31 and -1 <= a[1] < 2**31 and 0 <= a[2] <= SIZE_MAX):
        raise PlanError("INVALID_IR_SHAPES", f"tensor {t.name!r}: address must be None or (buffer_id, chunk, "
                                             f"offset), got {a!r}", tensor=t.name)
    check_u64(t.nbytes, f"tensor {t.name!r}: nbytes", t.name)
    check_u64(t.view_offs, f"tensor {t.name!r}: view_offs", t.name)
    if not is_int(t.flags) or not 0 <= t.flags <= 255:
        raise PlanError("INVALID_IR_SHAPES", f"tensor {t.name!r}: flags must be an integer in [0, 255], "
                                             f"got {t.flags!r}", tensor=t.name)
    if not is_text(t.op):
        raise PlanError("INVALID_IR_SHAPES", f"tensor {t.name!r}: op must be a string, got {t.op!r}",
                        tensor=t.name)
    if not isinstance(t.src, (list, tuple)) or len(t.src) > MAX_SRC or \
            not all(s is None or isinstance(s, Tensor) for s in t.src):
        raise PlanError("INVALID_IR_SHAPES", f"tensor {t.name!r}: src must be a list of at most {MAX_SRC} "
                                             f"Tensors (or None)", tensor=t.name)
    if t.view_src is not None and not isinstance(t.view_src, Tensor):
        raise PlanError("INVALID_IR_SHAPES", f"tensor {t.name!r}: view_src must be a Tensor or None",
                        tensor=t.name)
    try:
        hash(t.layout)
    except TypeError:
        raise PlanError("INVALID_IR_SHAPES", f"tensor {t.name!r}: layout must be hashable, "
                                             f"got {type(t.layout).__name__}", tensor=t.name) from None


def _core_graph(roots, nodes, leafs):
    """``roots`` and every tensor they reach through ``src`` / ``view_src``, as the
    core's rows (indexed in order of first appearance), in a ``_core.GgmlGraph``
    with ``nodes`` and ``leafs``; returns ``(graph, tensors by row)``."""
    tensors, index = [], {}

    def idx(t):
        if id(t) not in index:
            index[id(t)] = len(tensors)
            tensors.append(t)
        return index[id(t)]

    def reach(t):
        for s in t.src:
            if s is not None:
                idx(s)
        if t.view_src is not None:
            idx(t.view_src)

    for t in roots:
        _check_tensor(t)
        idx(t)
        reach(t)
    k = 0
    while k < len(tensors):  # then what the reached tensors reach (none in a whole graph)
        _check_tensor(tensors[k])  # the roots again: cheap, and covers what they reach
        reach(tensors[k])
        k += 1
    layouts: dict[Any, int] = {}
    rows = []
    for t in tensors:
        key = t.layout if t.layout is not None else ("bytes", t.nbytes)
        rows.append((t.name, t.nbytes, layouts.setdefault(key, len(layouts)),
                     -1 if t.view_src is None else index[id(t.view_src)], t.view_offs, t.flags,
                     t.op == "NONE", t.op in INPLACE_OPS,
                     [-1 if s is None else index[id(s)] for s in t.src]))
    core = _core.GgmlGraph(rows, [index[id(t)] for t in nodes], [index[id(t)] for t in leafs])
    return core, tensors
