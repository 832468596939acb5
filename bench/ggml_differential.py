"""emel.memory.ggml against llama.cpp's own ggml-alloc, on seeded random graphs.

Compiles bench/ggml_harness.cpp against a built llama.cpp tree (its libggml-base), generates
random graphs family by family, runs each through the real ggml-alloc (the harness, one process
a graph, so an abort costs one graph) and through emel.memory.ggml, and compares everything the
two report: ggml_build_forward_expand's node and leaf order, reserve's answer, reserve_n_size's
sizes, and at every alloc_graph needs_realloc, the answer, each buffer id's size, the chunk sizes
of each buffer and every tensor's (buffer type, chunk, offset).

Each graph ends in one column: agree; differ (a bug on one side, or a difference nobody
documented: the script exits 1 and prints the one command that reruns that graph); both refuse
(ggml aborts at the step where emel raises PlanError); deliberate, where docs/ggml.md defines what
ggml leaves undefined: ggml crashes or aborts where emel answers, or ggml returns a wrapped or
meaningless number where emel raises PlanError. A graph is counted there only when its input has
the trait (below, DELIBERATE) and the outcome is the one documented for it; anything else is a
difference. The family ggml-undefined makes such graphs on purpose; the others meet them by chance.

    python bench/ggml_differential.py                          # every family, 1000 graphs each (~2 min)
    python bench/ggml_differential.py --graphs 1000 --families small,clamp,rewired
    python bench/ggml_differential.py --families clamp --seed 417 --graphs 1 --show   # one graph, in full
    python bench/ggml_differential.py --llama-cpp PATH/vendor/llama.cpp                # a built tree
    python bench/ggml_differential.py --download /work/llamacpp      # fetch the sdist, build, then run

The llama.cpp tree: --llama-cpp, else --download DIR (bench/llamacpp_ground_truth.py's download
and build: the llama-cpp-python sdist's vendored llama.cpp; an already unpacked one in DIR is
reused), else $EMEL_LLAMA_CPP, else the newest llamacpp/llama_cpp_python-*/vendor/llama.cpp beside
the repository (where docs/gguf.md downloads it). Graph k of a family is seeded by
(family, --seed + k) alone, so a graph reruns the same with --seed SEED --graphs 1 (--show prints
its harness input and every difference, and writes no JSON unless --out is given).
"""

from __future__ import annotations

import argparse
import copy
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

from _common import print_table, write_json

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
HARNESS_SRC = HERE / "ggml_harness.cpp"

SIZE_MAX = 2**64 - 1
TYPE_BYTES = {"i8": 1, "i16": 2, "f16": 2, "f32": 4}
#: Ops ggml_op_can_inplace lists (a sample), ops it does not, and view ops.
INPLACE = ["ADD", "MUL", "SCALE", "UNARY", "SOFT_MAX", "RMS_NORM", "SUB", "DIV", "ROPE", "SQR"]
NOT_INPLACE = ["MUL_MAT", "CONCAT", "PAD", "MEAN", "CPY", "GET_ROWS", "CONT", "SUM_ROWS", "NORM"]
VIEW_OPS = ["VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"]
INPUT, OUTPUT, HAS_DATA = 1, 2, 4

FAMILIES = ("small", "large", "multi", "realloc", "rewired", "hand-built", "raw-output", "zero", "huge",
            "clamp", "tallocr", "alloc-ctx", "ggml-undefined")

#: What ggml leaves undefined and emel defines (docs/ggml.md); the key names the trait of the input.
DELIBERATE = {
    "reserve_size_then_alloc": "alloc_graph right after reserve_n_size: ggml binds into the buffers "
                               "reserve_n_size freed (segfault); emel re-reserves",
    "zero_byte_chunk": "a 0-byte chunk holding tensors: ggml binds them at NULL and asserts; emel places them",
    "unlisted_sources": "hand-built node/leaf lists whose sources are in neither list: ggml's hash set, "
                        "sized from the lists, overflows (abort); emel plans",
    "ctx_view_after_oversize": "alloc_ctx_tensors: views after a tensor larger than max_size at the end of the "
                               "context; ggml never binds them, emel does",
    "ctx_nothing_to_allocate": "alloc_ctx_tensors on a context with nothing to allocate (only pre-allocated "
                               "tensors and views): ggml returns no buffer and never binds the views, emel does",
    "alignment_not_pow2": "an alignment that is not a power of two: ggml's padding assumes one; emel "
                          "raises PlanError(ALIGNMENT_VIOLATION)",
    "total_past_2_64": "buffer totals past 2^64: ggml's size_t sum wraps; emel raises "
                       "PlanError(ALLOCATION_OVERFLOW)",
    "leaf_outgrew_reserve": "alloc_graph with a leaf that grew since the reserve (or lost its data): ggml's "
                            "needs_realloc skips leafs, so it binds the leaf at its old place, over the "
                            "next tensor (or aborts past the buffer's end); emel raises PlanError(ARENA_TOO_SMALL)",
}
#: How ggml fails where it crashes: exit status, the file of its abort message, one of the messages.
GGML_FAILURE = {
    "reserve_size_then_alloc": (-11, None, ()),  # SIGSEGV: binding into a NULL vbuffer
    "zero_byte_chunk": (-6, "ggml-backend.cpp", ("GGML_ASSERT(tensor->buffer == NULL)",
                                                 "GGML_ASSERT(tensor->view_src->data != NULL)")),
    "unlisted_sources": (-6, "ggml-impl.h", ("fatal error",)),  # ggml_hash_find_or_insert: the set is full
}


def nbytes(t: dict) -> int:
    return TYPE_BYTES[t["type"]] * t["ne0"] * t["ne1"]


# ------------------------------------------------------------------ random graphs

class GraphMaker:
    """One random ggml graph: leafs (inputs, weights with data), compute nodes reading earlier
    tensors, views (ggml_view_*, ggml_*_inplace, ggml_view_tensor), outputs; tensors are dicts
    (name, type, ne0, ne1, op, flags, view_src, view_offs, buffer_id, srcs), view_src the root."""

    def __init__(self, rng: random.Random, n_nodes: int, alignment: int, big=False, huge=False, zero=False,
                 clamp=False, hand_built=False, raw_output_flags=False):
        self.rng, self.n_nodes, self.alignment = rng, n_nodes, alignment
        self.big, self.huge, self.zero, self.clamp = big, huge, zero, clamp
        self.hand_built, self.raw_output_flags = hand_built, raw_output_flags
        self.tensors: list[dict] = []
        self.by_name: dict[str, dict] = {}
        self.shapes: list[dict] = []  # earlier shapes, reused so that layouts repeat (in-place needs it)

    def shape(self, like: dict | None = None) -> dict:
        r = self.rng
        if like is not None and r.random() < 0.55:
            return dict(type=like["type"], ne0=like["ne0"], ne1=like["ne1"])
        if self.shapes and r.random() < 0.3:
            return dict(r.choice(self.shapes))
        k = r.random()
        if self.huge and k > 0.93:
            n = r.choice([2**32 + r.randint(0, 999), 2**40 + 3, 2**33 * r.randint(1, 9), 2**62 // r.randint(1, 64)])
        elif k < 0.08:
            n = 0 if self.zero else 1
        elif k < 0.4:
            n = r.randint(1, 64)
        elif k < 0.6:
            n = self.alignment * r.randint(1, 8)
        elif k < 0.9:
            n = r.randint(65, 5000)
        else:
            n = r.randint(5000, 5_000_000 if self.big else 200_000)
        ne1 = 1
        if n > 1 and r.random() < 0.2:
            ne1 = next((d for d in (2, 3, 4, 8) if n % d == 0), 1)
            n //= ne1
        s = dict(type=r.choices(["i8", "f32", "i16", "f16"], [6, 2, 1, 1])[0], ne0=n, ne1=ne1)
        self.shapes.append(s)
        return s

    def add(self, **fields) -> dict:
        t = dict(name=f"t{len(self.tensors)}", op="NONE", flags=0, view_src="-", view_offs=0, buffer_id=0, srcs=[])
        t.update(fields)
        self.tensors.append(t)
        self.by_name[t["name"]] = t
        return t

    def root(self, t: dict) -> dict:
        return self.by_name[t["view_src"]] if t["view_src"] != "-" else t

    def pick_source(self) -> dict:
        """Mostly a recent tensor (short lifetimes), sometimes any earlier one."""
        r, n = self.rng, len(self.tensors)
        if r.random() < 0.6:
            return self.tensors[max(0, n - 1 - int(r.expovariate(0.5)))]
        return self.tensors[r.randrange(n)]

    def leaf(self, weights=(6, 2, 2)) -> dict:
        """An input (INPUT), a plain leaf, or a weight whose data is set outside the allocator."""
        return self.add(flags=self.rng.choices([INPUT, 0, HAS_DATA], weights)[0], **self.shape())

    def view(self) -> bool:
        r = self.rng
        parent = self.pick_source()
        root = self.root(parent)
        size = TYPE_BYTES[root["type"]]
        n_max = nbytes(parent) // size  # the view lies inside its parent, which lies inside the root
        if n_max == 0:
            return False
        ne0 = r.randint(1, n_max) if r.random() < 0.5 else n_max
        offs = (parent["view_offs"] if parent is not root else 0) + r.randint(0, n_max - ne0) * size
        if r.random() < 0.7:
            op, srcs = r.choice(VIEW_OPS), [parent["name"]]
        else:  # ggml_*_inplace: a view carrying an op that writes its parent
            op = r.choice(["ADD", "SCALE", "MUL", "CPY", "SET_ROWS"])
            srcs = [parent["name"]] + [self.pick_source()["name"] for _ in range(r.randint(0, 2))]
        self.add(op=op, type=root["type"], ne0=ne0, ne1=1, view_src=root["name"], view_offs=offs, srcs=srcs,
                 flags=OUTPUT if r.random() < 0.05 else 0)
        return True

    def compute_node(self) -> None:
        r = self.rng
        if r.random() < 0.55:
            op = r.choice((INPLACE + ["CLAMP"] * 3) if self.clamp else INPLACE)  # clamp: CLAMP in 3 of 13
        else:
            op = r.choice(NOT_INPLACE)
        srcs = [self.pick_source() for _ in range(r.choices([1, 2, 3, 4, 6], [4, 5, 2, 1, 0.3])[0])]
        names = [s["name"] for s in srcs]
        if len(names) > 1 and r.random() < 0.05:
            names.insert(r.randrange(1, len(names)), "-")  # a NULL source slot
        y = r.random()
        self.add(op=op, flags=OUTPUT if y < 0.1 else INPUT if y < 0.13 else 0, srcs=names, **self.shape(like=srcs[0]))

    def make(self) -> dict:
        r = self.rng
        for _ in range(r.randint(1, 4)):
            self.leaf()
        made = 0
        while made < self.n_nodes:
            x = r.random()
            if x < 0.06:
                self.leaf((5, 2, 2))
            elif x < 0.26:
                made += self.view()
            elif x < 0.29:  # ggml_view_tensor: an op NONE view of a whole root, a leaf
                root = self.root(self.pick_source())
                self.add(type=root["type"], ne0=nbytes(root) // TYPE_BYTES[root["type"]], ne1=1,
                         view_src=root["name"])
            else:
                self.compute_node()
                made += 1
        read = {s for t in self.tensors for s in t["srcs"]}
        sinks = [t for t in self.tensors if t["name"] not in read and t["op"] != "NONE"]
        if sinks and r.random() < 0.9:
            for t in sinks:
                if r.random() < 0.8:
                    t["flags"] |= OUTPUT
        expand = [t["name"] for t in sinks]
        r.shuffle(expand)
        for extra in [t["name"] for t in self.tensors if t["op"] != "NONE" and r.random() < 0.1]:
            expand.insert(r.randint(0, len(expand)), extra)
        graph = dict(tensors=self.tensors, expand=expand or [self.tensors[-1]["name"]])
        if self.hand_built:
            graph["nodes"], graph["leafs"] = self.hand_built_lists()
        if not self.raw_output_flags:  # ggml_set_output marks the view's root too (ggml.c)
            for t in self.tensors:
                if t["flags"] & OUTPUT and t["view_src"] != "-":
                    self.by_name[t["view_src"]]["flags"] |= OUTPUT
        return graph

    def hand_built_lists(self) -> tuple[list, list]:
        """Node and leaf lists as ggml-backend's scheduler builds them: nodes in creation order with
        some left out (reachable only as sources), op NONE dependency nodes, leafs partly listed."""
        r = self.rng
        nodes = [t["name"] for t in self.tensors if t["op"] != "NONE" and r.random() < 0.9]
        if len(self.tensors) > 2 and r.random() < 0.3:
            for _ in range(r.randint(1, 3)):
                dep = self.add(type="i8", ne0=r.choice([0, 1, 8] if self.zero else [1, 8]), ne1=1,
                               srcs=[self.pick_source()["name"] for _ in range(r.randint(1, 3))])
                nodes.insert(r.randint(0, len(nodes)), dep["name"])
        if r.random() < 0.2:  # an op NONE view listed as a node
            views = [t for t in self.tensors if t["op"] == "NONE" and t["view_src"] != "-"]
            if views:
                nodes.insert(r.randint(0, len(nodes)), r.choice(views)["name"])
        leafs = [t["name"] for t in self.tensors
                 if t["op"] == "NONE" and not t["srcs"] and t["name"] not in nodes and r.random() < 0.8]
        r.shuffle(leafs)
        return nodes, leafs


def forward_order(graph: dict) -> tuple[list, list]:
    """ggml_build_forward_expand's nodes and leafs (depth first over the sources in slot order;
    op NONE tensors are leafs), or the hand-built lists."""
    if "nodes" in graph:
        return list(graph["nodes"]), list(graph["leafs"])
    by_name = {t["name"]: t for t in graph["tensors"]}
    seen, nodes, leafs = set(), [], []

    def visit(name):
        if name in seen:
            return
        seen.add(name)
        for s in by_name[name]["srcs"]:
            if s != "-":
                visit(s)
        (leafs if by_name[name]["op"] == "NONE" else nodes).append(name)

    for name in graph["expand"]:
        visit(name)
    return nodes, leafs


def changed(graph: dict, rng: random.Random) -> dict:
    """The graph of a later batch: some tensors resized, weights gaining or losing their data, a node
    turned into a view of its first source's root or a view into a node, sometimes one node more."""
    r = rng
    g = copy.deepcopy(graph)
    k = r.random()
    if k < 0.25:
        return g
    roots = {t["view_src"] for t in g["tensors"]}
    for t in g["tensors"]:
        if t["op"] == "NONE" and t["view_src"] == "-" and r.random() < 0.1:
            t["flags"] ^= HAS_DATA
        if t["name"] not in roots and t["view_src"] == "-" and r.random() < 0.25:
            # ggml's ne0 is an int64_t: at most 2^62 here
            t["ne0"] = min(max(1, int(t["ne0"] * r.choice([0.5, 0.9, 1.1, 2.0]))), 2**62)
    by_name = {t["name"]: t for t in g["tensors"]}
    for t in g["tensors"]:
        if t["op"] == "NONE" or r.random() > 0.08:
            continue
        if t["view_src"] == "-" and t["srcs"] and t["srcs"][0] != "-" and t["name"] not in roots:
            parent = by_name[t["srcs"][0]]
            root = by_name[parent["view_src"]] if parent["view_src"] != "-" else parent
            if nbytes(t) <= nbytes(root):
                t["view_src"], t["view_offs"] = root["name"], 0
        elif t["view_src"] != "-" and t["op"] in ("ADD", "SCALE", "MUL", "VIEW", "RESHAPE"):
            t["view_src"], t["view_offs"] = "-", 0
    if k > 0.85 and "nodes" not in g:
        last = g["tensors"][-1]
        g["tensors"].append(dict(name=f"t{len(g['tensors'])}", op="SCALE", flags=OUTPUT, view_src="-", view_offs=0,
                                 buffer_id=0, srcs=[last["name"]], type=last["type"], ne0=last["ne0"], ne1=last["ne1"]))
        g["expand"].append(g["tensors"][-1]["name"])
    return g


def rewired(graph: dict, rng: random.Random) -> dict:
    """The same node and leaf lists (so needs_realloc is false), 1-byte tensors, and sources
    rewired to other earlier plain tensors: alloc_graph then binds each tensor from the records of
    the last reserve, where a tensor named by several records must keep the first (ggml binds once)."""
    g = copy.deepcopy(graph)
    nodes, leafs = forward_order(graph)
    by_name = {t["name"]: t for t in g["tensors"]}
    position = {t["name"]: i for i, t in enumerate(g["tensors"])}
    for t in g["tensors"]:
        t["type"], t["ne0"], t["ne1"] = "i8", 1, 1
        if t["view_src"] != "-":
            t["view_offs"] = 0

    def plain(name):
        return by_name[name]["view_src"] == "-" and not by_name[name]["flags"] & HAS_DATA

    seen = list(leafs)
    for name in nodes:
        t = by_name[name]
        for j, s in enumerate(t["srcs"]):
            if s != "-" and plain(s) and rng.random() < 0.5:
                earlier = [x for x in seen if plain(x) and position[x] < position[name]]
                if earlier:
                    t["srcs"][j] = rng.choice(earlier)
        seen.append(name)
    g["nodes"], g["leafs"] = nodes, leafs
    return g


# ------------------------------------------------------------------ cases by family

def graph_case(family: str, rng: random.Random) -> dict:
    """A gallocr case: buffer types, the gallocr's list of them, graphs, and the calls in order."""
    r = rng
    n_nodes = {"large": (60, 200), "multi": (5, 60), "realloc": (5, 40), "rewired": (5, 40),
               "hand-built": (5, 40)}.get(family, (5, 30))
    n_types = r.randint(2, 3) if family == "multi" else 1
    if family == "multi" and r.random() < 0.2:  # a big graph over up to four buffer types
        n_nodes, n_types = (60, 200), r.randint(2, 4)
    alignment = r.choice([1, 2, 4, 8, 16, 32, 64, 128, 256])
    maker = GraphMaker(r, r.randint(*n_nodes), alignment, big=family == "large", huge=family == "huge",
                       zero=family == "zero", clamp=family == "clamp", hand_built=family == "hand-built",
                       raw_output_flags=family == "raw-output")
    g1 = maker.make()
    total = sum(nbytes(t) for t in g1["tensors"])
    x = r.random()  # max_size: unlimited, tiny, or a fraction of the graph (several chunks)
    max_size = SIZE_MAX if x < 0.35 else r.randint(1, 4096) if x < 0.55 else max(1, int(total * r.uniform(0.05, 0.6)))
    types, galloc = [(alignment, max_size)], [0]
    if n_types > 1:
        for _ in range(n_types - 1):
            types.append((r.choice([1, 4, 8, 32, 64, 128, 256]),
                          SIZE_MAX if r.random() < 0.5 else max(1, int(total * r.uniform(0.05, 0.6)))))
        galloc = list(range(n_types))
        if r.random() < 0.3:  # one buffer type twice: one shared buffer
            galloc.append(r.randrange(n_types))
            r.shuffle(galloc)
        for t in g1["tensors"]:
            t["buffer_id"] = r.randrange(len(galloc))
    use_ids = int(n_types > 1)
    steps = []
    if family in ("realloc", "rewired", "hand-built") or r.random() < 0.8:
        steps.append(["reserve", "g1", use_ids])
    if family != "rewired" and r.random() < 0.15:
        steps.append(["reserve_size", "g1", use_ids])
        steps.append(["reserve", "g1", use_ids])  # alloc_graph right after it is ggml-undefined (see DELIBERATE)
    steps.append(["alloc", "g1"])
    graphs = {"g1": g1}
    if family == "rewired":
        graphs["g2"] = rewired(g1, r)
        steps.append(["alloc", "g2"])
    elif family in ("realloc", "multi", "hand-built") or r.random() < 0.3:
        if r.random() < 0.8:
            g2 = changed(g1, r)
        else:  # another graph altogether
            g2 = GraphMaker(r, maker.n_nodes, alignment, huge=maker.huge, zero=maker.zero, clamp=maker.clamp,
                            hand_built=maker.hand_built, raw_output_flags=maker.raw_output_flags).make()
            for t in g2["tensors"]:
                t["buffer_id"] = r.randrange(len(galloc))
        graphs["g2"] = g2
        steps.append(["alloc", "g2"])
        if n_types > 1 or r.random() < 0.5:
            steps += [["reserve", "g2", use_ids], ["alloc", "g2"]]
    return dict(mode="graph", buffer_types=types, galloc=galloc, graphs=graphs, steps=steps)


def random_weight_shape(r: random.Random) -> tuple[str, int]:
    k = r.random()
    return (r.choice(["i8", "i8", "f32", "f16"]),
            r.randint(1, 16) if k < 0.4 else r.randint(1, 3000) if k < 0.9 else r.randint(3000, 100_000))


def tallocr_case(rng: random.Random) -> dict:
    """ggml_tallocr: tensors one after another in a buffer of 0.5x to 2.5x their total (abort when full)."""
    r = rng
    tensors = [(f"w{i}",) + random_weight_shape(r) for i in range(r.randint(1, 30))]
    total = sum(TYPE_BYTES[t] * n for _, t, n in tensors)
    return dict(mode="tallocr", alignment=r.choice([1, 2, 4, 8, 16, 32, 64, 128, 256]),
                buffer_size=max(1, int(total * r.uniform(0.5, 2.5))), tensors=tensors)


def ctx_case(rng: random.Random) -> dict:
    """ggml_backend_alloc_ctx_tensors_from_buft: weights, some pre-allocated elsewhere, views of them."""
    r = rng
    tensors = []
    for i in range(r.randint(1, 30)):
        roots = [t for t in tensors if t["view_src"] == "-" and nbytes(t)]
        if roots and r.random() < 0.2:
            root = r.choice(roots)
            size = r.randint(1, nbytes(root))
            tensors.append(dict(name=f"w{i}", type="i8", ne0=size, ne1=1, op="VIEW", flags=0, view_src=root["name"],
                                view_offs=r.randint(0, nbytes(root) - size), buffer_id=0, srcs=[]))
        else:
            typ, n = random_weight_shape(r)
            pre = r.random() < 0.15  # bound in another buffer at view_offs (the harness's convention)
            tensors.append(dict(name=f"w{i}", type=typ, ne0=n, ne1=1, op="NONE", flags=HAS_DATA if pre else 0,
                                view_src="-", view_offs=r.randint(0, 1000) * 256 if pre else 0, buffer_id=0, srcs=[]))
    total = sum(nbytes(t) for t in tensors)
    return dict(mode="ctx", alignment=r.choice([1, 2, 4, 8, 16, 32, 64, 128, 256]),
                max_size=SIZE_MAX if r.random() < 0.3 else max(1, int(total * r.uniform(0.05, 0.7))),
                graphs={"ctx": dict(tensors=tensors, expand=[])})


def undefined_case(rng: random.Random) -> dict:
    """A graph in one of the DELIBERATE situations, made on purpose."""
    r = rng
    kind = r.choice(sorted(DELIBERATE))
    if kind == "ctx_view_after_oversize":
        case = ctx_case(r)
        tensors = case["graphs"]["ctx"]["tensors"]
        big = dict(name="big", type="f32", ne0=r.randint(2, 5000), ne1=1, op="NONE", flags=0, view_src="-",
                   view_offs=0, buffer_id=0, srcs=[])
        tensors.append(big)
        for i in range(r.randint(1, 3)):
            size = r.randint(1, nbytes(big))
            tensors.append(dict(name=f"v{i}", type="i8", ne0=size, ne1=1, op="VIEW", flags=0, view_src="big",
                                view_offs=r.randint(0, nbytes(big) - size), buffer_id=0, srcs=[]))
        case["max_size"] = r.randint(1, nbytes(big) - 1)
        return case
    if kind == "ctx_nothing_to_allocate":  # weights loaded elsewhere, and views of them
        case = ctx_case(r)
        weights = [dict(name=f"w{i}", type="i8", ne0=r.randint(1, 5000), ne1=1, op="NONE", flags=HAS_DATA,
                        view_src="-", view_offs=r.randint(0, 1000) * 256, buffer_id=0, srcs=[])
                   for i in range(r.randint(1, 3))]
        tensors = list(weights)
        for i in range(r.randint(1, 4)):
            root = r.choice(weights)
            size = r.randint(1, nbytes(root))
            tensors.append(dict(name=f"v{i}", type="i8", ne0=size, ne1=1, op="VIEW", flags=0, view_src=root["name"],
                                view_offs=r.randint(0, nbytes(root) - size), buffer_id=0, srcs=[]))
        case["graphs"]["ctx"]["tensors"] = tensors
        return case
    case = graph_case("small", r)
    g1 = case["graphs"]["g1"] = GraphMaker(r, r.randint(3, 20), case["buffer_types"][0][0]).make()
    case["graphs"].pop("g2", None)
    case["steps"] = [["reserve", "g1", 0], ["alloc", "g1"]]
    if kind == "reserve_size_then_alloc":
        case["steps"] = [["reserve_size", "g1", 0], ["alloc", "g1"]]
    elif kind == "alignment_not_pow2":
        case["buffer_types"][0] = (r.choice([3, 5, 6, 12, 24, 48, 96, 100]), case["buffer_types"][0][1])
    elif kind == "zero_byte_chunk":
        for t in g1["tensors"]:
            t["ne0"], t["view_offs"] = 0, 0
    elif kind == "unlisted_sources":  # a few listed nodes reading many tensors no list names
        pool = [t["name"] for t in g1["tensors"]]
        tensors = g1["tensors"]
        nodes = []
        for i in range(r.randint(1, 3)):
            srcs = [r.choice(pool) for _ in range(r.randint(6, 10))]
            tensors.append(dict(name=f"n{i}", type="i8", ne0=8, ne1=1, op="ADD", flags=OUTPUT, view_src="-",
                                view_offs=0, buffer_id=0, srcs=srcs))
            nodes.append(f"n{i}")
        g1["nodes"], g1["leafs"] = nodes, []
    elif kind == "total_past_2_64":  # two or three 2^63-byte tensors live together
        names = [f"huge{i}" for i in range(r.randint(2, 3))]
        for i, name in enumerate(names):
            g1["tensors"].append(dict(name=name, type="f32", ne0=2**61, ne1=1, op=r.choice(NOT_INPLACE),
                                      flags=OUTPUT, view_src="-", view_offs=0, buffer_id=0, srcs=names[:i]))
        g1["expand"].append(names[-1])
        case["buffer_types"][0] = (r.choice([1, 8, 32]), SIZE_MAX)
    elif kind == "leaf_outgrew_reserve":  # a leaf no node reads, so needs_realloc never sees it
        lonely = dict(name="lonely", type="i8", ne0=r.randint(1, 300), ne1=1, op="NONE", flags=INPUT,
                      view_src="-", view_offs=0, buffer_id=0, srcs=[])
        g1["tensors"].append(lonely)
        g1["nodes"], g1["leafs"] = forward_order(g1)
        g1["leafs"].insert(r.randint(0, len(g1["leafs"])), "lonely")
        g2 = case["graphs"]["g2"] = copy.deepcopy(g1)
        if r.random() < 0.7:
            g2["tensors"][-1]["ne0"] *= r.randint(2, 40)
        else:  # it had data at the reserve, has none now
            lonely["flags"] = HAS_DATA
        case["steps"] = [["reserve", "g1", 0], ["alloc", "g1"], ["alloc", "g2"]]
    return case


def make_case(family: str, seed: int) -> dict:
    rng = random.Random(f"{family}/{seed}")
    if family == "tallocr":
        case = tallocr_case(rng)
    elif family == "alloc-ctx":
        case = ctx_case(rng)
    elif family == "ggml-undefined":
        case = undefined_case(rng)
    else:
        case = graph_case(family, rng)
    return dict(family=family, seed=seed, **case)


# ------------------------------------------------------------------ the llama.cpp side

def find_tree(args) -> Path:
    if args.llama_cpp:
        return args.llama_cpp.resolve()
    if args.download:
        from llamacpp_ground_truth import build, download
        unpacked = sorted(args.download.glob("llama_cpp_python-*/vendor/llama.cpp"))
        tree = unpacked[-1] if unpacked else download(args.download)
        if not (tree / "build" / "bin" / "libggml-base.so").exists():
            build(tree)
        return tree.resolve()
    if os.environ.get("EMEL_LLAMA_CPP"):
        return Path(os.environ["EMEL_LLAMA_CPP"]).resolve()
    beside = sorted(REPO.parent.glob("llamacpp/llama_cpp_python-*/vendor/llama.cpp"))
    if beside:
        return beside[-1].resolve()
    raise SystemExit("no llama.cpp tree: give --llama-cpp TREE (built: build/bin/libggml-base.so), "
                     "--download DIR, or set EMEL_LLAMA_CPP")


def build_harness(tree: Path) -> Path:
    lib = tree / "build" / "bin"
    if not (lib / "libggml-base.so").exists():
        raise SystemExit(f"{lib}/libggml-base.so missing: build the tree first (--download builds it)")
    exe = tree / "build" / "emel_ggml_harness"
    if not exe.exists() or exe.stat().st_mtime < HARNESS_SRC.stat().st_mtime:
        cmd = ["g++", "-std=c++17", "-O1", f"-I{tree / 'ggml' / 'include'}", f"-I{tree / 'ggml' / 'src'}",
               str(HARNESS_SRC), "-o", str(exe), f"-L{lib}", "-lggml-base", f"-Wl,-rpath,{lib}"]
        print("+", " ".join(cmd), file=sys.stderr, flush=True)
        subprocess.run(cmd, check=True)
    return exe


def tensor_line(t: dict) -> str:
    return (f"t {t['name']} {t['type']} {t['ne0']} {t['ne1']} {t['op']} {t['flags']} {t['view_src']} "
            f"{t['view_offs']} {t['buffer_id']} {len(t['srcs'])} {' '.join(t['srcs'])}").rstrip()


def harness_input(case: dict) -> list[str]:
    if case["mode"] == "tallocr":
        return ([f"tallocr {case['alignment']} {case['buffer_size']}"]
                + [f"ta {name} {typ} {n} 1" for name, typ, n in case["tensors"]] + ["end"])
    lines = []
    for gid, g in case["graphs"].items():
        lines += [f"graph {gid}"] + [tensor_line(t) for t in g["tensors"]]
        if "nodes" in g:
            lines += ["nodes " + " ".join(g["nodes"]), "leafs " + " ".join(g["leafs"])]
        else:
            lines += [f"expand {name}" for name in g["expand"]]
    if case["mode"] == "ctx":
        return lines + [f"ctx {case['alignment']} {case['max_size']}"]
    lines = ([f"buft {a} {m}" for a, m in case["buffer_types"]]
             + [f"galloc {len(case['galloc'])} " + " ".join(map(str, case["galloc"]))] + lines)
    lines += [f"order {gid}" for gid in case["graphs"]]
    return lines + [" ".join(map(str, s)) for s in case["steps"]]


def parse_address(fields: list[str]):
    """(buffer type, chunk, offset); None when unbound, or when the data was set outside the
    allocator ("ext": emel gives such a tensor no address)."""
    if fields[0] in ("-", "ext"):
        return None
    if fields[0] == "?":
        return "not in the allocator's buffers"
    return tuple(int(x) for x in fields)


def parse_harness(text: str) -> list[dict]:
    """The complete records the harness printed (an abort leaves the last one out)."""
    events, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        f = lines[i].split()
        i += 1
        if not f:
            continue
        if f[0] == "order" and i + 1 < len(lines):
            events.append(dict(event="order", graph=f[1], nodes=lines[i].split()[1:], leafs=lines[i + 1].split()[1:]))
            i += 2
        elif f[0] == "reserve":
            events.append(dict(event="reserve", ok=int(f[1])))
        elif f[0] == "reserve_size":
            events.append(dict(event="reserve_size", sizes=[int(x) for x in f[1:]]))
        elif f[0] in ("alloc", "ctx_size"):
            ev = dict(event="alloc", graph=f[1]) if f[0] == "alloc" else dict(event="ctx", size=int(f[1]))
            ev["addresses"] = {}
            sizes, chunks = [], []
            while i < len(lines) and lines[i] != "end":
                g = lines[i].split()
                i += 1
                if g[0] in ("needs_realloc", "ok"):
                    ev[g[0]] = int(g[1])
                elif g[0] == "size":
                    sizes.append(int(g[2]))
                elif g[0] == "chunks":
                    chunks.append([int(x) for x in g[2:]])
                elif g[0] == "ctx_buffers":
                    ev["buffers"] = [int(x) for x in g[1:]]
                elif g[0] == "addr":
                    ev["addresses"][g[1]] = parse_address(g[2:])
            if i >= len(lines):
                break  # cut short by an abort
            i += 1
            if f[0] == "alloc":
                ev["sizes"], ev["chunks"] = sizes, chunks
            events.append(ev)
        elif f[0] == "ta":
            events.append(dict(event="ta", name=f[1], offset=int(f[2])))
        elif f[0] == "offset":
            events.append(dict(event="offset", offset=int(f[1])))
    return events


def run_ggml(exe: Path, case: dict) -> dict:
    # GGML_NO_BACKTRACE: an abort would otherwise run gdb for a backtrace (a second per abort)
    p = subprocess.run([str(exe)], input="\n".join(harness_input(case)) + "\n", capture_output=True, text=True,
                       timeout=120, env={**os.environ, "GGML_NO_BACKTRACE": "1"})
    aborts = [line for line in p.stderr.splitlines() if re.match(r"^\S+:\d+: ", line)]  # ggml_abort's "file:line: "
    return dict(returncode=p.returncode, events=parse_harness(p.stdout),
                abort=os.path.basename(aborts[0]) if aborts else "", stderr=p.stderr[-1500:])


# ------------------------------------------------------------------ the emel side

def emel_tensors(gg, graph: dict) -> dict:
    ts = {}
    for d in graph["tensors"]:
        ts[d["name"]] = gg.Tensor(d["name"], nbytes(d), op=d["op"], flags=d["flags"],
                                  layout=(d["type"], d["ne0"], d["ne1"]))
    for d in graph["tensors"]:
        t = ts[d["name"]]
        t.src = [None if s == "-" else ts[s] for s in d["srcs"]]
        if d["view_src"] != "-":
            t.view_src, t.view_offs = ts[d["view_src"]], d["view_offs"]
    return ts


def emel_graph(gg, graph: dict, ts: dict):
    if "nodes" in graph:
        return gg.Graph(nodes=[ts[n] for n in graph["nodes"]], leafs=[ts[n] for n in graph["leafs"]])
    g = None
    for name in graph["expand"]:
        g = gg.build_forward([ts[name]], g)
    return g


def run_emel(case: dict) -> dict:
    """The case through emel.memory.ggml: the harness's records, and where emel raised (if it did)."""
    import emel.memory.ggml as gg
    from emel.memory import PlanError
    events = []
    try:
        if case["mode"] == "tallocr":
            ta = gg.TensorAllocator(case["buffer_size"], gg.BufferType(case["alignment"]))
            for name, typ, n in case["tensors"]:
                events.append(dict(event="ta", name=name, offset=ta.alloc(gg.Tensor(name, TYPE_BYTES[typ] * n))))
            events.append(dict(event="offset", offset=ta.offset))
        elif case["mode"] == "ctx":
            run_emel_ctx(gg, case, events)
        else:
            run_emel_graph(gg, case, events)
    except PlanError as e:
        return dict(events=events, refused=f"PlanError({e.code}): {e}", code=e.code, tensor=e.tensor)
    except Exception as e:  # noqa: BLE001 - any other exception is a bug to report, not a crash of the run
        return dict(events=events, error=f"{type(e).__name__}: {e}")
    return dict(events=events)


def run_emel_ctx(gg, case: dict, events: list) -> None:
    graph = case["graphs"]["ctx"]
    ts = emel_tensors(gg, graph)
    for d in graph["tensors"]:
        if d["flags"] & HAS_DATA:  # as the harness: bound in buffer type 77's buffer at view_offs
            ts[d["name"]].address = (77, 0, d["view_offs"])
    bt = gg.BufferType(case["alignment"], case["max_size"])
    tensors = [ts[d["name"]] for d in graph["tensors"]]
    size = gg.alloc_ctx_tensors_size(tensors, bt)
    buffers = gg.alloc_ctx_tensors(tensors, bt)
    # emel: (buffer index, 0, offset); the harness: (buffer type, buffer index, offset)
    addresses = {t.name: None if t.address is None else
                 (77, 0, t.address[2]) if t.address[0] == 77 else (0, t.address[0], t.address[2]) for t in tensors}
    events.append(dict(event="ctx", size=size, buffers=list(buffers), addresses=addresses))


def run_emel_graph(gg, case: dict, events: list) -> None:
    types = [gg.BufferType(a, m, f"type{i}") for i, (a, m) in enumerate(case["buffer_types"])]
    galloc = case["galloc"]
    for gid, graph in case["graphs"].items():
        g = emel_graph(gg, graph, emel_tensors(gg, graph))
        events.append(dict(event="order", graph=gid, nodes=[t.name for t in g.nodes], leafs=[t.name for t in g.leafs]))
    ga = gg.GraphAllocator([types[j] for j in galloc])
    for step in case["steps"]:
        graph = case["graphs"][step[1]]
        ts = emel_tensors(gg, graph)  # fresh tensors every call, as the harness builds them
        g = emel_graph(gg, graph, ts)
        if step[0] in ("reserve", "reserve_size"):
            ids = {d["name"]: d["buffer_id"] for d in graph["tensors"]}
            node_ids = [ids[t.name] for t in g.nodes] if step[2] else None
            leaf_ids = [ids[t.name] for t in g.leafs] if step[2] else None
            if step[0] == "reserve":
                events.append(dict(event="reserve", ok=int(bool(ga.reserve_n(g, node_ids, leaf_ids)))))
            else:
                events.append(dict(event="reserve_size", sizes=list(ga.reserve_n_size(g, node_ids, leaf_ids))))
            continue
        needs = ga.needs_realloc(g)
        ok = ga.alloc_graph(g)
        ev = dict(event="alloc", graph=step[1], needs_realloc=int(bool(needs)), ok=int(bool(ok)), addresses={},
                  sizes=[ga.get_buffer_size(i) for i in range(len(galloc))],
                  # every id's buffer: an id sharing a type reports the first such id's
                  chunks=[ga.get_chunk_sizes(galloc.index(j)) for j in galloc])
        if ok:
            for d in graph["tensors"]:
                a = ts[d["name"]].address
                ev["addresses"][d["name"]] = None if a is None else (galloc[a[0]], a[1], a[2])
        events.append(ev)


# ------------------------------------------------------------------ comparison

def differences(ggml_events: list[dict], emel_events: list[dict]) -> list[str]:
    out = []
    for k, (a, b) in enumerate(zip(ggml_events, emel_events)):
        where = f"record {k} ({a['event']}{' ' + a['graph'] if 'graph' in a else ''})"
        if a["event"] != b["event"]:
            return out + [f"{where}: ggml {a['event']}, emel {b['event']}"]
        for key in sorted(set(a) | set(b)):
            if key == "addresses":
                for name in a[key]:
                    if a[key][name] != b[key].get(name, "missing"):
                        out.append(f"{where} {name}: ggml {a[key][name]}, emel {b[key].get(name, 'missing')}")
            elif a.get(key) != b.get(key):
                out.append(f"{where} {key}: ggml {a.get(key)}, emel {b.get(key)}")
    return out


def traits(case: dict) -> set[str]:
    """Which DELIBERATE situations the input is in (outcome not considered)."""
    found = set()
    if case["mode"] == "ctx":
        kind, views = ctx_views_ggml_skips(case)
        return {kind} if views else found
    if case["mode"] != "graph":
        return found
    if any(a & (a - 1) for a, _ in case["buffer_types"]):
        found.add("alignment_not_pow2")
    steps = [s[0] for s in case["steps"]]
    if any(x == "reserve_size" and y == "alloc" for x, y in zip(steps, steps[1:])):
        found.add("reserve_size_then_alloc")
    for g in case["graphs"].values():
        if any(nbytes(t) == 0 for t in g["tensors"]):
            found.add("zero_byte_chunk")  # a necessary condition; the outcome check needs a 0-byte chunk
        if sum(nbytes(t) for t in g["tensors"]) > SIZE_MAX:
            found.add("total_past_2_64")
        if "nodes" in g:
            listed = set(g["nodes"]) | set(g["leafs"])
            by_name = {t["name"]: t for t in g["tensors"]}
            reached = {s for n in listed for s in by_name[n]["srcs"] + [by_name[n]["view_src"]] if s != "-"}
            if reached - listed:
                found.add("unlisted_sources")
    if outgrown_leaves(case):
        found.add("leaf_outgrew_reserve")
    return found


def ctx_views_ggml_skips(case: dict) -> tuple[str, set[str]]:
    """The views ggml_backend_alloc_ctx_tensors_from_buft never binds, and why. It cuts the tensors
    into ranges of at most max_size bytes (a range closes before a tensor that would overflow it, so
    a range holding one tensor larger than max_size closes at the next tensor, even a 0-byte view)
    and passes the last range to alloc_tensor_range only if it has bytes to allocate."""
    a, m = case["alignment"], case["max_size"]
    tensors = case["graphs"]["ctx"]["tensors"]
    first, current, cut = 0, 0, False
    for i, t in enumerate(tensors):
        size = -(-nbytes(t) // a) * a if t["view_src"] == "-" and not t["flags"] & HAS_DATA else 0
        if current > 0 and current + size > m:
            first, current, cut = i, size, True
        else:
            current += size
    kind = "ctx_view_after_oversize" if cut else "ctx_nothing_to_allocate"
    if current > 0:
        return kind, set()
    return kind, {t["name"] for t in tensors[first:] if t["view_src"] != "-"}


def outgrown_leaves(case: dict) -> set[str]:
    """Leafs of a later graph that are larger than in an earlier one, or lost their data."""
    out = set()
    graphs = [{t["name"]: t for t in g["tensors"]} for g in case.get("graphs", {}).values()]
    for earlier, later in zip(graphs, graphs[1:]):
        for name, t in later.items():
            old = earlier.get(name)
            if old and t["op"] == "NONE" and t["view_src"] == "-" and (
                    nbytes(t) > nbytes(old) or (old["flags"] & HAS_DATA and not t["flags"] & HAS_DATA)):
                out.add(name)
    return out


def classify(case: dict, ggml: dict, emel: dict) -> tuple[str, str | None, list[str]]:
    """(column, deliberate kind or None, the differences). The records both sides completed must
    be equal; then what happened at the first step one of them did not complete decides."""
    diffs = differences(ggml["events"], emel["events"])
    has = traits(case)
    n_ggml, n_emel = len(ggml["events"]), len(emel["events"])
    if "error" in emel:
        return "differ", None, diffs + [f"emel raised {emel['error']}"]
    if diffs and case["mode"] == "ctx" and ggml["returncode"] == 0 and "refused" not in emel:
        kind, skipped = ctx_views_ggml_skips(case)
        ctx_g, ctx_e = ggml["events"][0], emel["events"][0]
        if skipped and ctx_g["size"] == ctx_e["size"] and ctx_g["buffers"] == ctx_e["buffers"] and all(
                (name in skipped and a is None) or ctx_e["addresses"].get(name) == a
                for name, a in ctx_g["addresses"].items()):
            return "deliberate", kind, []
    if diffs:
        return "differ", None, diffs
    crashed = ggml["returncode"] != 0
    what = f"ggml exited with {ggml['returncode']}{' (' + ggml['abort'][:200] + ')' if ggml['abort'] else ''}"
    if ggml["returncode"] in (3, 4):  # the harness's own exits: a description it cannot read, a stale mirror
        return "differ", None, [f"harness error {ggml['returncode']}: {ggml['stderr'].strip()[-300:]}"]
    if crashed and "refused" in emel and n_emel == n_ggml:
        return "both refuse", None, []
    if crashed and n_emel > n_ggml:  # emel answered the call ggml crashed in
        zero_chunk = any(0 in c for ev in emel["events"] if ev["event"] == "alloc" for c in ev["chunks"])
        for kind, (status, file, messages) in GGML_FAILURE.items():
            failed_so = ggml["returncode"] == status and (
                file is None or ggml["abort"].startswith(file + ":") and any(m in ggml["abort"] for m in messages))
            if kind in has and failed_so and (kind != "zero_byte_chunk" or zero_chunk):
                return "deliberate", kind, []
        return "differ", None, [f"{what} in record {n_ggml}; emel answered it"]
    if "refused" in emel:  # emel refused a call ggml answered
        if emel["code"] == "ALIGNMENT_VIOLATION" and "alignment_not_pow2" in has:
            return "deliberate", "alignment_not_pow2", []
        if emel["code"] == "ALLOCATION_OVERFLOW" and "total_past_2_64" in has:
            return "deliberate", "total_past_2_64", []
        if emel["code"] == "ARENA_TOO_SMALL" and emel["tensor"] in outgrown_leaves(case):
            return "deliberate", "leaf_outgrew_reserve", []
        return "differ", None, [f"ggml answered record {n_emel}; emel {emel['refused']}"]
    if n_ggml != n_emel:
        return "differ", None, [f"ggml gave {n_ggml} records, emel {n_emel}"]
    if "alignment_not_pow2" in has:
        return "differ", None, ["emel accepted an alignment that is not a power of two"]
    return "agree", None, []


# ------------------------------------------------------------------ main

def rerun_command(args, family: str, seed: int) -> str:
    return (f"{sys.executable} {os.path.relpath(__file__)} --llama-cpp {args.tree} --families {family} "
            f"--seed {seed} --graphs 1 --show")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-cpp", type=Path, help="a built llama.cpp tree (vendor/llama.cpp of the sdist)")
    ap.add_argument("--download", type=Path, metavar="DIR",
                    help="pip download, unpack and build the llama-cpp-python sdist in DIR first (reused if there)")
    ap.add_argument("--families", default=",".join(FAMILIES), help=f"comma-separated, of: {', '.join(FAMILIES)}")
    ap.add_argument("--graphs", type=int, default=1000, help="graphs per family (default 1000)")
    ap.add_argument("--seed", type=int, default=0, help="graph k of a family has seed SEED + k")
    ap.add_argument("--show", action="store_true", help="print every graph's harness input and outcome")
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/ggml_differential.json)")
    args = ap.parse_args(argv)
    families = [f for f in args.families.split(",") if f]
    unknown = set(families) - set(FAMILIES)
    if unknown:
        ap.error(f"unknown families {', '.join(sorted(unknown))}; choose from {', '.join(FAMILIES)}")
    args.tree = find_tree(args)
    exe = build_harness(args.tree)
    from llamacpp_ground_truth import version
    import emel.memory
    emel_dir = str(Path(emel.memory.__file__).parent)
    print(f"ggml-alloc of {args.tree}\nemel from {emel_dir}", flush=True)

    rows, mismatches, t_start = [], [], time.perf_counter()
    for family in families:
        t0 = time.perf_counter()
        row = {"family": family, "graphs": 0, "agree": 0, "differ": 0, "both refuse": 0, "deliberate": 0,
               "kinds": {}}
        for seed in range(args.seed, args.seed + args.graphs):
            case = make_case(family, seed)
            ggml, ours = run_ggml(exe, case), run_emel(case)
            column, kind, diffs = classify(case, ggml, ours)
            row["graphs"] += 1
            row[column] += 1
            if kind:
                row["kinds"][kind] = row["kinds"].get(kind, 0) + 1
            if args.show:
                print("\n".join(harness_input(case)))
                print(f"--> {column}{' (' + kind + ')' if kind else ''}; ggml exit {ggml['returncode']}"
                      f"{' ' + ggml['abort'] if ggml['abort'] else ''}"
                      f"{'; emel ' + ours.get('refused', ours.get('error', '')) if len(ours) > 1 else ''}")
                print("\n".join(f"    {d}" for d in diffs))
            if column == "differ":
                command = rerun_command(args, family, seed)
                mismatches.append({"family": family, "seed": seed, "differences": diffs[:20], "rerun": command})
                if len(mismatches) <= 20:
                    print(f"DIFFER {family} seed {seed}: {'; '.join(diffs[:3])}\n  rerun: {command}", flush=True)
                elif len(mismatches) == 21:
                    print("(more differences: in the JSON)", flush=True)
        row["seconds"] = time.perf_counter() - t0
        row["kinds_text"] = ", ".join(f"{k} {v}" for k, v in sorted(row["kinds"].items()))
        rows.append(row)
        print(f"{family:<15} {row['graphs']} graphs: {row['agree']} agree, {row['differ']} differ, "
              f"{row['both refuse']} both refuse, {row['deliberate']} deliberate ({row['seconds']:.1f} s)", flush=True)
    total = {"family": "all", **{k: sum(r[k] for r in rows) for k in
                                 ("graphs", "agree", "differ", "both refuse", "deliberate", "seconds")},
             "kinds_text": ""}
    print()
    print_table(rows + [total], [("family", "family", ""), ("graphs", "graphs", "d"), ("agree", "agree", "d"),
                                 ("differ", "differ", "d"), ("both refuse", "both refuse", "d"),
                                 ("deliberate", "deliberate", "d"), ("seconds", "s", ".1f")])
    for r in rows:
        if r["kinds"]:
            print(f"  deliberate in {r['family']}: {r['kinds_text']}")
    print(f"\n{total['agree']} of {total['graphs']} graphs agree with ggml-alloc exactly; {total['differ']} differ; "
          f"{total['both refuse']} refused by both; {total['deliberate']} where ggml is undefined (docs/ggml.md)"
          f" -- {time.perf_counter() - t_start:.0f} s")
    if args.show and args.out is None:
        return 1 if mismatches else 0
    write_json("ggml_differential", {
        "command": "python bench/ggml_differential.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "llama_cpp": {"tree": str(args.tree), **version(args.tree)}, "emel": emel_dir,
        "seed": args.seed, "graphs_per_family": args.graphs, "deliberate_kinds": DELIBERATE,
        "rows": [{k: v for k, v in r.items() if k != "kinds_text"} for r in rows], "mismatches": mismatches},
        args.out)
    if mismatches:
        print(f"{len(mismatches)} graphs differ (rerun commands above and in the JSON)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
