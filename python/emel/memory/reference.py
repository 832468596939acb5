"""The pure-Python reference of the memory planner: ``tmmu`` and the offset
strategies ``greedy_by_size`` and ``best_fit``.

Read this file next to ``docs/algorithm.md`` (and ``docs/strategies.md`` for
the offset strategies): every stage below is one function named after its
section, and the comments cite the section they implement::

    check_arena_config (§1, first)
    check_role_arenas  (role_arenas=, right after alignment= and arenas=)
    validate_document  (§1 phases A, B) -> Graph
    compute_sizes      (§1 phase C)
    resolve_views      (§1 phase D)
    check_order        (§1 phase E)
    liveness           (§2)
    arena_classes      (§3)
    assign_slots       (§4)
    build_buffers      (strategies.md §1, offset strategies only)
    place_greedy_by_size / place_best_fit (strategies.md §2 / §3)
    layout             (§5)
    check_plan         (§6, the self-check)
    metrics            (§7)
    ir_hash / attach_hashes (determinism.md: the plan hash and its inputs)

It is the oracle the C++ core is compared with (bit for bit), so it is written
to be obviously correct rather than fast: standard library only, plain lists
indexed by dense tensor / node numbers, Python's exact integers (every u64
quantity is checked against 2^64 - 1 explicitly). It still scales: every
``tmmu`` stage is (near) linear in tensors + nodes + edges, and nothing
recurses, so view chains and node chains of any depth are fine. The offset
strategies trade speed for plainness: ``greedy_by_size`` scans every placed
buffer for each buffer it places (quadratic: seconds at 10^4 buffers) and
``best_fit`` sorts its free-block list at each allocation.

Choices the documents leave open are marked ``CHOICE:`` in the comments.
"""

from bisect import bisect_left, insort
from collections.abc import Mapping
from heapq import heappop, heappush

from . import determinism
from .arena_layout import roles_for_layout
from .cbor import dumps as cbor_dumps
from .errors import PlanError, U64_MAX, is_int, is_text
from .symbolic import resolve as _resolve_symbolic_dims
from .sharding import shard_graph
from . import vocabulary

__all__ = [
    "plan",
    "check_plan",
    "check_arena_config",
    "validate_document",
    "compute_sizes",
    "resolve_views",
    "check_order",
    "liveness",
    "arena_classes",
    "check_role_arenas",
    "assign_slots",
    "build_buffers",
    "place_greedy_by_size",
    "place_best_fit",
    "layout",
    "metrics",
    "analyse",
    "Graph",
    "MODES",
    "STRATEGIES",
    "OFFSET_STRATEGIES",
    "FITS",
    "ELEMENT_SIZES",
]

#: The largest power of two that is a u64 (CHOICE: the largest valid alignment).
MAX_ALIGNMENT = 2**63

# The names are the core's tables (core/tables.hpp, through emel.memory.vocabulary);
# the rules below them are the reference's own.
MODES = vocabulary.MODES
#: The strategies the reference implements: the table's has_reference column
#: (``auto`` and ``optimal`` are C++ only).
STRATEGIES = vocabulary.REFERENCE_STRATEGIES
#: strategies.md: the strategies that place buffers at byte offsets (tmmu colours slots).
OFFSET_STRATEGIES = tuple(s for s in STRATEGIES if s != "tmmu")
#: strategies.md §2: greedy_by_size's gap choice.
FITS = vocabulary.FITS
ROLES = vocabulary.ROLES
PHASES = ("forward", "backward")
#: §2: roles that live for the whole program.
PERSISTENT_ROLES = frozenset(("parameter", "optimizer_state"))
#: §4: roles that are never in-place victims.
NEVER_VICTIM_ROLES = frozenset(("input", "output", "parameter", "optimizer_state"))

#: §1 phase C: element sizes in bytes.
ELEMENT_SIZES = {
    "float64": 8, "int64": 8,
    "float32": 4, "int32": 4,
    "float16": 2, "bfloat16": 2, "int16": 2,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "int8": 1, "uint8": 1, "bool": 1,
}

#: §3 defaults.
DEFAULT_ALIGNMENT = 128
DEFAULT_PAGE_SIZE = 4096
ARENA_CONFIG_KEYS = ("alignment_bytes", "capacity_bytes", "page_size", "persistent")


# ---------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------
def _is_power_of_two(x):
    return 1 <= x <= MAX_ALIGNMENT and x & (x - 1) == 0


def _align_up(x, a):
    """ceil(x / a) * a for a power of two a (exact: Python ints)."""
    return -(-x // a) * a


def _kind(x):
    """How a JSON value is called in messages."""
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "a bool"
    if isinstance(x, int):
        return "an integer"
    if isinstance(x, float):
        return "a number"
    if isinstance(x, str):
        return "a string"
    if isinstance(x, list):
        return "a list"
    if isinstance(x, dict):
        return "an object"
    return type(x).__name__


def _u64(value, what, **where):
    """Conventions: every size/offset is a u64; an exact result above 2^64 - 1
    is ALLOCATION_OVERFLOW, never a wrap-around."""
    if value > U64_MAX:
        raise PlanError(
            "ALLOCATION_OVERFLOW",
            f"{what} is {value}, which does not fit in 64 bits (maximum 2^64 - 1 = {U64_MAX})",
            **where,
        )
    return value


def _check_mode(mode):
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")


def _check_strategy(strategy, fit="best"):
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}; got {strategy!r}")
    if fit not in FITS:
        raise ValueError(f"fit must be {' or '.join(repr(f) for f in FITS)}; got {fit!r}")


def _bad(message, **where):
    return PlanError("INVALID_IR_SHAPES", message, **where)


# ---------------------------------------------------------------------------
# §1 (first): arena configuration
# ---------------------------------------------------------------------------
def check_arena_config(arenas=None, alignment=None):
    """§1 / §3: check the ``arenas=`` and ``alignment=`` arguments of plan().

    Returns ``(config, default_alignment)`` where ``config`` maps each arena
    name to the keys that were given (a ``null`` value counts as absent).

    CHOICE: ``alignment=`` is checked first, like ``alignment_bytes``
    (not an integer: INVALID_IR_SHAPES; not a power of two: ALIGNMENT_VIOLATION).
    CHOICE: arenas are checked in name order; inside one arena the keys in the
    order alignment_bytes, capacity_bytes, page_size, persistent, then unknown
    keys (the first in sorted order is named).
    CHOICE: alignments are powers of two up to 2^63 (the largest in a u64);
    a capacity_bytes / page_size above 2^64 - 1 is ALLOCATION_OVERFLOW.
    """
    if alignment is None:
        default_alignment = DEFAULT_ALIGNMENT
    else:
        if not is_int(alignment):
            raise _bad(f"alignment= must be an integer power of two >= 1, got {_kind(alignment)} {alignment!r}")
        if not _is_power_of_two(alignment):
            raise PlanError("ALIGNMENT_VIOLATION",
                            f"alignment= must be a power of two >= 1, got {alignment}")
        default_alignment = alignment

    config = {}
    if arenas is None:
        return config, default_alignment
    if not isinstance(arenas, Mapping):   # any mapping, as the API takes
        raise _bad(f"arenas= must map arena names to settings, got {_kind(arenas)}")
    for name in arenas:
        if not is_text(name) or not name:
            raise _bad(f"arenas= keys must be non-empty arena names, got {name!r}")
    for name in sorted(arenas):
        settings = arenas[name]
        if settings is None:               # CHOICE: like an empty object; null values count as absent
            settings = {}
        if not isinstance(settings, Mapping):
            raise _bad(f"arenas[{name!r}] must be an object of settings, got {_kind(settings)}", arena=name)
        given = {}
        value = settings.get("alignment_bytes")
        if value is not None:
            if not is_int(value):
                raise _bad(f"arenas[{name!r}].alignment_bytes must be an integer power of two >= 1, "
                           f"got {_kind(value)} {value!r}", arena=name)
            if not _is_power_of_two(value):
                raise PlanError("ALIGNMENT_VIOLATION",
                                f"arenas[{name!r}].alignment_bytes must be a power of two >= 1, got {value}",
                                arena=name)
            given["alignment_bytes"] = value
        for key in ("capacity_bytes", "page_size"):
            value = settings.get(key)
            if value is None:
                continue
            if not is_int(value) or value < 0:
                raise _bad(f"arenas[{name!r}].{key} must be an integer >= 0, got {_kind(value)} {value!r}",
                           arena=name)
            _u64(value, f"arenas[{name!r}].{key}", arena=name)
            given[key] = value
        value = settings.get("persistent")
        if value is not None:
            if not isinstance(value, bool):
                raise _bad(f"arenas[{name!r}].persistent must be true or false, got {_kind(value)} {value!r}",
                           arena=name)
            given["persistent"] = value
        unknown = sorted(str(k) for k in settings if k not in ARENA_CONFIG_KEYS)
        if unknown:
            raise _bad(f"arenas[{name!r}] has an unknown setting {unknown[0]!r}; expected only "
                       f"{', '.join(ARENA_CONFIG_KEYS)}", arena=name)
        config[name] = given
    return config, default_alignment


def check_role_arenas(role_arenas=None):
    """Check the ``role_arenas=`` argument of plan(): ``{role: arena name}``,
    overriding a role's default arena (§3); a tensor's own ``arena`` field
    still wins. Returns ``{role: arena name}``. Checked after ``alignment=``
    and ``arenas=``, like ``planning.check_role_arenas``: roles in the order
    of ``str(role)``; an unknown role or a name that is not a non-empty string
    is INVALID_IR_SHAPES (the arena named when the name is a string)."""
    if role_arenas is None:
        return {}
    if not isinstance(role_arenas, Mapping):
        raise _bad(f"role_arenas= must map roles to arena names, got {_kind(role_arenas)}")
    result = {}
    for role in sorted(role_arenas, key=str):
        name = role_arenas[role]
        if role not in ROLES:
            raise _bad(f"role_arenas=: unknown role {role!r} (expected one of {', '.join(ROLES)})")
        if not is_text(name) or not name:
            raise _bad(f"role_arenas[{role!r}] must be a non-empty arena name, got {_kind(name)} {name!r}",
                       arena=name if isinstance(name, str) else None)
        result[role] = name
    return result


# ---------------------------------------------------------------------------
# §1 phases A and B: document shape and identity
# ---------------------------------------------------------------------------
class Graph:
    """The validated document as dense lists (tensor k = ``tensors[k]``,
    node k = ``nodes[k]``). Built by :func:`validate_document`; the later
    stages add nothing to it."""

    def __init__(self):
        self.name = ""
        # tensors, in document order
        self.ids = []            # str
        self.index = {}          # id -> k
        self.shape = []          # list of int
        self.dtype = []          # str
        self.role = []           # str
        self.nbytes = []         # int or None
        self.arena = []          # str or None (the tensor's own `arena` field)
        self.alignment = []      # int or None
        self.saved = []          # bool (saved_for_backward)
        self.can_inplace = []    # bool
        self.base = []           # tensor k of view_of.base, or None for storage tensors
        self.is_view = []        # bool: base is not None
        self.byte_offset = []    # int (0 for storage tensors)
        self.must_not_alias = [] # list of tensor k
        # nodes, in document order
        self.node_ids = []
        self.inputs = []         # list of tensor k
        self.outputs = []        # list of tensor k
        # execution: node k run at each step, and the producer of each tensor
        self.order = []          # step -> node k
        self.producer = []       # tensor k -> node k or None
        self.graph_outputs = []  # tensor k of the top-level `outputs`
        self.order_given = False # whether `execution_order` was present

    @property
    def n_tensors(self):
        return len(self.ids)

    @property
    def n_steps(self):
        return len(self.order)



def _check_uint(value, what, **where):
    """Phase A: an integer >= 0 (INVALID_IR_SHAPES) that fits in a u64
    (ALLOCATION_OVERFLOW). ``what`` is a string, or a function making it (so
    that the message is only formatted when there is an error)."""
    if is_int(value) and 0 <= value <= U64_MAX:
        return value
    if callable(what):
        what = what()
    if not is_int(value):
        raise _bad(f"{what} must be an integer >= 0, got {_kind(value)} {value!r}", **where)
    if value < 0:
        raise _bad(f"{what} must be an integer >= 0, got {value}", **where)
    _u64(value, what, **where)
    return value


def _check_string_list(value, what, **where):
    if not isinstance(value, list):
        raise _bad(f"{what} must be a list of tensor ids, got {_kind(value)}", **where)
    for j, item in enumerate(value):
        if not is_text(item):
            raise _bad(f"{what}[{j}] must be a string, got {_kind(item)} {item!r}", **where)
    return value


def _check_tensor_shape(k, t):
    """Phase A, one tensor. Fields are checked in the order algorithm.md lists
    them (CHOICE): id, shape, dtype, role, nbytes, arena, alignment,
    saved_for_backward, can_inplace, view_of, must_not_alias."""
    where = f"tensors[{k}]"
    if not isinstance(t, dict):
        raise _bad(f"{where} must be an object, got {_kind(t)}")
    tid = t.get("id")
    if not is_text(tid) or not tid:
        raise _bad(f"{where}.id must be a non-empty string, got {_kind(tid)} {tid!r}")
    where = f"tensor {tid!r}"
    name = {"tensor": tid}

    shape = t.get("shape")
    if not isinstance(shape, list):
        raise _bad(f"{where}: shape must be a list of integers >= 0, got {_kind(shape)}", **name)
    for j, dim in enumerate(shape):
        _check_uint(dim, lambda: f"{where}: shape[{j}]", **name)

    dtype = t.get("dtype")
    if not is_text(dtype) or not dtype:
        raise _bad(f"{where}: dtype must be a non-empty string, got {_kind(dtype)} {dtype!r}", **name)

    role = t.get("role")
    if role not in ROLES:
        raise _bad(f"{where}: role must be one of {', '.join(ROLES)}; got {role!r}", **name)

    nbytes = t.get("nbytes")
    if nbytes is not None:
        _check_uint(nbytes, f"{where}: nbytes", **name)

    arena = t.get("arena")
    if arena is not None and (not is_text(arena) or not arena):
        raise _bad(f"{where}: arena must be a non-empty string, got {_kind(arena)} {arena!r}", **name)

    alignment = t.get("alignment")
    if alignment is not None:
        if not is_int(alignment):
            raise _bad(f"{where}: alignment must be an integer power of two, got {_kind(alignment)} "
                       f"{alignment!r}", **name)
        if not _is_power_of_two(alignment):
            raise PlanError("ALIGNMENT_VIOLATION",
                            f"{where}: alignment must be a power of two >= 1, got {alignment}", **name)

    for flag in ("saved_for_backward", "can_inplace"):
        value = t.get(flag)
        if value is not None and not isinstance(value, bool):
            raise _bad(f"{where}: {flag} must be true or false, got {_kind(value)} {value!r}", **name)

    view_of = t.get("view_of")
    if view_of is not None:
        if not isinstance(view_of, dict):
            raise _bad(f"{where}: view_of must be an object {{base, byte_offset}}, got {_kind(view_of)}",
                       **name)
        base = view_of.get("base")
        if not is_text(base):
            raise _bad(f"{where}: view_of.base must be a tensor id (a string), got {_kind(base)} {base!r}",
                       **name)
        byte_offset = view_of.get("byte_offset")
        if byte_offset is not None:
            _check_uint(byte_offset, f"{where}: view_of.byte_offset", **name)

    must_not_alias = t.get("must_not_alias")
    if must_not_alias is not None:
        _check_string_list(must_not_alias, f"{where}: must_not_alias", **name)


def _check_node_shape(k, n):
    """Phase A, one node: id, op, inputs, outputs, phase."""
    where = f"nodes[{k}]"
    if not isinstance(n, dict):
        raise _bad(f"{where} must be an object, got {_kind(n)}")
    nid = n.get("id")
    if not is_text(nid) or not nid:
        raise _bad(f"{where}.id must be a non-empty string, got {_kind(nid)} {nid!r}")
    where = f"node {nid!r}"
    op = n.get("op")
    if not is_text(op):
        raise _bad(f"{where}: op must be a string, got {_kind(op)} {op!r}", node=nid)
    for key in ("inputs", "outputs"):
        value = n.get(key)
        if value is not None:
            _check_string_list(value, f"{where}: {key}", node=nid)
    phase = n.get("phase")
    if phase is not None and phase not in PHASES:
        raise _bad(f"{where}: phase must be forward or backward, got {phase!r}", node=nid)


def _check_document_shape(document):
    """Phase A. Optional fields are read with ``.get``, so a ``null`` value
    counts as absent. CHOICE: the top level first (object, format, tensors, nodes,
    name, source), then every tensor, then every node, then execution_order
    and outputs (the order of the bullets in algorithm.md)."""
    if not isinstance(document, dict):
        raise _bad(f"a graph document must be a JSON object, got {_kind(document)}")
    fmt = document.get("format")
    if fmt != "emel.graph/1":
        raise _bad(f"expected format 'emel.graph/1', got {fmt!r}")
    for key in ("tensors", "nodes"):
        if not isinstance(document.get(key), list):
            raise _bad(f"the document's {key!r} must be a list, got {_kind(document.get(key))}")
    for key in ("name", "source"):
        value = document.get(key)
        if value is not None and not is_text(value):
            raise _bad(f"the document's {key!r} must be a string, got {_kind(value)}")
    for k, t in enumerate(document["tensors"]):
        _check_tensor_shape(k, t)
    for k, n in enumerate(document["nodes"]):
        _check_node_shape(k, n)
    for key in ("execution_order", "outputs"):
        value = document.get(key)
        if value is not None:
            _check_string_list(value, f"the document's {key!r}")


def validate_document(document):
    """§1 phases A (document shape) and B (identity). Returns a :class:`Graph`.

    The document is only read, never modified. Symbolic dimensions
    (``{"sym", "max"}``) are read at their envelope's maximum."""
    document = _resolve_symbolic_dims(document)
    _check_document_shape(document)
    g = Graph()
    g.name = document.get("name") or ""
    tensors = document["tensors"]
    nodes = document["nodes"]

    # B1. tensor ids are unique; the second occurrence is named.
    for k, t in enumerate(tensors):
        tid = t["id"]
        if tid in g.index:
            raise _bad(f"tensor id {tid!r} is used twice: by tensors[{g.index[tid]}] and tensors[{k}]",
                       tensor=tid)
        g.index[tid] = k
        g.ids.append(tid)
        g.shape.append(list(t["shape"]))
        g.dtype.append(t["dtype"])
        g.role.append(t["role"])
        g.nbytes.append(t.get("nbytes"))
        g.arena.append(t.get("arena"))
        g.alignment.append(t.get("alignment"))
        g.saved.append(bool(t.get("saved_for_backward")))
        g.can_inplace.append(bool(t.get("can_inplace")))

    # B2. node ids are unique.
    node_index = {}
    for k, n in enumerate(nodes):
        nid = n["id"]
        if nid in node_index:
            raise _bad(f"node id {nid!r} is used twice: by nodes[{node_index[nid]}] and nodes[{k}]", node=nid)
        node_index[nid] = k
        g.node_ids.append(nid)

    # B3. per tensor: view_of.base and must_not_alias name known tensors; no self-base.
    for k, t in enumerate(tensors):
        tid = t["id"]
        view_of = t.get("view_of")
        if view_of is None:
            g.base.append(None)
            g.byte_offset.append(0)
        else:
            base = view_of["base"]
            if base == tid:
                raise _bad(f"tensor {tid!r} is a view of itself (view_of.base is its own id)", tensor=tid)
            if base not in g.index:
                raise _bad(f"tensor {tid!r}: view_of.base {base!r} is not a tensor of the graph", tensor=tid)
            g.base.append(g.index[base])
            g.byte_offset.append(view_of.get("byte_offset") or 0)
        g.is_view.append(view_of is not None)
        partners = []
        for other in t.get("must_not_alias") or ():
            if other not in g.index:
                raise _bad(f"tensor {tid!r}: must_not_alias names {other!r}, which is not a tensor of the graph",
                           tensor=tid)
            partners.append(g.index[other])
        g.must_not_alias.append(partners)

    # B4. per node: inputs and outputs are known tensors.
    # CHOICE: the error names the node (.node) and the unknown id (.tensor).
    for n in nodes:
        nid = n["id"]
        lists = []
        for key in ("inputs", "outputs"):
            ks = []
            for tid in n.get(key) or ():
                if tid not in g.index:
                    raise _bad(f"node {nid!r}: {key} names {tid!r}, which is not a tensor of the graph",
                               node=nid, tensor=tid)
                ks.append(g.index[tid])
            lists.append(ks)
        g.inputs.append(lists[0])
        g.outputs.append(lists[1])

    # B5. no tensor is produced twice (by two nodes, or twice by one node).
    g.producer = [None] * len(tensors)
    for k, n in enumerate(nodes):
        for t in g.outputs[k]:
            if g.producer[t] is not None:
                first = g.node_ids[g.producer[t]]
                raise _bad(f"tensor {g.ids[t]!r} is produced twice: by node {first!r} and again by node "
                           f"{n['id']!r}", tensor=g.ids[t], node=n["id"])
            g.producer[t] = k

    # B6. execution_order: known nodes, no repeats, every node present.
    order = document.get("execution_order")
    if order is None:
        g.order = list(range(len(nodes)))
    else:
        g.order_given = True
        seen = set()
        for nid in order:
            if nid not in node_index:     # CHOICE: the unknown id is named in .node
                raise _bad(f"execution_order names {nid!r}, which is not a node of the graph", node=nid)
            if nid in seen:
                raise _bad(f"execution_order lists node {nid!r} twice", node=nid)
            seen.add(nid)
            g.order.append(node_index[nid])
        for nid in g.node_ids:
            if nid not in seen:
                raise _bad(f"execution_order does not list node {nid!r}; every node must appear once", node=nid)

    # B7. top-level outputs are known tensors.
    for tid in document.get("outputs") or ():
        if tid not in g.index:
            raise _bad(f"outputs names {tid!r}, which is not a tensor of the graph", tensor=tid)
        g.graph_outputs.append(g.index[tid])
    return g


# ---------------------------------------------------------------------------
# §1 phase C: sizes
# ---------------------------------------------------------------------------
def compute_sizes(g):
    """§1 phase C: the byte size of every tensor, in document order.

    CHOICE: shape_bytes is computed (and must fit in a u64) whenever the dtype
    has an element size, even when nbytes is given and shape_bytes is not
    used (a view with its own span)."""
    sizes = []
    for t in range(g.n_tensors):
        tid = g.ids[t]
        element = ELEMENT_SIZES.get(g.dtype[t])
        nbytes = g.nbytes[t]
        if element is None and nbytes is None:
            raise _bad(f"tensor {tid!r}: dtype {g.dtype[t]!r} has no fixed element size, so nbytes is "
                       f"required (known dtypes: {', '.join(ELEMENT_SIZES)})", tensor=tid)
        shape_bytes = None
        if element is not None:
            shape_bytes = element
            for dim in g.shape[t]:
                shape_bytes *= dim          # exact; 0 as soon as a dimension is 0
            _u64(shape_bytes, f"tensor {tid!r}: the size of shape {g.shape[t]} x {element} bytes "
                              f"({g.dtype[t]})", tensor=tid)
        if g.is_view[t]:
            # A view's nbytes is the span it covers; it may differ from shape_bytes.
            size = nbytes if nbytes is not None else shape_bytes
        else:
            if nbytes is not None and shape_bytes is not None and nbytes != shape_bytes:
                raise _bad(f"tensor {tid!r}: nbytes is {nbytes} but shape {g.shape[t]} of {g.dtype[t]} "
                           f"is {shape_bytes} bytes; they must agree", tensor=tid)
            size = nbytes if nbytes is not None else shape_bytes
        sizes.append(size)
    return sizes


# ---------------------------------------------------------------------------
# §1 phase D: views
# ---------------------------------------------------------------------------
def _walk_up(g, t, known):
    """The views from ``t`` up its view_of chain to the first tensor whose value
    is already in ``known`` (a list indexed by tensor, None = unknown).
    Returns (path, first_known). No recursion."""
    path = []
    while known[t] is None:
        path.append(t)
        t = g.base[t]
    return path, t


def resolve_views(g, sizes):
    """§1 phase D. Returns ``(root, root_offset)`` lists: the storage tensor
    every tensor lives in (a storage tensor is its own root) and its offset in
    that root (the sum of the byte offsets along the chain).

    CHOICE: phase D runs as three passes, so that each check only uses facts
    the earlier passes established: (1) per view in document order, its chain
    reaches a storage tensor and it lies inside its direct base; (2) per view,
    its root offset is a multiple of its own alignment (after (1) every root
    offset fits in a u64, by induction); (3) per tensor in document order, per
    must_not_alias entry in order, the pair can be honoured."""
    n = g.n_tensors
    root = [t if not g.is_view[t] else None for t in range(n)]

    # (1) roots (iteratively, each tensor walked once) and bounds.
    for v in range(n):
        if not g.is_view[v]:
            continue
        if root[v] is None:
            path, on_path, t = [], set(), v
            while root[t] is None:
                if t in on_path:
                    cycle = " -> ".join(repr(g.ids[x]) for x in path[path.index(t):] + [t])
                    raise _bad(f"view {g.ids[v]!r} never reaches a storage tensor: its view_of chain loops "
                               f"({cycle})", tensor=g.ids[v])
                on_path.add(t)
                path.append(t)
                t = g.base[t]
            for x in path:
                root[x] = root[t]
        base = g.base[v]
        end = g.byte_offset[v] + sizes[v]
        _u64(end, f"view {g.ids[v]!r}: byte_offset {g.byte_offset[v]} + size {sizes[v]}", tensor=g.ids[v])
        if end > sizes[base]:
            raise _bad(f"view {g.ids[v]!r} covers bytes [{g.byte_offset[v]}, {end}) of its base "
                       f"{g.ids[base]!r}, which has only {sizes[base]} bytes", tensor=g.ids[v])

    # (2) root offsets and view alignments.
    root_offset = [0 if not g.is_view[t] else None for t in range(n)]
    for v in range(n):
        if not g.is_view[v]:
            continue
        if root_offset[v] is None:
            path, t = _walk_up(g, v, root_offset)
            for x in reversed(path):          # from the root side down to v
                root_offset[x] = root_offset[g.base[x]] + g.byte_offset[x]
        a = g.alignment[v]
        if a is not None and root_offset[v] % a != 0:
            raise PlanError("ALIGNMENT_VIOLATION",
                            f"view {g.ids[v]!r} needs alignment {a}, but it starts at byte {root_offset[v]} of "
                            f"its root {g.ids[root[v]]!r}, which is not a multiple of {a}", tensor=g.ids[v])

    # (3) must_not_alias pairs that share a root and intersect can never be honoured.
    for t in range(n):
        for p in g.must_not_alias[t]:
            if root[t] == root[p] and _ranges_intersect(root_offset[t], sizes[t], root_offset[p], sizes[p]):
                raise _bad(f"tensor {g.ids[t]!r} must not alias {g.ids[p]!r}, but both lie in "
                           f"{g.ids[root[t]]!r} at bytes [{root_offset[t]}, {root_offset[t] + sizes[t]}) and "
                           f"[{root_offset[p]}, {root_offset[p] + sizes[p]})", tensor=g.ids[t])
    return root, root_offset


def _ranges_intersect(a, a_size, b, b_size):
    """[a, a + a_size) and [b, b + b_size) share a byte (empty ranges never do)."""
    return a_size > 0 and b_size > 0 and a < b + b_size and b < a + a_size


# ---------------------------------------------------------------------------
# §1 phase E: execution order
# ---------------------------------------------------------------------------
def _views_base_first(g):
    """The views, each after its base when that base is a view too, so a value
    defined along view chains fills in with one loop (no recursion). Needs
    acyclic chains (phase D)."""
    done = [not v for v in g.is_view]
    order = []
    for v in range(g.n_tensors):
        if done[v]:
            continue
        path, t = [], v
        while not done[t]:
            path.append(t)
            t = g.base[t]
        for x in reversed(path):
            done[x] = True
            order.append(x)
    return order


def check_order(g):
    """§1 phase E. Returns ``prod``: the step of each tensor's producer, or None.

    ``anc(v)`` (the largest prod among a view's strict ancestors) is computed
    once per view, bases first."""
    step_of = [None] * len(g.node_ids)
    for s, k in enumerate(g.order):
        step_of[k] = s
    prod = [None if g.producer[t] is None else step_of[g.producer[t]] for t in range(g.n_tensors)]

    # anc(v) = max(prod(base), anc(base)); None = no produced ancestor.
    anc = [None] * g.n_tensors
    for x in _views_base_first(g):
        b = g.base[x]
        anc[x] = _max_or_none(prod[b], anc[b])

    for s, k in enumerate(g.order):
        for t in g.inputs[k]:
            if prod[t] is not None and prod[t] >= s:
                raise _order_error(g, k, s, t, t, prod[t], "reads")
            if g.is_view[t] and anc[t] is not None and anc[t] >= s:
                a = _ancestor_produced_at(g, t, prod, anc[t])
                raise _order_error(g, k, s, t, a, anc[t], "reads")
        for v in g.outputs[k]:
            if g.is_view[v] and anc[v] is not None and anc[v] > s:
                a = _ancestor_produced_at(g, v, prod, anc[v])
                raise _order_error(g, k, s, v, a, anc[v], "outputs")
    return prod


def _max_or_none(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def _ancestor_produced_at(g, v, prod, step):
    """The strict ancestor of view v produced at ``step`` (for messages only)."""
    t = g.base[v]
    while prod[t] != step:
        t = g.base[t]
    return t


def _order_error(g, k, s, t, culprit, culprit_step, verb):
    nid = g.node_ids[k]
    producer = g.node_ids[g.order[culprit_step]]
    order_name = "execution_order" if g.order_given else "the order of `nodes`"
    if culprit == t:
        what = f"node {nid!r} (step {s}) {verb} tensor {g.ids[t]!r}, which node {producer!r} produces at step " \
               f"{culprit_step}"
    else:
        what = f"node {nid!r} (step {s}) {verb} view {g.ids[t]!r}, whose base {g.ids[culprit]!r} node " \
               f"{producer!r} produces at step {culprit_step}"
    if _dataflow_has_cycle(g):
        why = "the dataflow itself has a cycle, so no execution order can work"
    else:
        why = f"the dataflow has no cycle: only {order_name} is wrong (it must be a topological order)"
    return PlanError("LIVENESS_CYCLE", f"{what}; {why}", node=nid, tensor=g.ids[t])


def _dataflow_has_cycle(g):
    """Whether *no* execution order satisfies phase E (Kahn's algorithm; run
    only when phase E fails).

    Phase E's constraints reduce to edges between nodes. With near(v) the
    nearest produced strict ancestor of view v:
      - input t of Y: producer(t) before Y, producer(near(t)) before Y;
      - view output v of Y: producer(near(v)) at or before Y (no edge when it is Y).
    The other ancestors follow by transitivity, because a produced view is an
    output of its producer, whose own constraint covers the ancestors above it.
    A self-edge (a node reading what it produces) is a cycle."""
    n_nodes = len(g.node_ids)
    near = [None] * g.n_tensors
    for x in _views_base_first(g):
        b = g.base[x]
        near[x] = b if g.producer[b] is not None else near[b]

    successors = [[] for _ in range(n_nodes)]
    indegree = [0] * n_nodes

    def edge(x, y):
        successors[x].append(y)
        indegree[y] += 1

    for y in range(n_nodes):
        for t in g.inputs[y]:
            if g.producer[t] is not None:
                edge(g.producer[t], y)
            if g.is_view[t] and near[t] is not None:
                edge(g.producer[near[t]], y)
        for v in g.outputs[y]:
            if g.is_view[v] and near[v] is not None and g.producer[near[v]] != y:
                edge(g.producer[near[v]], y)

    ready = [y for y in range(n_nodes) if indegree[y] == 0]
    done = 0
    while ready:
        x = ready.pop()
        done += 1
        for y in successors[x]:
            indegree[y] -= 1
            if indegree[y] == 0:
                ready.append(y)
    return done < n_nodes


# ---------------------------------------------------------------------------
# §1 + §2: the analysis every later stage shares
# ---------------------------------------------------------------------------
class Analysis:
    """What validation (§1) and liveness (§2) established about a graph."""

    def __init__(self, g, mode, sizes, root, root_offset, prod, live):
        self.graph = g
        self.mode = mode
        self.sizes = sizes
        self.root = root
        self.root_offset = root_offset
        self.prod = prod
        self.birth = live["birth"]
        self.death = live["death"]
        self.is_output = live["is_output"]
        self.is_saved = live["is_saved"]
        self.last = live["last"]
        # §3: the largest alignment among the views rooted at each storage tensor
        # (1 when none has one) -- part of a(t), and needed by the self-check too.
        self.view_alignment = [1] * g.n_tensors
        for t in range(g.n_tensors):
            if g.is_view[t] and g.alignment[t] is not None:
                r = root[t]
                self.view_alignment[r] = max(self.view_alignment[r], g.alignment[t])
        self.storage = [t for t in range(g.n_tensors) if not g.is_view[t]]


def analyse(document, mode="inference"):
    """§1 (phases A-E) and §2 on a document: everything that does not depend
    on the arena configuration."""
    _check_mode(mode)
    g = validate_document(document)
    sizes = compute_sizes(g)
    root, root_offset = resolve_views(g, sizes)
    prod = check_order(g)
    live = liveness(g, mode, root, prod)
    return Analysis(g, mode, sizes, root, root_offset, prod, live)


# ---------------------------------------------------------------------------
# §2: liveness
# ---------------------------------------------------------------------------
def liveness(g, mode, root, prod):
    """§2 (AnalyzeLiveness_v1): birth and death of every storage tensor (None
    for views), after the mode is applied, plus the `is_output` and `is_saved`
    flags of storage tensors. One pass over the nodes' inputs and outputs.

    Note: a node's `phase` is validated but not used: in backward mode the
    last touch already is the last backward consumer."""
    n = g.n_tensors
    last = max(g.n_steps - 1, 0)
    last_touch = [None] * n
    for s, k in enumerate(g.order):
        for t in g.inputs[k]:
            last_touch[root[t]] = s
        for t in g.outputs[k]:
            last_touch[root[t]] = s

    # Outputs: role `output`, listed in `outputs`, or the root of such a view.
    is_output = [False] * n
    for t in range(n):
        if g.role[t] == "output":
            is_output[root[t]] = True
    for t in g.graph_outputs:
        is_output[root[t]] = True
    # Saved: it, or a view rooted at it, has saved_for_backward.
    is_saved = [False] * n
    for t in range(n):
        if g.saved[t]:
            is_saved[root[t]] = True

    birth = [None] * n
    death = [None] * n
    for t in range(n):
        if g.is_view[t]:
            continue                        # a view has no lifetime of its own
        b = prod[t] if prod[t] is not None else 0
        d = b if last_touch[t] is None else max(b, last_touch[t])
        if g.role[t] in PERSISTENT_ROLES:
            b, d = 0, last
        if is_output[t]:
            d = last
        if mode == "forward" and is_saved[t]:
            d = last
        birth[t], death[t] = b, d
    return {"birth": birth, "death": death, "is_output": is_output, "is_saved": is_saved, "last": last}


# ---------------------------------------------------------------------------
# §3: arena classes
# ---------------------------------------------------------------------------
class Arena:
    """One arena's settings (§3) and, once assigned, its slots (§4) and layout (§5)."""

    def __init__(self, name, alignment, capacity_bytes, page_size, persistent):
        self.name = name
        self.alignment = alignment
        self.capacity_bytes = capacity_bytes
        self.page_size = page_size
        self.persistent = persistent
        self.tensors = []        # its storage tensors, in document order
        self.slots = []          # list of Slot (§4)
        self.size = 0            # bytes (§5)
        # strategies.md: the heuristic that placed it at byte offsets, or None
        # when it has slots (tmmu, and persistent arenas under every strategy)
        self.method = None


class Slot:
    """§4: a logical slot: the tensors it held, in placement order."""

    def __init__(self):
        self.holders = []
        self.size = 0            # the largest aligned size of its holders
        self.alignment = 1       # the largest a(t) of its holders
        self.offset = 0          # §5


#: §3: the arena of each role, unless ``role_arenas=`` or the tensor's own
#: ``arena`` field says otherwise.
DEFAULT_ROLE_ARENAS = {
    "parameter": "parameters", "optimizer_state": "parameters",
    "gradient": "gradients",
    "input": "activations", "activation": "activations", "output": "activations",
}


def arena_classes(a, config, default_alignment, role_arenas=None):
    """§3. Returns ``(arenas, arena_of, align, aligned_size)``: the arenas by
    name (sorted), the arena of every tensor (views: their root's), and for
    storage tensors the effective alignment a(t) and the aligned size.

    ``role_arenas`` ({role: arena name}, checked by :func:`check_role_arenas`)
    overrides the default arena of a role; a tensor's own ``arena`` wins.
    (The ``persistent`` default still depends only on the arena's name.)

    CHOICE: an aligned size above 2^64 - 1 is ALLOCATION_OVERFLOW naming the
    tensor (checked in document order)."""
    g = a.graph
    by_role = dict(DEFAULT_ROLE_ARENAS)
    by_role.update(role_arenas or {})
    arena_of = [None] * g.n_tensors
    for t in a.storage:
        if g.arena[t] is not None:
            arena_of[t] = g.arena[t]
        else:
            arena_of[t] = by_role[g.role[t]]
    for t in range(g.n_tensors):
        arena_of[t] = arena_of[a.root[t]]    # a view lives in its root's arena

    names = sorted(set(arena_of[t] for t in a.storage) | set(config))
    arenas = {}
    for name in names:
        c = config.get(name, {})
        arenas[name] = Arena(
            name,
            alignment=c.get("alignment_bytes", default_alignment),
            capacity_bytes=c.get("capacity_bytes"),
            page_size=c.get("page_size", DEFAULT_PAGE_SIZE),
            persistent=c.get("persistent", name == "parameters"),
        )
    for t in a.storage:
        arenas[arena_of[t]].tensors.append(t)

    align = [None] * g.n_tensors
    aligned_size = [None] * g.n_tensors
    for t in a.storage:
        align[t] = _effective_alignment(a, t, arenas[arena_of[t]].alignment)
        aligned_size[t] = _u64(_align_up(a.sizes[t], align[t]),
                               f"tensor {g.ids[t]!r}: size {a.sizes[t]} rounded up to its alignment "
                               f"{align[t]}", tensor=g.ids[t])
    return arenas, arena_of, align, aligned_size


def _effective_alignment(a, t, arena_alignment):
    """§3: a(t) = max(arena alignment, t.alignment, alignment of every view rooted at t)."""
    own = a.graph.alignment[t] or 1
    return max(arena_alignment, own, a.view_alignment[t])


# ---------------------------------------------------------------------------
# §4: slots
# ---------------------------------------------------------------------------
def assign_slots(a, arenas, arena_of, align, aligned_size, persistent_only=False):
    """§4 (AssignLogicalSlots_v1). Fills ``arena.slots`` (each slot's holders
    in placement order) and returns ``(slot_of, inplace_of)``: each storage
    tensor's slot number in its arena and its in-place victim (or None).

    ``persistent_only``: the offset strategies give slots to the persistent
    arenas only (strategies.md: they are always laid out sequentially); the
    other arenas keep no slots (``slot_of`` None)."""
    g = a.graph
    slot_of = [None] * g.n_tensors
    inplace_of = [None] * g.n_tensors
    partners = _root_partners(a)
    for arena in arenas.values():
        if arena.persistent:
            # Persistent arena: id order, the k-th tensor alone in slot k, no reuse.
            for t in sorted(arena.tensors, key=lambda t: g.ids[t]):
                slot = Slot()
                _place(arena, slot, len(arena.slots), t, slot_of, align, aligned_size)
                arena.slots.append(slot)
        elif not persistent_only:
            _sweep(a, arena, arena_of, partners, slot_of, inplace_of, align, aligned_size)
    return slot_of, inplace_of


def _root_partners(a):
    """must_not_alias pairs resolved to their roots, both ways (storage tensor ->
    set of storage tensors; tensors without a pair are absent).

    CHOICE: a pair on a single root (allowed by phase D when the byte ranges
    are disjoint) puts no constraint on slots; a pair with a view constrains
    the view's whole root."""
    g = a.graph
    partners = {}
    for t in range(g.n_tensors):
        for p in g.must_not_alias[t]:
            x, y = a.root[t], a.root[p]
            if x != y:
                partners.setdefault(x, set()).add(y)
                partners.setdefault(y, set()).add(x)
    return partners


def _place(arena, slot, k, t, slot_of, align, aligned_size):
    slot.holders.append(t)
    slot.size = max(slot.size, aligned_size[t])
    slot.alignment = max(slot.alignment, align[t])
    slot_of[t] = k


def _sweep(a, arena, arena_of, partners, slot_of, inplace_of, align, aligned_size):
    """§4, reusing arena: sweep the tensors by (birth, size descending, id).

    CHOICE: "size" in the sort key and in the victim rules is the tensor's
    size as it is, not its aligned size."""
    g = a.graph
    order = sorted(arena.tensors, key=lambda t: (a.birth[t], -a.sizes[t], g.ids[t]))
    holder = []        # slot -> its current holder (the last tensor placed in it)
    active = []        # heap of (death of holder, slot, holder) for slots not yet released
    free = []          # heap of released slot numbers
    node_aliases = {}  # node -> roots of the views it reads or writes (computed on demand)
    for t in order:
        b = a.birth[t]
        # 1. Release every slot whose holder died before t is born. An entry
        #    whose holder was replaced in place is stale: the new holder has its own.
        while active and active[0][0] < b:
            _, k, h = heappop(active)
            if holder[k] == h:
                heappush(free, k)
        # Slots that ever held a must_not_alias partner of t (a tensor is placed once).
        forbidden = {slot_of[p] for p in partners.get(t, ())
                     if arena_of[p] == arena.name and slot_of[p] is not None}

        # 2. In place: take the slot of the largest eligible victim (ties: id order).
        k = None
        victim = _best_victim(a, t, arena, arena_of, partners, forbidden, slot_of, holder, node_aliases)
        if victim is not None:
            k = slot_of[victim]
            inplace_of[t] = victim
        # 3. Otherwise the lowest-numbered free slot that never held a partner, else a new slot.
        if k is None:
            skipped = []
            while free:
                c = heappop(free)
                if c in forbidden:
                    skipped.append(c)
                else:
                    k = c
                    break
            for c in skipped:
                heappush(free, c)
        if k is None:
            k = len(arena.slots)
            arena.slots.append(Slot())
            holder.append(None)
        holder[k] = t
        _place(arena, arena.slots[k], k, t, slot_of, align, aligned_size)
        heappush(active, (a.death[t], k, t))


def _inplace_victim(a, t, arena, arena_of, node_aliases, still_free):
    """§4 step 2, shared by the slots and the in-place groups: the largest
    eligible victim of taker candidate t (ties: id order), or None.
    ``still_free(i)`` is the strategy's own condition (i still holds its slot /
    ends its group, and no must_not_alias partner is in the way)."""
    g = a.graph
    # t is a taker candidate: can_inplace, produced by a node, role not persistent.
    if not g.can_inplace[t] or g.producer[t] is None or g.role[t] in PERSISTENT_ROLES:
        return None
    s = a.prod[t]
    node = g.producer[t]
    if node not in node_aliases:
        node_aliases[node] = {a.root[x] for x in g.inputs[node] + g.outputs[node] if g.is_view[x]}
    aliased = node_aliases[node]
    best = None
    for i in dict.fromkeys(g.inputs[node]):            # each input once, in order
        if g.is_view[i] or i == t or arena_of[i] != arena.name:
            continue
        if a.death[i] != s:
            continue
        if g.role[i] in NEVER_VICTIM_ROLES or a.is_output[i]:
            continue
        if a.mode != "inference" and a.is_saved[i]:
            continue
        if i in aliased:                                  # another live alias
            continue
        if a.sizes[i] < a.sizes[t]:
            continue
        if not still_free(i):
            continue
        # the largest victim; between equal sizes, the first in id order
        if best is None or a.sizes[i] > a.sizes[best] or \
                (a.sizes[i] == a.sizes[best] and g.ids[i] < g.ids[best]):
            best = i
    return best


def _best_victim(a, t, arena, arena_of, partners, forbidden, slot_of, holder, node_aliases):
    """§4 step 2 for slots: the victim must still hold its slot (CHOICE: a
    tensor not placed yet — an unproduced input born at step 0 that sorts after
    t — holds none), and neither it nor its slot may be barred by must_not_alias."""
    def still_free(i):
        return (slot_of[i] is not None and holder[slot_of[i]] == i
                and i not in partners.get(t, ()) and slot_of[i] not in forbidden)
    return _inplace_victim(a, t, arena, arena_of, node_aliases, still_free)


# ---------------------------------------------------------------------------
# strategies.md §1: buffers (the offset strategies)
# ---------------------------------------------------------------------------
class Buffers:
    """strategies.md §1: one reusing arena's in-place groups, one buffer each.

    Buffer ``k`` has ``members[k]`` (its tensors in joining order; the first
    gives the buffer its id), the half-open interval ``[lower[k], upper[k])``,
    ``size[k]`` (the largest aligned size of its members), ``alignment[k]``
    (the largest a(t)), ``rank[k]`` (its place in id order: the tie-break) and
    ``partners[k]`` (the buffers holding a must_not_alias partner of one of
    its members). ``group_of`` maps each tensor of the arena to its buffer."""

    def __init__(self):
        self.members = []
        self.lower = []
        self.upper = []
        self.size = []
        self.alignment = []
        self.rank = []
        self.partners = []
        self.group_of = {}

    @property
    def count(self):
        return len(self.members)

    def live_together(self, x, y):
        """§1.3: two buffers conflict when they live together (their half-open
        intervals intersect) or when ``y in partners[x]``."""
        return self.lower[x] < self.upper[y] and self.lower[y] < self.upper[x]


def build_buffers(a, arena, arena_of, align, aligned_size, partners, inplace_of):
    """strategies.md §1 for one reusing arena: the in-place groups, each one
    buffer. Records each joining member's victim in ``inplace_of``.

    ``partners`` is :func:`_root_partners` (must_not_alias resolved to roots)."""
    g = a.graph
    b = Buffers()
    # 1. In-place groups: sweep in the tmmu order (birth, size descending, id).
    node_aliases = {}
    for t in sorted(arena.tensors, key=lambda t: (a.birth[t], -a.sizes[t], g.ids[t])):
        victim = _group_victim(a, t, arena, arena_of, partners, b, node_aliases)
        if victim is None:                       # a group of its own
            b.group_of[t] = b.count
            b.members.append([t])
        else:                                    # join the victim's group
            k = b.group_of[victim]
            b.group_of[t] = k
            b.members[k].append(t)
            inplace_of[t] = victim
    # 2. One buffer per group: [birth(first), death(last) + 1), the largest
    #    aligned size and the largest alignment of its members.
    for ms in b.members:
        b.lower.append(a.birth[ms[0]])
        b.upper.append(a.death[ms[-1]] + 1)
        b.size.append(max(aligned_size[t] for t in ms))
        b.alignment.append(max(align[t] for t in ms))
    b.rank = [None] * b.count
    for r, k in enumerate(sorted(range(b.count), key=lambda k: g.ids[b.members[k][0]])):
        b.rank[k] = r
    # 3. Buffers holding a must_not_alias pair (on two roots of this arena) conflict.
    b.partners = [set() for _ in range(b.count)]
    for t in arena.tensors:
        for p in partners.get(t, ()):
            if arena_of[p] == arena.name and b.group_of[p] != b.group_of[t]:
                b.partners[b.group_of[t]].add(b.group_of[p])
    return b


def _group_victim(a, t, arena, arena_of, partners, b, node_aliases):
    """strategies.md §1.1: the victim whose group taker candidate ``t`` joins,
    or None. The victim rules of algorithm.md §4, with "still holds its slot"
    read as "is its group's last member" and "paired with an earlier holder"
    as "paired with any member of its group"."""
    mine = partners.get(t, ())

    def still_free(i):
        k = b.group_of.get(i)                    # None: i comes after t in the sweep
        if k is None or b.members[k][-1] != i:   # i must be its group's last member
            return False
        return not (mine and any(m in mine for m in b.members[k]))

    return _inplace_victim(a, t, arena, arena_of, node_aliases, still_free)


class PlacementOverflow(Exception):
    """An offset or an end past 2^64 - 1 while placing buffer ``buffer``.

    The placements see bare buffers; :func:`assign_offsets`, which knows the
    arena and the buffers' tensors, turns it into ALLOCATION_OVERFLOW."""

    def __init__(self, buffer, value):
        super().__init__(f"placing buffer {buffer} reaches {value}, past 2^64-1 bytes")
        self.buffer = buffer
        self.value = value


def _placement_overflow(value, buffer):
    """``value`` (an offset or an end met while placing ``buffer``), checked."""
    if value > U64_MAX:
        raise PlacementOverflow(buffer, value)
    return value


# ---------------------------------------------------------------------------
# strategies.md §2: greedy_by_size
# ---------------------------------------------------------------------------
def place_greedy_by_size(b, fit="best"):
    """strategies.md §2. Returns ``(offsets, end, method)``: each buffer's
    offset, ``max(offset + size)`` (0 without buffers) and the method name.

    A plain scan over the buffers placed so far replaces the core's interval
    index: it finds the same conflicting buffers."""
    order = sorted(range(b.count),
                   key=lambda x: (-b.size[x], b.lower[x], -(b.upper[x] - b.lower[x]), b.rank[x]))
    offset = [None] * b.count
    lower, upper = b.lower, b.upper
    placed = []
    end = 0
    for x in order:
        size, alignment = b.size[x], b.alignment[x]
        # The placed buffers that conflict with x (§1.3): live together (the
        # test of Buffers.live_together, inlined), or a placed partner.
        near = [y for y in placed if lower[y] < upper[x] and lower[x] < upper[y]]
        near += [q for q in b.partners[x] if offset[q] is not None and not b.live_together(x, q)]
        near.sort(key=lambda y: (offset[y], offset[y] + b.size[y], b.rank[y]))
        cursor = 0                 # the highest end seen so far
        chosen = best_gap = None
        for y in near:
            start = _align_up(cursor, alignment)
            if start + size <= offset[y]:                       # the gap [cursor, offset[y]) fits
                gap = offset[y] - cursor
                if best_gap is None or gap < best_gap:          # ties: the lowest gap
                    chosen, best_gap = start, gap
                    if fit == "first":
                        break
            cursor = max(cursor, offset[y] + b.size[y])
        if chosen is None:                                      # on top
            chosen = _placement_overflow(_align_up(cursor, alignment), x)
        offset[x] = chosen
        end = max(end, _placement_overflow(chosen + size, x))
        placed.append(x)
    return offset, end, "greedy_by_size" if fit == "best" else "greedy_by_size_first_fit"


# ---------------------------------------------------------------------------
# strategies.md §3: best_fit
# ---------------------------------------------------------------------------
def place_best_fit(b):
    """strategies.md §3: the online allocator replayed over the steps.
    Returns ``(offsets, end, "best_fit")``; ``end`` is the final high-water mark.

    ``free`` is the free-block list: disjoint, non-empty ``[start, end)``
    blocks. Blocks merge only when a buffer is released (with the free blocks
    that touch it), never otherwise.

    CHOICE (like the core): taking a zero-size range from inside a free block
    still splits it in two at that point (the two halves are not merged again:
    only a release merges); a zero-size buffer is never released."""
    n = b.count
    offset = [None] * n
    by_birth = sorted(range(n), key=lambda x: (b.lower[x], -b.size[x], b.rank[x]))
    by_death = sorted(range(n), key=lambda x: (b.upper[x], b.rank[x]))
    free = []
    mark = 0                       # the high-water mark
    next_death = 0
    for x in by_birth:
        now = b.lower[x]
        # First release every allocated buffer with upper <= now (the order
        # of the releases does not change the resulting free list).
        while next_death < n and b.upper[by_death[next_death]] <= now:
            d = by_death[next_death]
            next_death += 1
            if offset[d] is not None:
                _release(free, offset[d], offset[d] + b.size[d])
        size, alignment = b.size[x], b.alignment[x]
        # The fitting block with the smallest e - b, ties the lowest b.
        chosen = None
        for block in sorted(free, key=lambda blk: (blk[1] - blk[0], blk[0])):
            start = _align_up(block[0], alignment)
            if start + size <= block[1] and not _clashes(b, offset, x, start):
                chosen = block
                break
        if chosen is not None:
            free.remove(chosen)
            if chosen[0] < start:
                free.append((chosen[0], start))
            if start + size < chosen[1]:
                free.append((start + size, chosen[1]))
        else:
            # On top: from the free block that ends at the mark, if any.
            top = next((blk for blk in free if blk[1] == mark), None)
            start = None if top is None else _align_up(top[0], alignment)
            if start is not None and start <= U64_MAX and not _clashes(b, offset, x, start):
                free.remove(top)
                if top[0] < start:
                    free.append((top[0], start))    # the padding stays free
            else:
                start = _placement_overflow(_align_up(mark, alignment), x)
                _release(free, mark, start)         # the padding stays free
            mark = max(mark, _placement_overflow(start + size, x))
        offset[x] = start
    return offset, mark, "best_fit"


def _clashes(b, offset, x, start):
    """Would buffer x at ``start`` overlap a placed must_not_alias partner?"""
    for q in b.partners[x]:
        if offset[q] is not None and _ranges_intersect(start, b.size[x], offset[q], b.size[q]):
            return True
    return False


def _release(free, start, end):
    """Return ``[start, end)`` to the free list, merged with the free blocks
    that end at ``start`` and that start at ``end``."""
    if start == end:
        return
    after = next((blk for blk in free if blk[0] == end), None)
    if after is not None:
        free.remove(after)
        end = after[1]
    before = next((blk for blk in free if blk[1] == start), None)
    if before is not None:
        free.remove(before)
        start = before[0]
    free.append((start, end))


def assign_offsets(a, arenas, arena_of, align, aligned_size, strategy, fit, inplace_of, offset_of, reserved):
    """strategies.md: every reusing arena (name order) is built into buffers
    (§1) and placed by ``strategy``; its size is the placement's end rounded
    up to the arena alignment. Fills ``offset_of`` and ``reserved`` (the size
    of each tensor's buffer) for their storage tensors."""
    partners = _root_partners(a)
    for name, arena in arenas.items():
        if arena.persistent:
            continue
        b = build_buffers(a, arena, arena_of, align, aligned_size, partners, inplace_of)
        try:
            if strategy == "greedy_by_size":
                offsets, end, method = place_greedy_by_size(b, fit)
            else:
                offsets, end, method = place_best_fit(b)
        except PlacementOverflow as e:
            # CHOICE (like the core): name the arena and the buffer being placed,
            # by its first member (the tensor that gives the buffer its id).
            who = a.graph.ids[b.members[e.buffer][0]]
            raise PlanError("ALLOCATION_OVERFLOW",
                            f"arena {name!r}: placing tensor {who!r} reaches {e.value}, which does "
                            f"not fit in 64 bits (maximum 2^64 - 1 = {U64_MAX})",
                            tensor=who, arena=name) from None
        arena.method = method
        arena.size = _u64(_align_up(end, arena.alignment), f"arena {name!r}: its size", arena=name)
        for t in arena.tensors:
            k = b.group_of[t]
            offset_of[t] = offsets[k]
            reserved[t] = b.size[k]


# ---------------------------------------------------------------------------
# §5: layout
# ---------------------------------------------------------------------------
def layout(a, arenas, offset_of=None, reserved=None):
    """§5 (MapToVirtualAddresses_v1): slot offsets and arena sizes of every
    arena, then the capacity checks (the core's order). Arenas in name order.

    CHOICE: an overflow here is ALLOCATION_OVERFLOW naming the arena and the
    first holder of the slot being placed (the arena only for the arena size).

    Offset strategies (``offset_of`` given, the reusing arenas already placed
    by :func:`assign_offsets`): the arenas with slots are laid out first, all
    of them, then every arena's capacity is checked (the core's order). An
    offset arena over its capacity names the storage tensor with the lowest
    offset (ties: id order) among those whose offset + buffer size exceeds
    the capacity. Fills ``offset_of`` / ``reserved`` of the slot arenas' tensors."""
    if offset_of is None:                       # tmmu: lay out every arena, then check capacities
        for name, arena in arenas.items():
            _layout_slots(a, name, arena)
        for name, arena in arenas.items():
            _check_capacity(a, name, arena)
        return
    for name, arena in arenas.items():
        if arena.method is None:
            _layout_slots(a, name, arena)
            for slot in arena.slots:
                for t in slot.holders:
                    offset_of[t], reserved[t] = slot.offset, slot.size
    for name, arena in arenas.items():
        _check_capacity(a, name, arena, offset_of, reserved)


def _layout_slots(a, name, arena):
    g = a.graph
    end = 0
    for k, slot in enumerate(arena.slots):
        where = {"arena": name, "tensor": g.ids[slot.holders[0]]}
        slot.offset = 0 if k == 0 else _u64(_align_up(end, slot.alignment),
                                            f"arena {name!r}: the offset of slot {k}", **where)
        end = _u64(slot.offset + slot.size, f"arena {name!r}: the end of slot {k}", **where)
    arena.size = _u64(_align_up(end, arena.alignment), f"arena {name!r}: its size", arena=name)


def _check_capacity(a, name, arena, offset_of=None, reserved=None):
    g = a.graph
    if arena.capacity_bytes is None or arena.size <= arena.capacity_bytes:
        return
    if arena.method is None:
        for k, slot in enumerate(arena.slots):
            if slot.offset + slot.size > arena.capacity_bytes:
                first = slot.holders[0]       # holders are in placement order
                raise PlanError(
                    "ARENA_TOO_SMALL",
                    f"arena {name!r} needs {arena.size} bytes but its capacity_bytes is "
                    f"{arena.capacity_bytes}: slot {k} (first holder {g.ids[first]!r}) spans bytes "
                    f"[{slot.offset}, {slot.offset + slot.size})",
                    arena=name, tensor=g.ids[first])
        raise AssertionError("unreachable: the arena size is the end of its last slot")
    past = [t for t in arena.tensors if offset_of[t] + reserved[t] > arena.capacity_bytes]
    if not past:
        raise AssertionError("unreachable: the arena size is the end of its highest buffer")
    first = min(past, key=lambda t: (offset_of[t], g.ids[t]))
    raise PlanError(
        "ARENA_TOO_SMALL",
        f"arena {name!r} needs {arena.size} bytes but its capacity_bytes is {arena.capacity_bytes}: "
        f"tensor {g.ids[first]!r} (its buffer: bytes [{offset_of[first]}, {offset_of[first] + reserved[first]})) "
        f"is the lowest past it", arena=name, tensor=g.ids[first])


# ---------------------------------------------------------------------------
# the emel.plan/1 document
# ---------------------------------------------------------------------------
def _plan_document(a, strategy, arenas, arena_of, slot_of, inplace_of, offset_of=None):
    """The document without its metrics. formats.md: a tensor placed by an
    offset strategy (``slot_of`` None; its offset in ``offset_of``) has no
    ``slot`` key; its arena has ``slots: null`` and a ``method``."""
    g = a.graph
    tensors = {}
    for t in range(g.n_tensors):
        if g.is_view[t]:
            continue
        arena = arenas[arena_of[t]]
        if slot_of[t] is None:
            entry = {"arena": arena.name, "offset": offset_of[t], "size": a.sizes[t],
                     "birth": a.birth[t], "death": a.death[t]}
        else:
            slot = arena.slots[slot_of[t]]
            entry = {"arena": arena.name, "offset": slot.offset, "size": a.sizes[t], "slot": slot_of[t],
                     "birth": a.birth[t], "death": a.death[t]}
        if inplace_of[t] is not None:
            entry["inplace_of"] = g.ids[inplace_of[t]]
        tensors[g.ids[t]] = entry
    result_tensors = {}
    for t in range(g.n_tensors):                       # document order
        tid = g.ids[t]
        if g.is_view[t]:
            r = a.root[t]
            result_tensors[tid] = {"arena": arena_of[t], "offset": tensors[g.ids[r]]["offset"] + a.root_offset[t],
                                   "size": a.sizes[t], "view_of": g.ids[r]}
        else:
            result_tensors[tid] = tensors[tid]
    arena_entries = {}
    for name, arena in arenas.items():
        entry = {"size": arena.size, "alignment": arena.alignment,
                 "slots": len(arena.slots) if arena.method is None else None,
                 "lower_bound": None, "page_size": arena.page_size, "persistent": arena.persistent}
        if arena.capacity_bytes is not None:
            entry["capacity_bytes"] = arena.capacity_bytes
        if arena.method is not None:
            entry["method"] = arena.method
        arena_entries[name] = entry
    return {
        "format": "emel.plan/1",
        "graph": g.name,
        "mode": a.mode,
        "strategy": strategy,
        "steps": g.n_steps,
        "arenas": arena_entries,
        "tensors": result_tensors,
    }


# ---------------------------------------------------------------------------
# §6: self-check
# ---------------------------------------------------------------------------
def check_plan(document, plan_dict, mode="inference"):
    """§6: check any ``emel.plan/1`` dict against its graph.

    The graph is validated and its liveness recomputed for ``mode`` (CHOICE:
    lifetimes and sizes come from the document, not from the plan; placements
    -- arena, offset, inplace_of -- and the arenas' size and alignment come
    from the plan). Raises PlanError ALIGNMENT_VIOLATION / ADDRESS_COLLISION;
    a plan dict that lacks an entry or has the wrong types is
    INVALID_IR_SHAPES (CHOICE)."""
    a = analyse(document, mode)
    _self_check(a, plan_dict)


def _self_check(a, plan_dict):
    g = a.graph
    entries, arena_size, arena_alignment = _read_plan(g, plan_dict)
    offset = [entries[t]["offset"] for t in range(g.n_tensors)]
    arena = [entries[t]["arena"] for t in range(g.n_tensors)]
    size = a.sizes

    # 1. Alignment: storage tensors to a(t), views to their own alignment. Document order.
    for t in range(g.n_tensors):
        if g.is_view[t]:
            need = g.alignment[t]
        else:
            need = _effective_alignment(a, t, arena_alignment[arena[t]])
        if need is not None and offset[t] % need != 0:
            raise PlanError("ALIGNMENT_VIOLATION",
                            f"tensor {g.ids[t]!r} is at offset {offset[t]} of arena {arena[t]!r}, which is not "
                            f"a multiple of its alignment {need}", tensor=g.ids[t], arena=arena[t])

    # 2. Every tensor inside its arena. CHOICE: also, a view must be where its
    #    root puts it (root's arena, root offset + root-relative offset).
    for t in range(g.n_tensors):
        if offset[t] + size[t] > arena_size[arena[t]]:
            raise PlanError("ADDRESS_COLLISION",
                            f"tensor {g.ids[t]!r} spans bytes [{offset[t]}, {offset[t] + size[t]}) of arena "
                            f"{arena[t]!r}, which has only {arena_size[arena[t]]} bytes",
                            tensor=g.ids[t], arena=arena[t])
        if g.is_view[t]:
            r = a.root[t]
            if arena[t] != arena[r] or offset[t] != offset[r] + a.root_offset[t]:
                raise PlanError("ADDRESS_COLLISION",
                                f"view {g.ids[t]!r} is at offset {offset[t]} of arena {arena[t]!r}, but its root "
                                f"{g.ids[r]!r} puts it at offset {offset[r] + a.root_offset[t]} of arena "
                                f"{arena[r]!r}", tensor=g.ids[t], arena=arena[t])

    # 3. Storage tensors of one arena live at the same step have disjoint bytes,
    #    except an in-place pair. Arenas in name order.
    inplace = {}
    for t in a.storage:
        victim = entries[t].get("inplace_of")
        if victim is not None:
            inplace[t] = g.index.get(victim)
    by_arena = {}
    for t in a.storage:
        by_arena.setdefault(arena[t], []).append(t)
    for name in sorted(by_arena):
        _check_no_overlap(a, name, by_arena[name], offset, inplace)

    # 4. must_not_alias pairs never overlap in bytes (lifetimes do not matter;
    #    tensors in different arenas never overlap). Named: the listing tensor.
    for t in range(g.n_tensors):
        for p in g.must_not_alias[t]:
            if arena[t] == arena[p] and _ranges_intersect(offset[t], size[t], offset[p], size[p]):
                raise PlanError("ADDRESS_COLLISION",
                                f"tensor {g.ids[t]!r} must not alias {g.ids[p]!r}, but in arena {arena[t]!r} they "
                                f"occupy [{offset[t]}, {offset[t] + size[t]}) and [{offset[p]}, "
                                f"{offset[p] + size[p]})", tensor=g.ids[t], arena=arena[t])


def _read_plan(g, plan_dict):
    """The parts of a plan dict the self-check uses, type-checked."""
    if not isinstance(plan_dict, dict) or not isinstance(plan_dict.get("tensors"), dict) \
            or not isinstance(plan_dict.get("arenas"), dict):
        raise _bad("a plan must be an emel.plan/1 object with 'tensors' and 'arenas' objects")
    arena_size, arena_alignment = {}, {}
    for name, entry in plan_dict["arenas"].items():
        if not isinstance(entry, dict) or not is_int(entry.get("size")) or entry["size"] < 0:
            raise _bad(f"plan: arenas[{name!r}].size must be an integer >= 0", arena=name)
        al = entry.get("alignment")
        if not is_int(al) or not _is_power_of_two(al):
            raise PlanError("ALIGNMENT_VIOLATION",
                            f"plan: arenas[{name!r}].alignment must be a power of two >= 1, got {al!r}", arena=name)
        arena_size[name], arena_alignment[name] = entry["size"], al
    entries = []
    for t in range(g.n_tensors):
        tid = g.ids[t]
        e = plan_dict["tensors"].get(tid)
        if not isinstance(e, dict):
            raise _bad(f"plan: there is no entry for tensor {tid!r}", tensor=tid)
        if not isinstance(e.get("arena"), str) or e["arena"] not in arena_size:
            raise _bad(f"plan: tensor {tid!r} is in arena {e.get('arena')!r}, which is not in the plan's arenas",
                       tensor=tid)
        if not is_int(e.get("offset")) or e["offset"] < 0:
            raise _bad(f"plan: tensor {tid!r} has offset {e.get('offset')!r}; expected an integer >= 0",
                       tensor=tid)
        entries.append(e)
    return entries, arena_size, arena_alignment


def _check_no_overlap(a, name, members, offset, inplace):
    """§6, third bullet, for one arena, in O((n + overlaps) log n).

    CHOICE (which pair is named): the first offending pair met in this sweep
    (tensors by birth, then id; the overlapping live tensors in id order);
    ``.tensor`` is the first of the two in id order, the message names both.

    Sweep the storage tensors by (birth, id). ``live`` holds the tensors still
    alive, as (offset, end, tensor) sorted by offset. Each newly born tensor
    is compared with every live tensor its bytes overlap; a pair that overlaps
    and is not an in-place pair raises. Zero-size tensors overlap nothing.

    Invariant (kept because every insertion is checked): two live tensors
    overlap only when they are an in-place pair, and then they start at the
    same offset. Hence among the live tensors that start before ``o``, only
    those with the largest such start can reach past ``o``: one with a smaller
    start that did would overlap them without sharing their start."""
    g = a.graph
    live = []          # sorted (offset, end, tensor)
    expiry = []        # heap (death, tensor) of the tensors in `live`
    key_of = {}
    for t in sorted(members, key=lambda x: (a.birth[x], g.ids[x])):
        b = a.birth[t]
        while expiry and expiry[0][0] < b:
            _, u = heappop(expiry)
            del live[bisect_left(live, key_of.pop(u))]
        if a.sizes[t] == 0:
            continue
        o, e = offset[t], offset[t] + a.sizes[t]
        j = bisect_left(live, (e,))                # live[:j] start before e
        hits = []
        i = j - 1
        while i >= 0 and live[i][0] >= o:          # start in [o, e): overlaps
            hits.append(live[i][2])
            i -= 1
        if i >= 0:                                 # the group with the largest start < o
            group_start = live[i][0]
            while i >= 0 and live[i][0] == group_start:
                if live[i][1] > o:
                    hits.append(live[i][2])
                i -= 1
        for u in sorted(hits, key=lambda x: g.ids[x]):
            if not _inplace_pair(a, t, u, offset, inplace):
                x, y = sorted((g.ids[t], g.ids[u]))
                tx, ty = g.index[x], g.index[y]
                raise PlanError(
                    "ADDRESS_COLLISION",
                    f"tensors {x!r} and {y!r} of arena {name!r} are live at the same time (steps "
                    f"[{a.birth[tx]}, {a.death[tx]}] and [{a.birth[ty]}, {a.death[ty]}]) and overlap: bytes "
                    f"[{offset[tx]}, {offset[tx] + a.sizes[tx]}) and [{offset[ty]}, {offset[ty] + a.sizes[ty]})",
                    tensor=x, arena=name)
        key_of[t] = (o, e, t)
        insort(live, key_of[t])
        heappush(expiry, (a.death[t], t))


def _inplace_pair(a, t, u, offset, inplace):
    """§6: the taker is born at step s at the victim's offset, and the victim dies at s."""
    for taker, victim in ((t, u), (u, t)):
        if inplace.get(taker) == victim and offset[taker] == offset[victim] \
                and a.birth[taker] == a.death[victim]:
            return True
    return False


# ---------------------------------------------------------------------------
# §7: metrics
# ---------------------------------------------------------------------------
def _ratio(numerator, denominator):
    """§7: 1.0 - float(A) / float(B), each exact integer rounded to the nearest
    double first; 0.0 when B is 0."""
    if denominator == 0:
        return 0.0
    return 1.0 - float(numerator) / float(denominator)


def metrics(a, arenas, slot_of, inplace_of, reserved=None):
    """§7: the per-arena metric maps plus total_bytes and total_lower_bound.
    Per-step sums use difference arrays over the steps 0 .. last.

    formats.md: in an arena placed by an offset strategy ``peak_logical_slots``
    and ``memory_reuse_ratio`` are None, and ``internal_fragmentation_ratio``
    uses each tensor's buffer size (``reserved``) in place of a slot size."""
    keys = ("peak_logical_slots", "peak_physical_bytes", "lower_bound", "peak_live_bytes", "max_live",
            "storage_tensors", "memory_reuse_ratio", "internal_fragmentation_ratio")
    result = {key: {} for key in keys}
    steps = a.last + 1
    for name, arena in arenas.items():
        live_bytes = [0] * (steps + 1)
        shared_bytes = [0] * (steps + 1)   # bytes an in-place pair shares while both live
        live_count = [0] * (steps + 1)
        used = 0          # A: sum of size x lifetime
        reserved_total = 0    # B: sum of slot (or buffer) size x lifetime
        for t in arena.tensors:
            b, d = a.birth[t], a.death[t]
            live_bytes[b] += a.sizes[t]
            live_bytes[d + 1] -= a.sizes[t]
            live_count[b] += 1
            live_count[d + 1] -= 1
            if inplace_of[t] is not None:
                # the pair made at step b (taker born, victim dying) counts once
                live_count[b] -= 1
                live_count[b + 1] += 1
                v = inplace_of[t]
                lo, hi = max(b, a.birth[v]), min(d, a.death[v])
                if lo <= hi:
                    shared_bytes[lo] += min(a.sizes[t], a.sizes[v])
                    shared_bytes[hi + 1] -= min(a.sizes[t], a.sizes[v])
            used += a.sizes[t] * (d - b + 1)
            held = arena.slots[slot_of[t]].size if slot_of[t] is not None else reserved[t]
            reserved_total += held * (d - b + 1)
        lower_bound = peak_live = max_live = 0
        running_bytes = running_shared = running_count = 0
        for s in range(steps):
            running_bytes += live_bytes[s]
            running_shared += shared_bytes[s]
            running_count += live_count[s]
            peak_live = max(peak_live, running_bytes)
            lower_bound = max(lower_bound, running_bytes - running_shared)
            max_live = max(max_live, running_count)
        has_slots = arena.method is None
        result["peak_logical_slots"][name] = len(arena.slots) if has_slots else None
        result["peak_physical_bytes"][name] = arena.size
        # In-place pairs count twice, so the peak can pass the arena size; like
        # every reported size it must still fit in 64 bits.
        result["peak_live_bytes"][name] = _u64(peak_live, f"arena {name!r}: live bytes at the peak",
                                               arena=name)
        result["lower_bound"][name] = lower_bound
        result["max_live"][name] = max_live
        result["storage_tensors"][name] = len(arena.tensors)
        result["memory_reuse_ratio"][name] = _ratio(len(arena.slots), len(arena.tensors)) if has_slots else None
        result["internal_fragmentation_ratio"][name] = _ratio(used, reserved_total)
    result["total_bytes"] = _u64(sum(result["peak_physical_bytes"].values()),
                                 "total_bytes (the sum of the arena sizes)")
    result["total_lower_bound"] = _u64(sum(result["lower_bound"].values()),
                                       "total_lower_bound (the sum of the lower bounds)")
    return result


# ---------------------------------------------------------------------------
# the whole pipeline
# ---------------------------------------------------------------------------
def plan(document, mode="inference", strategy="tmmu", arenas=None, alignment=None, fit="best",
         role_arenas=None, *, replay_token=None, rank=0, world_size=1, shard_spec=None,
         arena_layout=None):
    """Plan a parsed ``emel.graph/1`` document; returns the ``emel.plan/1`` dict.

    ``strategy``: ``tmmu`` (algorithm.md), ``greedy_by_size`` (``fit="best"``
    or ``"first"``) or ``best_fit`` (strategies.md); ``auto`` and ``optimal``
    exist in the C++ core only. ``role_arenas``: ``{role: arena name}``
    overriding a role's default arena, e.g. ``{"gradient": "activations"}``;
    ``arena_layout`` as in the API (arena_layout.py: None pools gradients with
    activations except under tmmu).
    ``rank``, ``world_size``, ``shard_spec`` (``{tensor id: axis}``): plan
    one rank's share (sharding.shard_graph, applied after the document checks
    of phase A); with ``replay_token`` (32 bytes) they enter the hashes
    (determinism.md).

    validate -> liveness -> arena classes -> slots (tmmu) | buffers + offsets -> layout -> self-check -> metrics
    """
    _check_mode(mode)
    _check_strategy(strategy, fit)
    config, default_alignment = check_arena_config(arenas, alignment)        # §1, first
    roles = check_role_arenas(roles_for_layout(arena_layout, strategy, role_arenas))  # after alignment= and arenas=
    token, rank, world_size, spec = determinism.check_determinism_args(replay_token, rank, world_size,
                                                                       shard_spec)
    if spec:
        document = _resolve_symbolic_dims(document)
        _check_document_shape(document)                                     # §1 A, as load_graph does first
        document = shard_graph(document, rank, world_size, spec)
    a = analyse(document, mode)                                             # §1 A-E, §2
    arena_map, arena_of, align, aligned_size = arena_classes(a, config, default_alignment, roles)  # §3
    if strategy == "tmmu":
        slot_of, inplace_of = assign_slots(a, arena_map, arena_of, align, aligned_size)  # §4
        layout(a, arena_map)                                                # §5
        result = _plan_document(a, strategy, arena_map, arena_of, slot_of, inplace_of)
        reserved = None
    else:
        # strategies.md: persistent arenas keep sequential slots (§4, §5);
        # every reusing arena is built into buffers (§1) and placed (§2 / §3).
        slot_of, inplace_of = assign_slots(a, arena_map, arena_of, align, aligned_size, persistent_only=True)
        offset_of = [None] * a.graph.n_tensors
        reserved = [None] * a.graph.n_tensors
        assign_offsets(a, arena_map, arena_of, align, aligned_size, strategy, fit, inplace_of, offset_of, reserved)
        layout(a, arena_map, offset_of, reserved)                           # §5 (slot arenas), capacities
        result = _plan_document(a, strategy, arena_map, arena_of, slot_of, inplace_of, offset_of)
    _self_check(a, result)                                                  # §6
    result["metrics"] = metrics(a, arena_map, slot_of, inplace_of, reserved)  # §7
    for name, entry in result["arenas"].items():
        entry["lower_bound"] = result["metrics"]["lower_bound"][name]
    attach_hashes(document, a, result, token, rank, world_size, spec)      # determinism.md
    return result


# ---------------------------------------------------------------------------
# determinism.md: the IR hash and the plan hash
# ---------------------------------------------------------------------------
def ir_canonical(document, a):
    """determinism.md §2: ["emel_ir_v1", tensors, nodes, outputs], built from
    the validated graph. Tensors and nodes in id order; what the planner never
    reads (name, source, op, unknown keys) is left out."""
    g = a.graph
    tensors = []
    for t in sorted(range(g.n_tensors), key=lambda k: g.ids[k]):
        view = [g.ids[g.base[t]], g.byte_offset[t]] if g.is_view[t] else None
        tensors.append([g.ids[t], g.shape[t], g.dtype[t], a.sizes[t], g.role[t], g.arena[t] or "",
                        g.alignment[t] or 1, bool(g.saved[t]), bool(g.can_inplace[t]), view,
                        sorted({g.ids[k] for k in g.must_not_alias[t]})])
    nodes = []
    for k in sorted(range(len(g.node_ids)), key=lambda k: g.node_ids[k]):
        phase = document["nodes"][k].get("phase")
        nodes.append([g.node_ids[k], phase, [g.ids[t] for t in g.inputs[k]],
                      [g.ids[t] for t in g.outputs[k]]])
    outputs = sorted({g.ids[t] for t in g.graph_outputs})
    return [determinism.IR_TAG, tensors, nodes, outputs]


def ir_hash(document, mode="inference"):
    """SHA-256 of the canonical CBOR of a validated document's IR (bytes)."""
    a = analyse(document, mode)
    return determinism.sha256(cbor_dumps(ir_canonical(document, a)))


def attach_hashes(document, a, result, token, rank, world_size, spec):
    """Adds ``hashes``, ``replay_token``, ``rank`` and ``world_size`` to a
    plan document, computed from the document itself (determinism.md §3-§5)."""
    g = a.graph
    ir = determinism.sha256(cbor_dumps(ir_canonical(document, a)))
    order = determinism.execution_order_hash([g.node_ids[k] for k in g.order])
    arena_config = determinism.arena_config_hash(result["arenas"])
    shard = determinism.shard_spec_hash(spec)
    if token is None:
        token = determinism.default_replay_token(ir, a.mode)
    plan_hash = determinism.plan_hash(
        ir, a.mode, arena_config, order, rank, world_size, shard,
        determinism.slot_assignment_table(result["tensors"], token),
        determinism.logical_address_table(result["arenas"], result["tensors"]))
    result["hashes"] = {"ir_hash": ir.hex(), "execution_order_hash": order.hex(),
                        "arena_config_hash": arena_config.hex(), "shard_spec_hash": shard.hex(),
                        "plan_hash": plan_hash.hex()}
    result["replay_token"] = token.hex()
    result["rank"] = rank
    result["world_size"] = world_size
