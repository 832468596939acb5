"""Sharding: the part of a graph one rank holds when tensors are split
across ``world_size`` ranks (docs/dynamic-shapes-and-sharding.md).

:func:`shard_graph` is a pure function on ``emel.graph/1`` documents: every
tensor named in the shard spec ``{tensor id: axis}`` gets its rank's share of
``shape[axis]``; views of a sharded tensor follow it. :func:`tensor_parallel_spec`
builds a Megatron-style spec for a Llama-style graph from name patterns.

Standard library only: the pure-Python reference calls it.
"""

from __future__ import annotations

from collections.abc import Mapping
from fnmatch import fnmatchcase

from .determinism import check_determinism_args
from .errors import PlanError, is_int
from .symbolic import resolve

#: graph-format.md's element sizes (a dtype not here needs ``nbytes``).
ELEMENT_SIZES = {
    "float64": 8, "int64": 8,
    "float32": 4, "int32": 4,
    "float16": 2, "bfloat16": 2, "int16": 2,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "int8": 1, "uint8": 1, "bool": 1,
}

#: Column-parallel weights (split on the output axis, 0 of a ``[out, in]`` weight);
#: the LM head is column-parallel over the vocabulary (its logits stay split).
LLAMA_COLUMN_PARALLEL = ("*q_proj.weight*", "*k_proj.weight*", "*v_proj.weight*",
                         "*gate_proj.weight*", "*up_proj.weight*", "*lm_head.weight*")
#: Row-parallel weights (split on the input axis, 1 of a ``[out, in]`` weight).
LLAMA_ROW_PARALLEL = ("*o_proj.weight*", "*down_proj.weight*")
#: Vocabulary-parallel embeddings (split on axis 0 of ``[vocab, d]``): each rank
#: looks up its rows and an all-reduce makes the output whole.
LLAMA_VOCAB_PARALLEL = ("*embed_tokens.weight*",)
#: Roles whose tensors the weight patterns are matched against.
WEIGHT_ROLES = ("parameter", "gradient", "optimizer_state")


def _invalid(message: str, tensor=None) -> PlanError:
    return PlanError("INVALID_IR_SHAPES", message, tensor=tensor)



def shard_sizes(extent: int, world_size: int) -> list[int]:
    """Every rank's share of ``extent``: as ``numpy.array_split``, the first
    ``extent % world_size`` ranks get one more than the others."""
    base, extra = divmod(extent, world_size)
    return [base + 1 if rank < extra else base for rank in range(world_size)]


def shard_extent(extent: int, rank: int, world_size: int) -> int:
    """Rank ``rank``'s share of ``extent`` (see :func:`shard_sizes`)."""
    base, extra = divmod(extent, world_size)
    return base + 1 if rank < extra else base


def shard_start(extent: int, rank: int, world_size: int) -> int:
    """The index along the axis where rank ``rank``'s share begins."""
    base, extra = divmod(extent, world_size)
    return rank * base + min(rank, extra)


def _byte_size(t: dict) -> int | None:
    """The tensor's bytes (its nbytes, else shape x element size); None when
    unknown (a malformed entry, left to the document checks)."""
    if t.get("nbytes") is not None:
        return t["nbytes"] if is_int(t["nbytes"]) else None
    element = ELEMENT_SIZES.get(t.get("dtype"))
    shape = t.get("shape")
    if element is None or not isinstance(shape, list):
        return None
    size = element
    for dim in shape:
        if not is_int(dim):
            return None
        size *= dim
    return size


def _root_and_offset(tensors: list, index: dict, k: int):
    """The storage root of tensor ``k`` and ``k``'s byte offset in it; None for
    a broken chain (unknown base, cycle, malformed entry)."""
    offset, seen = 0, {k}
    while True:
        view = tensors[k].get("view_of")
        if view is None:
            return k, offset
        if not isinstance(view, dict) or view.get("base") not in index:
            return None
        step = view.get("byte_offset") or 0
        if not is_int(step):
            return None
        offset += step
        k = index[view["base"]]
        if k in seen or not isinstance(tensors[k], dict):
            return None
        seen.add(k)


def shard_graph(document, rank: int, world_size: int, shard_spec: Mapping | None):
    """Rank ``rank``'s share of ``document`` under ``shard_spec`` ``{tensor id: axis}``.

    - A listed tensor's ``shape[axis]`` becomes its share (:func:`shard_sizes`:
      the first ``n % world_size`` ranks get one more; a rank may get 0). A
      stated ``nbytes`` is scaled by ``share / n`` and must stay a whole number.
    - A view cannot be listed (list its root storage tensor). A view of a
      sharded root keeps its byte offset and its end margin (the bytes between
      its end and the root's end) and gets ``nbytes`` = what is left of its
      root's share: exact for full-span views (reshapes, transposes) and for
      views that trim the ends of every shard (RoPE's head halves). A view
      whose margins do not fit in the share is refused. Its shape is kept.
    - Errors (PlanError ``INVALID_IR_SHAPES`` naming the tensor): unknown id,
      an axis outside the shape, a symbolic dimension on the axis, a view
      listed or not fitting, an nbytes that does not scale exactly; bad
      ``rank`` / ``world_size`` / spec types.

    Returns ``document`` itself when the spec is empty (after checking
    ``rank`` and ``world_size``), else a new document; the input is not modified.
    Entries malformed in ways the spec does not touch are left for the
    document checks.
    """
    _, rank, world_size, spec = check_determinism_args(None, rank, world_size, shard_spec)
    if not spec:
        return document
    tensors = document.get("tensors") if isinstance(document, dict) else None
    if not isinstance(tensors, list):
        raise _invalid("cannot shard a document without a 'tensors' list")
    index: dict[str, int] = {}
    for k, t in enumerate(tensors):
        if isinstance(t, dict) and isinstance(t.get("id"), str):
            index.setdefault(t["id"], k)
    out = list(tensors)
    full_bytes: dict[int, int] = {}   # sharded tensor -> its bytes before sharding
    share_bytes: dict[int, int] = {}  # sharded tensor -> the bytes of this rank's share
    for tid, axis in spec.items():
        if tid not in index:
            raise _invalid(f"shard_spec names unknown tensor {tid!r}", tensor=tid)
        k = index[tid]
        t = tensors[k]
        if t.get("view_of") is not None:
            raise _invalid(f"tensor {tid!r} is a view: shard its root storage tensor instead "
                           f"(its views follow it)", tensor=tid)
        shape = t.get("shape")
        if not isinstance(shape, list) or axis >= len(shape):
            rank_text = len(shape) if isinstance(shape, list) else "no"
            raise _invalid(f"tensor {tid!r}: axis {axis} is outside its shape {shape!r} "
                           f"({rank_text} dimensions)", tensor=tid)
        extent = shape[axis]
        if not is_int(extent) or extent < 0:
            raise _invalid(f"tensor {tid!r}: dimension {axis} must be a concrete integer to be "
                           f"sharded, got {extent!r} (plan a symbolic graph at a resolved "
                           f"envelope)", tensor=tid)
        share = shard_extent(extent, rank, world_size)
        before = _byte_size(t)
        entry = dict(t, shape=shape[:axis] + [share] + shape[axis + 1:])
        if t.get("nbytes") is not None and extent:
            scaled, rest = divmod(t["nbytes"] * share, extent)
            if rest:
                raise _invalid(f"tensor {tid!r}: nbytes {t['nbytes']} does not split exactly: "
                               f"{share} of {extent} along axis {axis} is {t['nbytes'] * share / extent} "
                               f"bytes", tensor=tid)
            entry["nbytes"] = scaled
        out[k] = entry
        after = _byte_size(entry)
        if before is not None and after is not None:
            full_bytes[k], share_bytes[k] = before, after
    for k, t in enumerate(tensors):
        if not isinstance(t, dict) or t.get("view_of") is None:
            continue
        found = _root_and_offset(tensors, index, k)
        if found is None or found[0] not in full_bytes:
            continue
        root, offset = found
        vid = t.get("id")
        span = _byte_size(t)
        if span is None:
            raise _invalid(f"view {vid!r} of sharded tensor {tensors[root]['id']!r}: its span is "
                           f"unknown (give nbytes or a concrete shape)", tensor=vid)
        margin = full_bytes[root] - offset - span
        if margin < 0:
            continue  # outside its base: the view checks report it
        new_span = share_bytes[root] - offset - margin
        if new_span < 0 or (new_span == 0 and span > 0 and offset + margin > 0):
            raise _invalid(f"view {vid!r} covers bytes [{offset}, {offset + span}) of tensor "
                           f"{tensors[root]['id']!r} ({full_bytes[root]} bytes), which do not fit "
                           f"in rank {rank}'s share ({share_bytes[root]} bytes): only full-span "
                           f"views and views that trim each shard's ends can follow a sharded "
                           f"tensor", tensor=vid)
        out[k] = dict(t, nbytes=new_span)
    result = dict(document)
    result["tensors"] = out
    return result


def tensor_parallel_spec(document, world_size: int, *, column=LLAMA_COLUMN_PARALLEL,
                         row=LLAMA_ROW_PARALLEL, vocab=LLAMA_VOCAB_PARALLEL,
                         roles=WEIGHT_ROLES,
                         activations: bool = True) -> dict:
    """A Megatron-style tensor-parallel shard spec ``{tensor id: axis}`` for a
    graph (anything :func:`emel.memory.load_graph` takes; it is validated).

    Weights: storage tensors whose role is in ``roles`` and whose id matches
    a ``column`` glob pattern are split on axis 0 (the output features of a
    ``[out, in]`` weight), ``row`` patterns on axis 1 (the input features),
    ``vocab`` patterns (embedding tables) on axis 0. A tensor may match one
    kind only.

    Activations (``activations=True``), in execution order: a node that reads
    a sharded tensor (directly or through a view) produces sharded storage
    outputs, except a node that reads both a sharded weight and a sharded
    activation — it contracts over the split axis (a row-parallel matmul in
    the forward pass, a column-parallel input gradient in the backward pass)
    and its output is whole (the all-reduce); a node that reads only a
    vocabulary-parallel table (a lookup) produces whole outputs too. A
    sharded output is split on its last axis whose extent equals the split
    extent of a sharded input, else on its last axis of extent >=
    ``world_size``; one with neither stays whole. Views follow their root.
    """
    if not is_int(world_size) or world_size < 1:
        raise _invalid(f"world_size must be an integer >= 1, got {world_size!r}")
    from .graph import load_graph  # validation needs the core: not at import (the reference)

    graph = load_graph(document).validate()   # a bad graph is a PlanError, not a KeyError here
    document = resolve(graph.to_dict())       # symbolic dims at their maximum, as plan() shards them
    tensors = document["tensors"]
    index = {t["id"]: k for k, t in enumerate(tensors)}
    spec: dict[int, int] = {}
    weights: set[int] = set()  # column- and row-parallel weights
    tables: set[int] = set()   # vocabulary-parallel tables
    for k, t in enumerate(tensors):
        if t.get("view_of") is not None or t.get("role") not in roles:
            continue
        kinds = [(kind, axis) for kind, axis, patterns in
                 (("column", 0, column), ("row", 1, row), ("vocab", 0, vocab))
                 if any(fnmatchcase(t["id"], p) for p in patterns)]
        if len(kinds) > 1:
            raise _invalid(f"tensor {t['id']!r} matches {kinds[0][0]}- and {kinds[1][0]}-parallel "
                           f"patterns", tensor=t["id"])
        if kinds:
            kind, axis = kinds[0]
            if axis >= len(t["shape"]):
                raise _invalid(f"tensor {t['id']!r} matches a {kind}-parallel pattern but has no "
                               f"axis {axis}: {t['shape']!r}", tensor=t["id"])
            spec[k] = axis
            (tables if kind == "vocab" else weights).add(k)
    if activations:
        roots = [None] * len(tensors)
        for k in range(len(tensors)):
            found = _root_and_offset(tensors, index, k)
            roots[k] = found[0] if found else k
        nodes = {n["id"]: n for n in document["nodes"]}
        order = document.get("execution_order") or [n["id"] for n in document["nodes"]]
        for nid in order:
            node = nodes[nid]
            read = {roots[index[i]] for i in node.get("inputs", ()) if i in index}
            read_weights = read & weights
            read_acts = {r for r in read if r in spec and r not in weights and r not in tables}
            if not (read_weights or read_acts) or (read_weights and read_acts):
                continue
            extents = {tensors[r]["shape"][spec[r]] for r in sorted(read_weights | read_acts)}
            for out in node.get("outputs", ()):
                k = index.get(out)
                if k is None or tensors[k].get("view_of") is not None or k in spec:
                    continue
                axis = _activation_axis(tensors[k]["shape"], extents, world_size)
                if axis is not None:
                    spec[k] = axis
    return {tensors[k]["id"]: spec[k] for k in sorted(spec)}


def _activation_axis(shape: list, extents: set, world_size: int) -> int | None:
    for want in (lambda n: n in extents, lambda n: n >= world_size):
        for axis in range(len(shape) - 1, -1, -1):
            if is_int(shape[axis]) and want(shape[axis]):
                return axis
    return None
