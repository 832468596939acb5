"""Hypothesis strategies for random, VALID ``emel.graph/1`` documents.

Everything here follows ``graph-format.md`` and ``docs/algorithm.md`` only; it
does not import the planner.  Generation is a single forward pass that builds
the graph in a topological *construction order*, so every draw produces a
valid document (no filtering):

* a pool of readable tensors (unproduced inputs / parameters / optimizer state,
  then every produced tensor and every view whose ancestors are produced);
* each node reads 0..6 tensors from the pool (mostly recent ones -- chains --
  sometimes old ones -- residual joins; a read may "consume" the tensor, which
  makes it die there, so in-place reuse really fires) and produces 0..4
  outputs: new storage tensors (some ``can_inplace`` with the same size or a
  smaller size than one of the node's storage inputs) or views (of pool
  tensors or of the node's own new outputs, i.e. views of views);
* unproduced views of unproduced and of produced bases, with byte offsets
  inside their base, their own ``nbytes`` spans and per-view alignments that
  divide their root offset;
* training graphs: forward nodes first (``phase: forward``) that mark tensors
  ``saved_for_backward``, then backward nodes (``phase: backward``) that read
  them and produce gradients / new optimizer state;
* all six roles, arena overrides (including a custom unicode name), odd sizes
  (0, 1, 3, 1000003 bytes), quantized dtypes with ``nbytes``, per-tensor
  alignments 1..4096, optional top-level ``outputs``, optional
  ``execution_order`` (a random topological order that differs from the node
  list, which is then shuffled), occasional ``must_not_alias`` pairs,
  occasional explicit ``null`` optional fields and unknown keys.

Small graphs (up to ``_SMALL`` nodes) are drawn choice by choice so that
hypothesis shrinks them well; larger graphs take their structure from a
drawn seed (their node count still shrinks), which keeps generation fast and
inside hypothesis' buffer.
"""

from __future__ import annotations

import random

from hypothesis import strategies as st

__all__ = [
    "DTYPE_SIZES",
    "ROLES",
    "ARENA_NAMES",
    "MODES",
    "graphs",
    "plan_kwargs",
    "graph_and_kwargs",
    "corrupted_graphs",
    "multi_corrupted_graphs",
    "corrupted_configs",
    "huge_cases",
    "minimize_graph",
    "CORRUPTIONS",
    "CONFIG_CORRUPTIONS",
    "tensor_size",
    "check_generated_graph",
]

DTYPE_SIZES = {
    "float64": 8, "int64": 8,
    "float32": 4, "int32": 4,
    "float16": 2, "bfloat16": 2, "int16": 2,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "int8": 1, "uint8": 1, "bool": 1,
}
_DTYPES = tuple(DTYPE_SIZES)
_QUANT_DTYPES = ("q4_0", "q8_0", "q4_K", "nf4")
ROLES = ("input", "parameter", "activation", "gradient", "optimizer_state", "output")
MODES = ("inference", "forward", "backward")
# Arena names a tensor may be sent to (role defaults + extras + a custom name
# whose id order differs from its byte length order).
ARENA_NAMES = ("activations", "gradients", "parameters", "scratch", "kv_cache", "Ärena-ü/1")
_CONFIG_ONLY_ARENAS = ("zz-empty", "aa-empty")  # named in config only: empty arenas
_ID_PREFIXES = ("t", "t", "t", "T", "a", "z_", "é", "\U0001F600", "x.y/")

_SMALL = 40
_MAX_NODES = 300


# --------------------------------------------------------------------------
# choice sources
# --------------------------------------------------------------------------
class _Draws:
    """Choices drawn from hypothesis (shrinkable).  Every helper shrinks to
    the 'simplest' answer: low integers, False for chances, first element."""

    def __init__(self, draw):
        self._draw = draw

    def int(self, lo, hi):
        return self._draw(st.integers(lo, hi))

    def chance(self, percent):
        if percent <= 0:
            return False
        return self._draw(st.integers(0, 99)) >= 100 - percent

    def pick(self, seq):
        return seq[self._draw(st.integers(0, len(seq) - 1))]

    def shuffle(self, seq):
        return list(self._draw(st.permutations(seq)))


class _Rand:
    """Choices from a seeded PRNG (for large graphs)."""

    def __init__(self, seed):
        self._r = random.Random(seed)

    def int(self, lo, hi):
        return self._r.randint(lo, hi)

    def chance(self, percent):
        return self._r.randrange(100) < percent

    def pick(self, seq):
        return seq[self._r.randrange(len(seq))]

    def shuffle(self, seq):
        seq = list(seq)
        self._r.shuffle(seq)
        return seq


# --------------------------------------------------------------------------
# sizes
# --------------------------------------------------------------------------
def tensor_size(t):
    """Bytes of a tensor (storage or view) as algorithm.md §1 phase C says."""
    nb = t.get("nbytes")
    if nb is not None:
        return nb
    n = DTYPE_SIZES[t["dtype"]]
    for d in t["shape"]:
        n *= d
    return n


def _pow2_up_to(c, hi_exp):
    return 1 << c.int(0, hi_exp)


def _byte_size(c, cap=None):
    """A byte size, with odd sizes on purpose."""
    k = c.int(0, 99)
    if k < 6:
        s = 0
    elif k < 10:
        s = 1
    elif k < 14:
        s = 3
    elif k < 16:
        s = 1000003
    elif k < 60:
        s = 4 * c.int(1, 256)
    elif k < 85:
        s = c.int(1, 70000)
    elif k < 97:
        s = 128 * c.int(1, 1 << 14)
    else:
        s = c.int(1, 1 << 34)
    if cap is not None and s > cap:
        s = c.int(0, cap) if cap > 0 else 0
    return s


def _shape_for_elems(c, e):
    if e == 1 and c.chance(40):
        return []
    for a in (2, 3, 4, 8, 16):
        if e % a == 0 and e > a and c.chance(25):
            if c.chance(30):
                return [1, a, e // a]
            return [a, e // a]
    if c.chance(15):
        return [1, e]
    return [e]


def _size_fields(c, nbytes, *, view=False):
    """shape / dtype / (nbytes) fields for a tensor of exactly ``nbytes``."""
    f = {}
    k = c.int(0, 99)
    if view and k < 12:
        # a strided / broadcast view: its span differs from shape x element size
        f["shape"] = [c.int(0, 64), c.int(1, 8)]
        f["dtype"] = c.pick(_DTYPES)
        f["nbytes"] = nbytes
        return f
    if k < 12:
        # quantized block format: nbytes is required
        f["shape"] = _shape_for_elems(c, c.int(0, 4096)) if c.chance(50) else [c.int(1, 64), 32]
        f["dtype"] = c.pick(_QUANT_DTYPES)
        f["nbytes"] = nbytes
        return f
    if nbytes == 0:
        dt = c.pick(_DTYPES)
        shape = [0] if c.chance(50) else [c.int(1, 9), 0, c.int(1, 3)]
        f["shape"] = shape
        f["dtype"] = dt
    else:
        fits = [d for d in _DTYPES if nbytes % DTYPE_SIZES[d] == 0]
        dt = c.pick(fits) if c.chance(80) else fits[-1]
        f["shape"] = _shape_for_elems(c, nbytes // DTYPE_SIZES[dt])
        f["dtype"] = dt
    if c.chance(15):
        f["nbytes"] = nbytes
    return f


# --------------------------------------------------------------------------
# the graph builder
# --------------------------------------------------------------------------
class _Builder:
    def __init__(self, c, n_nodes):
        self.c = c
        self.n = n_nodes
        self.tensors = []           # document order (may be shuffled later)
        self.info = {}              # id -> dict(size, root, root_off, view, prod, anc_prod, role, ...)
        self.nodes = []             # construction (topological) order
        self.pool = []              # readable tensor ids
        self.saved = []             # saved_for_backward tensors readable by backward nodes
        self._next = 0
        self.training = c.chance(35)
        # a small palette of sizes: equal sizes make the (birth, size desc, id)
        # sort and the victim choice fall back to id order
        self.palette = [_byte_size(c) for _ in range(c.int(1, 3))] if c.chance(35) else None

    def size(self):
        if self.palette is not None and self.c.chance(75):
            return self.c.pick(self.palette)
        return _byte_size(self.c)

    # ids ---------------------------------------------------------------
    def new_id(self, hint="t"):
        i = self._next
        self._next += 1
        pre = self.c.pick(_ID_PREFIXES) if self.c.chance(12) else hint
        return f"{pre}{i}"

    # tensors -----------------------------------------------------------
    def add_storage(self, role, size, *, producer=None, phase=None, hint="t"):
        c = self.c
        tid = self.new_id(hint)
        t = {"id": tid}
        t.update(_size_fields(c, size))
        t["role"] = role
        if c.chance(10):
            t["arena"] = c.pick(ARENA_NAMES)
        if c.chance(12):
            t["alignment"] = _pow2_up_to(c, 12)
        if producer is not None:
            if c.chance(10):
                t["can_inplace"] = True
            if (self.training and phase == "forward" and c.chance(25)) or (
                not self.training and c.chance(8)
            ):
                t["saved_for_backward"] = True
        self._decorate(t)
        self.tensors.append(t)
        self.info[tid] = {
            "size": size, "root": tid, "root_off": 0, "view": False,
            "prod": producer, "anc": [], "role": role, "arena": t.get("arena"),
        }
        if t.get("saved_for_backward"):
            self.saved.append(tid)
        return t

    def _decorate(self, t):
        """Rare optional-field noise: explicit nulls / false flags / unknown keys."""
        c = self.c
        if c.chance(4):
            key = c.pick(("arena", "alignment", "nbytes", "must_not_alias", "view_of"))
            if key not in t:
                t[key] = None
        if c.chance(4) and "can_inplace" not in t:
            t["can_inplace"] = False
        if c.chance(3) and "saved_for_backward" not in t:
            t["saved_for_backward"] = False
        if c.chance(2):
            t["comment"] = {"note": "unknown keys are ignored"}

    def add_view(self, base, *, producer=None):
        """A view of ``base`` (storage or view) with an offset inside it."""
        c = self.c
        bi = self.info[base]
        bsize = bi["size"]
        span = c.int(0, bsize) if c.chance(50) else _byte_size(c, cap=bsize)
        room = bsize - span
        off = 0
        if room > 0 and c.chance(70):
            off = c.int(0, room)
            if c.chance(50):
                q = _pow2_up_to(c, 8)
                off -= off % q
        root_off = bi["root_off"] + off
        tid = self.new_id("v")
        t = {"id": tid}
        t.update(_size_fields(c, span, view=True))
        roles_for_views = ("activation", "activation", "activation", "output", "gradient", "input")
        t["role"] = c.pick(roles_for_views) if c.chance(25) else "activation"
        vo = {"base": base, "byte_offset": off}
        if off == 0 and c.chance(25):
            del vo["byte_offset"]
        t["view_of"] = vo
        if c.chance(15):
            # a power of two dividing the root offset (any up to 4096 at 0)
            m = 12
            while m > 0 and root_off % (1 << m):
                m -= 1
            t["alignment"] = 1 << c.int(0, m)
        if c.chance(5):
            t["arena"] = c.pick(ARENA_NAMES)  # ignored for views
        if c.chance(6):
            t["saved_for_backward"] = True
        if c.chance(3):
            t["can_inplace"] = True
        self._decorate(t)
        if t.get("view_of") is None or t.get("shape") is None:  # _decorate never drops these
            raise AssertionError("generator bug")
        self.tensors.append(t)
        anc = sorted(set(bi["anc"] + ([base])))
        self.info[tid] = {
            "size": span, "root": bi["root"], "root_off": root_off, "view": True,
            "prod": producer, "anc": anc, "role": t["role"], "arena": None,
        }
        if t.get("saved_for_backward"):
            self.saved.append(tid)
        return t

    # reading -----------------------------------------------------------
    def pick_input(self, from_saved=False):
        c = self.c
        src = self.saved if from_saved else self.pool
        if not src:
            return None
        if c.chance(30):
            idx = c.int(0, len(src) - 1)                  # residual join / fan-out
        else:
            idx = len(src) - 1 - c.int(0, min(3, len(src) - 1))   # recent: chains
        tid = src[idx]
        if not from_saved and c.chance(45):
            del src[idx]                                  # last use: dies here
        return tid

    # nodes --------------------------------------------------------------
    def add_node(self, k, phase):
        c = self.c
        nid = (c.pick(("n", "op", "N", "é")) if c.chance(8) else "n") + str(k)
        node = {"id": nid, "op": c.pick(("matmul", "add", "relu", "view", "split", "concat", "grad"))}
        inputs = []
        n_in = c.pick((1, 1, 1, 2, 2, 3, 0, 4, 6))
        for _ in range(n_in):
            from_saved = phase == "backward" and self.saved and c.chance(55)
            tid = self.pick_input(from_saved=from_saved)
            if tid is not None:
                inputs.append(tid)
        forced_victim = None
        if c.chance(40 if k == 0 else 18):
            # an in-place pair made on purpose: read a storage tensor for the
            # last time (at step 0 that is an unproduced tensor, born at the
            # same step as its taker) and overwrite it
            cands = [t for t in self.pool if not self.info[t]["view"]]
            if cands:
                forced_victim = cands[-1 - c.int(0, min(2, len(cands) - 1))]
                self.pool.remove(forced_victim)
                inputs.insert(c.int(0, len(inputs)), forced_victim)
        if inputs and c.chance(2):
            inputs.append(inputs[0])                      # duplicated input id
        storage_inputs = [t for t in inputs if not self.info[t]["view"]]
        outputs = []
        n_out = c.pick((1, 1, 1, 1, 2, 2, 3, 4, 0))
        if forced_victim is not None:
            n_out = max(n_out, 1)
        for j in range(n_out):
            if c.chance(15):
                cands = [t for t in self.pool[-6:]] + outputs
                if cands:
                    v = self.add_view(c.pick(cands), producer=k)
                    outputs.append(v["id"])
                    continue
            if phase == "backward":
                role = c.pick(("gradient", "gradient", "gradient", "activation",
                               "optimizer_state", "parameter", "output"))
            else:
                role = "output" if c.chance(5) else "activation"
            victim = None
            if forced_victim is not None and j == 0:
                victim = forced_victim
                vs = self.info[victim]["size"]
                size = vs if c.chance(55) else c.int(0, vs)
            elif storage_inputs and c.chance(35):
                victim = c.pick(storage_inputs)
                vs = self.info[victim]["size"]
                size = vs if c.chance(55) else c.int(0, vs)
            else:
                size = self.size()
            t = self.add_storage(role, size, producer=k, phase=phase)
            if victim is not None:
                t["can_inplace"] = True
                if c.chance(50):
                    # keep victim and taker in the same arena more often
                    t.pop("arena", None)
                    va = self.info[victim]["arena"]
                    if va is not None:
                        t["arena"] = va
            outputs.append(t["id"])
        if outputs and c.chance(5):
            # a view of a tensor this same node produces (anc(v) == s is allowed)
            v = self.add_view(c.pick(outputs), producer=k)
            outputs.append(v["id"])
        node["inputs"] = inputs
        node["outputs"] = outputs
        if c.chance(5) and not inputs:
            del node["inputs"]
        if c.chance(5) and not outputs:
            del node["outputs"]
        if phase is not None:
            node["phase"] = phase
        elif c.chance(4):
            node["phase"] = c.pick(("forward", "backward", None))
        self.nodes.append(node)
        self.pool.extend(o for o in outputs)
        # an unproduced view of something already readable
        if self.pool and c.chance(6):
            v = self.add_view(c.pick(self.pool[-4:]))
            self.pool.append(v["id"])

    def node_deps(self):
        """For each construction index, the construction indices it depends on."""
        deps = []
        for k, node in enumerate(self.nodes):
            d = set()
            for t in node.get("inputs", ()):
                inf = self.info[t]
                if inf["prod"] is not None:
                    d.add(inf["prod"])
                for a in inf["anc"]:
                    if self.info[a]["prod"] is not None:
                        d.add(self.info[a]["prod"])
            for t in node.get("outputs", ()):
                for a in self.info[t]["anc"]:
                    if self.info[a]["prod"] is not None:
                        d.add(self.info[a]["prod"])
            d.discard(k)
            deps.append(d)
        return deps

    def build(self):
        c = self.c
        n = self.n
        # unproduced tensors
        for _ in range(c.int(1, 3)):
            self.pool.append(self.add_storage("input", self.size(), hint="x")["id"])
        n_params = c.int(0, 2 + min(n // 10, 12))
        for _ in range(n_params):
            self.pool.append(self.add_storage("parameter", self.size(), hint="w")["id"])
        if self.training or c.chance(10):
            for _ in range(c.int(0, 2)):
                self.pool.append(self.add_storage("optimizer_state", self.size(), hint="m")["id"])
        for role in ("activation", "gradient", "output", "activation"):
            if c.chance(8):   # unproduced non-input roles: live from step 0
                self.pool.append(self.add_storage(role, self.size())["id"])
        if self.pool and c.chance(20):
            # unproduced views of unproduced bases (weight slices, ...), views of views
            for _ in range(c.int(1, 3)):
                v = self.add_view(c.pick(self.pool))
                self.pool.append(v["id"])
        n_fwd = max(1, (n * c.int(40, 80)) // 100) if self.training else n
        for k in range(n):
            if self.training:
                phase = "forward" if k < n_fwd else "backward"
            else:
                phase = None
            self.add_node(k, phase)
        # unused, unproduced tensors occasionally
        if c.chance(5):
            self.add_storage(c.pick(ROLES), self.size())

        doc = {"format": "emel.graph/1"}
        if c.chance(70):
            doc["name"] = c.pick(("g", "random-graph", "ü-graph", ""))
        if c.chance(20):
            doc["source"] = "hypothesis graphgen"
        tensors = self.tensors
        k = c.int(0, 99)
        if k < 15:
            # document order must not matter (only id order breaks ties)
            tensors = tensors[::-1]
        elif k < 45:
            tensors = c.shuffle(tensors)
        ids = [t["id"] for t in self.tensors]
        # must_not_alias pairs (never two intersecting ranges of one root)
        if c.chance(18):
            by_id = {t["id"]: t for t in self.tensors}
            for _ in range(c.int(1, 2 + len(ids) // 8)):
                a = c.pick(ids)
                # partners: mostly tensors created close by (likely same arena, live together)
                j = ids.index(a) + c.int(-4, 4)
                b = ids[j] if 0 <= j < len(ids) and c.chance(70) else c.pick(ids)
                ia, ib = self.info[a], self.info[b]
                if a == b:
                    continue
                if ia["root"] == ib["root"]:
                    lo1, hi1 = ia["root_off"], ia["root_off"] + ia["size"]
                    lo2, hi2 = ib["root_off"], ib["root_off"] + ib["size"]
                    if lo1 < hi2 and lo2 < hi1 and ia["size"] and ib["size"]:
                        continue
                ta = by_id[a]
                if not isinstance(ta.get("must_not_alias"), list):
                    ta["must_not_alias"] = []
                ta["must_not_alias"].append(b)
        doc["tensors"] = tensors
        nodes = self.nodes
        if c.chance(30):
            order = self._random_topo_order()
            if c.chance(60):
                nodes = c.shuffle(nodes)
            doc["execution_order"] = [self.nodes[k]["id"] for k in order]
        elif c.chance(3):
            doc["execution_order"] = None
        doc["nodes"] = nodes
        if c.chance(30):
            doc["outputs"] = [c.pick(ids) for _ in range(c.int(0, 3))]
        return doc

    def _random_topo_order(self):
        c = self.c
        deps = self.node_deps()
        n = len(deps)
        users = [[] for _ in range(n)]
        indeg = [0] * n
        for k, d in enumerate(deps):
            indeg[k] = len(d)
            for j in d:
                users[j].append(k)
        ready = [k for k in range(n) if indeg[k] == 0]
        order = []
        while ready:
            # prefer the last ready node (shrinks towards a different order than
            # construction order: LIFO), sometimes any
            idx = len(ready) - 1 - (c.int(0, len(ready) - 1) if c.chance(40) else 0)
            k = ready.pop(idx)
            order.append(k)
            for u in users[k]:
                indeg[u] -= 1
                if indeg[u] == 0:
                    ready.append(u)
        if len(order) != n:
            raise AssertionError("generator bug: construction order is not topological")
        return order


def _node_count(c):
    k = c.int(0, 99)
    if k < 55:
        return c.int(1, 8)
    if k < 80:
        return c.int(9, _SMALL)
    if k < 93:
        return c.int(_SMALL + 1, 120)
    return c.int(121, _MAX_NODES)


@st.composite
def graphs(draw, max_nodes=_MAX_NODES):
    """A random valid ``emel.graph/1`` dict with 1..max_nodes nodes."""
    c0 = _Draws(draw)
    n = min(_node_count(c0), max_nodes)
    if n <= _SMALL:
        c = c0
    else:
        c = _Rand(draw(st.integers(0, 2**32 - 1)))
    return _Builder(c, n).build()


# --------------------------------------------------------------------------
# plan kwargs
# --------------------------------------------------------------------------
@st.composite
def plan_kwargs(draw, include_mode=True):
    """kwargs for ``plan()``: mode, alignment, arenas (no capacity that can fail)."""
    c = _Draws(draw)
    kw = {}
    if include_mode:
        kw["mode"] = c.pick(MODES)
    kw["alignment"] = c.pick((None, 1, 8, 32, 128, 256))
    if c.chance(60):
        arenas = {}
        names = ARENA_NAMES + _CONFIG_ONLY_ARENAS
        for _ in range(c.int(1, 4)):
            name = c.pick(names)
            cfg = {}
            if c.chance(75):
                cfg["alignment_bytes"] = _pow2_up_to(c, 12)
            if c.chance(50):
                cfg["page_size"] = c.pick((0, 1, 4096, 65536, 2 * 1024 * 1024))
            if c.chance(8):
                cfg["persistent"] = c.chance(50)
            if c.chance(5):
                cfg["capacity_bytes"] = 1 << 62   # never reached by generated sizes
            arenas[name] = cfg
        kw["arenas"] = arenas
    if kw["alignment"] is None and c.chance(50):
        del kw["alignment"]
    return kw


def graph_and_kwargs(max_nodes=_MAX_NODES):
    return st.tuples(graphs(max_nodes=max_nodes), plan_kwargs())


# --------------------------------------------------------------------------
# corruptions: exactly one defect, with the code algorithm.md assigns to it
# --------------------------------------------------------------------------
def _copy(doc):
    import copy
    return copy.deepcopy(doc)


def _views(doc):
    return [t for t in doc["tensors"] if t.get("view_of") is not None]


def _sizes(doc):
    """id -> size (bytes) for a valid document."""
    return {t["id"]: tensor_size(t) for t in doc["tensors"]}


def _exec_order(doc):
    eo = doc.get("execution_order")
    return list(eo) if eo is not None else [n["id"] for n in doc["nodes"]]


def _c_unknown_input(c, doc):
    node = c.pick(doc["nodes"])
    ins = list(node.get("inputs") or [])
    ins.insert(c.int(0, len(ins)), "no-such-tensor")
    node["inputs"] = ins
    return "INVALID_IR_SHAPES"


def _c_unknown_output(c, doc):
    node = c.pick(doc["nodes"])
    outs = list(node.get("outputs") or [])
    outs.append("no-such-output")
    node["outputs"] = outs
    return "INVALID_IR_SHAPES"


def _c_duplicate_tensor(c, doc):
    t = _copy(c.pick(doc["tensors"]))
    doc["tensors"].insert(c.int(0, len(doc["tensors"])), t)
    return "INVALID_IR_SHAPES"


def _c_duplicate_node(c, doc):
    node = _copy(c.pick(doc["nodes"]))
    node["outputs"] = []   # keep production unique: only the node id repeats
    doc["nodes"].append(node)
    if doc.get("execution_order") is not None:
        doc["execution_order"].append(node["id"])
    return "INVALID_IR_SHAPES"


def _c_negative_dim(c, doc):
    t = c.pick(doc["tensors"])
    shape = list(t["shape"])
    if shape:
        shape[c.int(0, len(shape) - 1)] = -c.int(1, 3)
    else:
        shape = [-1]
    t["shape"] = shape
    return "INVALID_IR_SHAPES"


def _c_view_outside_base(c, doc):
    views = _views(doc)
    if not views:
        return None
    sizes = _sizes(doc)
    v = c.pick(views)
    base = v["view_of"]["base"]
    old = v["view_of"].get("byte_offset") or 0
    need = sizes[base] - sizes[v["id"]] - old + 1   # > 0 moves it past the end
    m = max(1, -(-need // 4096))
    v["view_of"] = {"base": base, "byte_offset": old + 4096 * m}  # keeps root-offset alignments
    return "INVALID_IR_SHAPES"


def _c_reads_own_output(c, doc):
    nodes = [n for n in doc["nodes"] if n.get("outputs")]
    if not nodes:
        return None
    node = c.pick(nodes)
    ins = list(node.get("inputs") or [])
    ins.insert(c.int(0, len(ins)), c.pick(node["outputs"]))
    node["inputs"] = ins
    return "LIVENESS_CYCLE"


def _c_order_swapped(c, doc):
    order = _exec_order(doc)
    step = {nid: s for s, nid in enumerate(order)}
    by_id = {t["id"]: t for t in doc["tensors"]}
    prod = {}
    for n in doc["nodes"]:
        for o in n.get("outputs") or ():
            prod[o] = n["id"]

    def producers_needed(tid):
        out = []
        cur = tid
        seen = 0
        while cur is not None and seen < 10000:
            if cur in prod:
                out.append(prod[cur])
            vo = by_id[cur].get("view_of")
            cur = vo["base"] if vo is not None else None
            seen += 1
        return out

    pairs = []
    for n in doc["nodes"]:
        for t in n.get("inputs") or ():
            for p in producers_needed(t):
                if p != n["id"]:
                    pairs.append((p, n["id"]))
    if not pairs:
        return None
    p, q = c.pick(pairs)
    i, j = step[p], step[q]
    order[i], order[j] = order[j], order[i]
    doc["execution_order"] = order
    return "LIVENESS_CYCLE"


def _c_alignment_3(c, doc):
    t = c.pick(doc["tensors"])
    t["alignment"] = c.pick((3, 0, 6, 12, 4097))
    return "ALIGNMENT_VIOLATION"


def _c_dim_2_64(c, doc):
    t = c.pick(doc["tensors"])
    shape = list(t["shape"]) or [1]
    shape[c.int(0, len(shape) - 1)] = 2**64 + c.int(0, 5)
    t["shape"] = shape
    return "ALLOCATION_OVERFLOW"


def _c_huge_live_pair(c, doc):
    """A produced storage tensor grows to 2^63 bytes and its node gets a
    2^63-byte twin of the same role and arena: two tensors live together in one arena
    need 2^64 bytes, whatever the placement."""
    views = {t["id"] for t in _views(doc)}
    byid = {t["id"]: t for t in doc["tensors"]}
    nodes = [n for n in doc["nodes"] if any(o not in views for o in n.get("outputs") or ())]
    if not nodes:
        return None
    node = c.pick(nodes)
    t = byid[c.pick([o for o in node["outputs"] if o not in views])]
    t["shape"], t["dtype"] = [2**63], "uint8"
    t.pop("nbytes", None)
    twin = {"id": t["id"] + "~twin", "shape": [2**63], "dtype": "uint8", "role": t["role"]}
    if t.get("arena") is not None:
        twin["arena"] = t["arena"]
    doc["tensors"].insert(c.int(0, len(doc["tensors"])), twin)
    node["outputs"] = list(node["outputs"]) + [twin["id"]]
    return "ALLOCATION_OVERFLOW"


def _c_self_base(c, doc):
    t = c.pick(doc["tensors"])
    t["view_of"] = {"base": t["id"], "byte_offset": 0}
    return "INVALID_IR_SHAPES"


def _c_unknown_dtype(c, doc):
    t = c.pick(doc["tensors"])
    t["dtype"] = "q5_1"
    t.pop("nbytes", None)
    return "INVALID_IR_SHAPES"


def _c_bad_role(c, doc):
    t = c.pick(doc["tensors"])
    t["role"] = c.pick(("weights", "Activation", "", 3))
    return "INVALID_IR_SHAPES"


def _c_produced_twice(c, doc):
    nodes = [n for n in doc["nodes"] if n.get("outputs")]
    if not nodes:
        return None
    a = c.pick(nodes)
    b = c.pick(doc["nodes"])
    outs = list(b.get("outputs") or [])
    outs.append(c.pick(a["outputs"]))
    b["outputs"] = outs
    return "INVALID_IR_SHAPES"


CORRUPTIONS = {
    "unknown_input": _c_unknown_input,
    "unknown_output": _c_unknown_output,
    "duplicate_tensor": _c_duplicate_tensor,
    "duplicate_node": _c_duplicate_node,
    "negative_dim": _c_negative_dim,
    "view_outside_base": _c_view_outside_base,
    "reads_own_output": _c_reads_own_output,
    "order_swapped": _c_order_swapped,
    "alignment_3": _c_alignment_3,
    "dim_2_64": _c_dim_2_64,
    "huge_live_pair": _c_huge_live_pair,
    "self_base": _c_self_base,
    "unknown_dtype": _c_unknown_dtype,
    "bad_role": _c_bad_role,
    "produced_twice": _c_produced_twice,
}


@st.composite
def corrupted_graphs(draw, max_nodes=60):
    """(kind, corrupted graph dict, expected code) with exactly one defect.

    When the drawn defect cannot be made in the drawn graph (no view to move,
    no dataflow edge to reverse) the next applicable kind is used instead.
    """
    doc = draw(graphs(max_nodes=max_nodes))
    c = _Draws(draw)
    kinds = list(CORRUPTIONS)
    start = c.int(0, len(kinds) - 1)
    for i in range(len(kinds)):
        kind = kinds[(start + i) % len(kinds)]
        d = _copy(doc)
        code = CORRUPTIONS[kind](c, d)
        if code is not None:
            return kind, d, code
    raise AssertionError("unreachable: unknown_input always applies")


@st.composite
def multi_corrupted_graphs(draw, max_nodes=30):
    """(kinds, graph dict) with 2..4 defects applied one after the other.

    No expected code: the implementations must agree on which defect is
    reported first (phase order, document order) -- code and blamed ids.
    """
    doc = draw(graphs(max_nodes=max_nodes))
    c = _Draws(draw)
    kinds = []
    names = list(CORRUPTIONS)
    for _ in range(c.int(2, 4)):
        kind = c.pick(names)
        trial = _copy(doc)
        try:
            code = CORRUPTIONS[kind](c, trial)
        except Exception:   # a defect that cannot be applied on top of another one
            code = None
        if code is not None:
            doc = trial
            kinds.append(kind)
    return kinds, doc


# Bad ``arenas=`` / ``alignment=`` arguments: (kwargs patch, expected code or
# None when algorithm.md does not name the code).
CONFIG_CORRUPTIONS = {
    "alignment_bytes_3": ({"arenas": {"activations": {"alignment_bytes": 3}}}, "ALIGNMENT_VIOLATION"),
    "alignment_bytes_0": ({"arenas": {"scratch": {"alignment_bytes": 0}}}, "ALIGNMENT_VIOLATION"),
    "alignment_bytes_96": ({"arenas": {"parameters": {"alignment_bytes": 96}}}, "ALIGNMENT_VIOLATION"),
    "page_size_negative": ({"arenas": {"activations": {"page_size": -1}}}, "INVALID_IR_SHAPES"),
    "capacity_negative": ({"arenas": {"gradients": {"capacity_bytes": -5}}}, "INVALID_IR_SHAPES"),
    "capacity_not_int": ({"arenas": {"gradients": {"capacity_bytes": "1GB"}}}, "INVALID_IR_SHAPES"),
    "page_size_bool": ({"arenas": {"activations": {"page_size": True}}}, "INVALID_IR_SHAPES"),
    "unknown_key": ({"arenas": {"activations": {"capacity": 10}}}, "INVALID_IR_SHAPES"),
    "persistent_not_bool": ({"arenas": {"activations": {"persistent": "yes"}}}, None),
    "alignment_kwarg_3": ({"alignment": 3}, None),
}


@st.composite
def corrupted_configs(draw, max_nodes=20):
    """(kind, graph, kwargs, expected code): a bad arena configuration; the
    graph is valid or, sometimes, broken too (the configuration is checked
    first, so its code wins)."""
    c = _Draws(draw)
    kind = c.pick(sorted(CONFIG_CORRUPTIONS))
    patch, expected = CONFIG_CORRUPTIONS[kind]
    if c.chance(30):
        _, doc, _ = draw(corrupted_graphs(max_nodes=max_nodes))
    else:
        doc = draw(graphs(max_nodes=max_nodes))
    kw = draw(plan_kwargs())
    kw = _copy(kw)
    for key, value in patch.items():
        if key == "arenas":
            arenas = dict(kw.get("arenas") or {})
            for name, cfg in value.items():
                merged = dict(arenas.get(name) or {})
                merged.update(cfg)
                arenas[name] = merged
            kw["arenas"] = arenas
        else:
            kw[key] = value
    return kind, doc, kw, expected


_HUGE = (2**63, 2**64 - 1, 2**62 + 1, 2**64 - 4096, 2**63 - 1, 2**32 * 3)


@st.composite
def huge_cases(draw, max_nodes=20):
    """(graph, kwargs) near the 64-bit limits: a few storage tensors with
    sizes close to 2^64, dims whose product overflows, huge alignments.
    Valid or not, the two implementations must do the same thing (the same
    plan, or the same PlanError code and blamed ids)."""
    doc = draw(graphs(max_nodes=max_nodes))
    kw = _copy(draw(plan_kwargs()))
    c = _Draws(draw)
    storage = [t for t in doc["tensors"] if t.get("view_of") is None]
    for _ in range(c.int(1, 4)):
        t = c.pick(storage)
        k = c.int(0, 9)
        if k < 6:
            t["dtype"] = "q4_0"
            t["nbytes"] = c.pick(_HUGE)
        elif k < 8:
            t["dtype"] = c.pick(_DTYPES)
            t["shape"] = [c.pick((2**32, 2**33, 2**31 + 1)), c.pick((2**31, 2**32, 3))]
            t.pop("nbytes", None)
        else:
            t["alignment"] = 1 << c.int(40, 63)
    if c.chance(30):
        arenas = dict(kw.get("arenas") or {})
        arenas[c.pick(ARENA_NAMES)] = {"alignment_bytes": 1 << c.int(32, 63)}
        kw["arenas"] = arenas
    return doc, kw


# --------------------------------------------------------------------------
# self-check of the generator (used by tests and when run as a script)
# --------------------------------------------------------------------------
def check_generated_graph(doc):
    """Assert that ``doc`` is a valid graph by the rules of algorithm.md §1."""
    assert doc["format"] == "emel.graph/1"
    tensors = doc["tensors"]
    ids = [t["id"] for t in tensors]
    assert len(ids) == len(set(ids)), "duplicate tensor ids"
    by_id = {t["id"]: t for t in tensors}
    for t in tensors:
        assert isinstance(t["id"], str) and t["id"]
        assert all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**64 for d in t["shape"])
        assert t["role"] in ROLES
        al = t.get("alignment")
        if al is not None:
            assert al >= 1 and al & (al - 1) == 0
        if t["dtype"] not in DTYPE_SIZES:
            assert t.get("nbytes") is not None
        elif t.get("nbytes") is not None and t.get("view_of") is None:
            assert t["nbytes"] == tensor_size({"shape": t["shape"], "dtype": t["dtype"]})
        for m in t.get("must_not_alias") or ():
            assert m in by_id
    # views: inside base, chains end at storage, alignment divides root offset
    root, root_off = {}, {}
    for t in tensors:
        cur, off, seen = t, 0, set()
        while cur.get("view_of") is not None:
            assert cur["id"] not in seen, "view loop"
            seen.add(cur["id"])
            vo = cur["view_of"]
            base = by_id[vo["base"]]
            bo = vo.get("byte_offset") or 0
            assert bo + tensor_size(cur) <= tensor_size(base), (cur["id"], "outside base")
            off += bo
            cur = base
        root[t["id"]], root_off[t["id"]] = cur["id"], off
        if t.get("view_of") is not None and t.get("alignment") is not None:
            assert off % t["alignment"] == 0
    # must_not_alias on one root never intersect
    for t in tensors:
        for m in t.get("must_not_alias") or ():
            if root[t["id"]] == root[m]:
                a0, a1 = root_off[t["id"]], root_off[t["id"]] + tensor_size(t)
                b0, b1 = root_off[m], root_off[m] + tensor_size(by_id[m])
                assert not (a0 < a1 and b0 < b1 and a0 < b1 and b0 < a1)
    # nodes, production, order
    node_ids = [n["id"] for n in doc["nodes"]]
    assert len(node_ids) == len(set(node_ids))
    prod = {}
    order = doc.get("execution_order")
    order = list(order) if order is not None else node_ids
    assert sorted(order) == sorted(node_ids)
    step = {nid: s for s, nid in enumerate(order)}
    by_node = {n["id"]: n for n in doc["nodes"]}
    for n in doc["nodes"]:
        for o in n.get("outputs") or ():
            assert o in by_id
            assert o not in prod, ("produced twice", o)
            prod[o] = step[n["id"]]
        for i in n.get("inputs") or ():
            assert i in by_id

    def anc(tid):
        best = None
        cur = by_id[tid]
        while cur.get("view_of") is not None:
            cur = by_id[cur["view_of"]["base"]]
            p = prod.get(cur["id"])
            if p is not None:
                best = p if best is None else max(best, p)
        return best

    for s, nid in enumerate(order):
        n = by_node[nid]
        for i in n.get("inputs") or ():
            if i in prod:
                assert prod[i] < s, ("read before produced", nid, i)
            a = anc(i)
            if a is not None:
                assert a < s, ("view read before its base is produced", nid, i)
        for o in n.get("outputs") or ():
            if by_id[o].get("view_of") is not None:
                a = anc(o)
                if a is not None:
                    assert a <= s, ("view produced before its base", nid, o)
    for o in doc.get("outputs") or ():
        assert o in by_id
    return True


# --------------------------------------------------------------------------
# a greedy graph minimizer, for turning a failing example into a reproducer
# --------------------------------------------------------------------------
def _is_valid(doc):
    try:
        return check_generated_graph(doc)
    except (AssertionError, KeyError, TypeError):
        return False


def _drop_node(doc, nid):
    d = _copy(doc)
    d["nodes"] = [n for n in d["nodes"] if n["id"] != nid]
    if d.get("execution_order") is not None:
        d["execution_order"] = [x for x in d["execution_order"] if x != nid]
    return d


def _drop_tensor(doc, tid):
    d = _copy(doc)
    d["tensors"] = [t for t in d["tensors"] if t["id"] != tid]
    for n in d["nodes"]:
        for key in ("inputs", "outputs"):
            if n.get(key):
                n[key] = [x for x in n[key] if x != tid]
    for t in d["tensors"]:
        if t.get("must_not_alias"):
            t["must_not_alias"] = [x for x in t["must_not_alias"] if x != tid]
    if d.get("outputs"):
        d["outputs"] = [x for x in d["outputs"] if x != tid]
    return d


_OPTIONAL_TENSOR_KEYS = ("comment", "must_not_alias", "can_inplace", "saved_for_backward",
                         "alignment", "arena", "nbytes")


def minimize_graph(doc, still_fails, max_rounds=50):
    """Greedily remove nodes, tensors, list entries and optional fields from
    ``doc`` while it stays valid and ``still_fails(doc)`` stays true."""
    def ok(d):
        if not _is_valid(d):
            return False
        try:
            return bool(still_fails(d))
        except Exception:
            return False

    assert ok(doc), "the starting document does not fail"
    for _ in range(max_rounds):
        before = json_size(doc)
        # whole nodes, last first (later nodes are more often removable)
        for nid in [n["id"] for n in reversed(doc["nodes"])]:
            d = _drop_node(doc, nid)
            if ok(d):
                doc = d
        # whole tensors (views first, then storage)
        for tid in [t["id"] for t in reversed(doc["tensors"])]:
            d = _drop_tensor(doc, tid)
            if ok(d):
                doc = d
        # list entries of nodes
        for i in range(len(doc["nodes"])):
            for key in ("inputs", "outputs"):
                j = 0
                while j < len(doc["nodes"][i].get(key) or []):
                    d = _copy(doc)
                    del d["nodes"][i][key][j]
                    if ok(d):
                        doc = d
                    else:
                        j += 1
            if doc["nodes"][i].get("phase") is not None:
                d = _copy(doc)
                del d["nodes"][i]["phase"]
                if ok(d):
                    doc = d
        # optional tensor fields, and simpler shapes
        for i in range(len(doc["tensors"])):
            for key in _OPTIONAL_TENSOR_KEYS:
                if key in doc["tensors"][i]:
                    d = _copy(doc)
                    del d["tensors"][i][key]
                    if ok(d):
                        doc = d
            t = doc["tensors"][i]
            if t.get("view_of") is None and t["dtype"] in DTYPE_SIZES:
                size = tensor_size(t)
                if size % 4 == 0 and (t["dtype"] != "float32" or len(t["shape"]) != 1):
                    d = _copy(doc)
                    d["tensors"][i].update(shape=[size // 4], dtype="float32")
                    d["tensors"][i].pop("nbytes", None)
                    if ok(d):
                        doc = d
        for key in ("execution_order", "outputs", "source", "name"):
            if key in doc:
                d = _copy(doc)
                del d[key]
                if ok(d):
                    doc = d
        if json_size(doc) == before:
            break
    return doc


def json_size(doc):
    import json
    return len(json.dumps(doc))


def past_int64_doc():
    """x -> big (2^63 + 5 bytes) -> y (2^62 bytes): sizes whose sums leave
    int64 (issue 31: peak() wrapped them, LiveBytes raised OverflowError)."""
    def tensor(tid, n, role="activation"):
        return {"id": tid, "shape": [n], "dtype": "uint8", "role": role}
    return {"format": "emel.graph/1", "name": "huge",
            "tensors": [tensor("x", 8, "input"), tensor("big", 2**63 + 5), tensor("y", 2**62, "output")],
            "nodes": [{"id": "expand", "op": "expand", "inputs": ["x"], "outputs": ["big"]},
                      {"id": "reduce", "op": "sum", "inputs": ["big"], "outputs": ["y"]}]}
