"""Graphs: the `emel.graph/1` document model, its reader and a builder.

The document is checked here for its shape and types (phase A of
docs/algorithm.md §1); everything that needs the whole graph — ids, sizes,
views, the execution order — is checked by the C++ core when the graph is
planned or on :meth:`Graph.validate`.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import stat
from typing import Any, Iterable

from .errors import PlanError, U64_MAX, check_u64, is_int, is_text
from .formats import format_bytes
from . import vocabulary
from .symbolic import (ShapeEnvelope, concrete_shape, document_envelope, envelope_of_tensors, is_symbolic,
                      parse_symbolic_dim)

FORMAT = "emel.graph/1"
ROLES = vocabulary.ROLES  # the core's table (core/tables.hpp)
PHASES = ("forward", "backward")

_TENSOR_KEYS = ("id", "shape", "dtype", "role", "nbytes", "arena", "alignment",
                "saved_for_backward", "can_inplace", "view_of", "must_not_alias")


def _invalid(message: str, tensor: str | None = None, node: str | None = None) -> PlanError:
    return PlanError("INVALID_IR_SHAPES", message, tensor=tensor, node=node)



def _where(kind: str, index: int, ident: Any) -> str:
    return f"{kind} {ident!r}" if isinstance(ident, str) and ident else f"{kind} #{index}"


def _check_id_list(value: Any, what: str, tensor=None, node=None) -> list:
    if type(value) is not list or not all(type(x) is str and is_text(x) for x in value):
        raise _invalid(f"{what} must be a list of id strings, got {value!r}",
                       tensor=tensor, node=node)
    return list(value)


_PLAIN_TENSOR = ("id", "shape", "dtype", "role")
_PLAIN_NODE = ("id", "op", "inputs", "outputs")
_INT, _STR = {int}, {str}


def _plain_tensor(raw: Any) -> bool:
    """The common entry, checked fast: exactly id, shape, dtype, role with
    ASCII strings and integer dims (anything else takes the full check)."""
    if type(raw) is not dict or tuple(raw) != _PLAIN_TENSOR:
        return False
    tid, shape, dtype = raw["id"], raw["shape"], raw["dtype"]
    return (type(tid) is str and tid != "" and tid.isascii() and type(dtype) is str and dtype != ""
            and dtype.isascii() and raw["role"] in ROLES and type(shape) is list
            and (not shape or (set(map(type, shape)) == _INT and min(shape) >= 0 and max(shape) <= U64_MAX)))


def _plain_node(raw: Any) -> bool:
    """Exactly id, op, inputs, outputs with ASCII strings (else the full check)."""
    if type(raw) is not dict or tuple(raw) != _PLAIN_NODE:
        return False
    nid, op, ins, outs = raw["id"], raw["op"], raw["inputs"], raw["outputs"]
    if not (type(nid) is str and nid != "" and nid.isascii() and type(op) is str and op.isascii()
            and type(ins) is list and type(outs) is list):
        return False
    try:  # join takes only str (subclasses too: the full check refuses those)
        return ("".join(ins).isascii() and "".join(outs).isascii()
                and set(map(type, ins)) <= _STR and set(map(type, outs)) <= _STR)
    except TypeError:
        return False


def normalize_tensor(raw: Any, index: int, owned: bool = False) -> dict:
    """Phase A for one tensor entry; returns the entry with defaults dropped.
    ``owned``: ``raw`` belongs to the reader (parsed JSON) and may be kept."""
    if _plain_tensor(raw):
        if owned:
            return raw
        return {"id": raw["id"], "shape": raw["shape"].copy(), "dtype": raw["dtype"], "role": raw["role"]}
    if not isinstance(raw, dict):
        raise _invalid(f"tensor #{index} must be an object, got {type(raw).__name__}")
    get = raw.get  # a null value counts as absent
    tid = get("id")
    if not is_text(tid) or not tid:
        raise _invalid(f"tensor #{index}: 'id' must be a non-empty UTF-8 string, got {tid!r}")
    where = f"tensor {tid!r}"
    shape = get("shape")
    if not isinstance(shape, list):
        raise _invalid(f"{where}: 'shape' must be a list of integers, got {shape!r}", tensor=tid)
    symbolic = False
    for dim in shape:
        if is_symbolic(dim):  # {"sym": name, "max": n, "min": m} (docs/dynamic-shapes-and-sharding.md)
            parse_symbolic_dim(dim, tid)
            symbolic = True
        else:
            check_u64(dim, f"{where}: dimension", tid)
    dtype = get("dtype")
    if not is_text(dtype) or not dtype:
        raise _invalid(f"{where}: 'dtype' must be a non-empty UTF-8 string, got {dtype!r}", tensor=tid)
    role = get("role")
    if role not in ROLES:
        raise _invalid(f"{where}: 'role' must be one of {', '.join(ROLES)}; got {role!r}",
                       tensor=tid)
    entry = {"id": tid, "shape": [_copy_dim(dim) for dim in shape], "dtype": dtype, "role": role}
    if get("nbytes") is not None and symbolic:
        raise _invalid(f"{where} has a symbolic dimension, so it may not state nbytes "
                       f"(its size comes from its shape)", tensor=tid)
    if get("nbytes") is not None:
        entry["nbytes"] = check_u64(get("nbytes"), f"{where}: 'nbytes'", tid)
    if get("arena") is not None:
        if not is_text(get("arena")) or not get("arena"):
            raise _invalid(f"{where}: 'arena' must be a non-empty UTF-8 string, got {get('arena')!r}",
                           tensor=tid)
        entry["arena"] = get("arena")
    if get("alignment") is not None:
        align = get("alignment")
        if not is_int(align):
            raise _invalid(f"{where}: 'alignment' must be an integer, got {align!r}", tensor=tid)
        if align < 1 or align & (align - 1) or align > U64_MAX:
            raise PlanError("ALIGNMENT_VIOLATION",
                            f"{where}: alignment must be a power of two below 2^64, got {align}",
                            tensor=tid)
        entry["alignment"] = align
    for flag in ("saved_for_backward", "can_inplace"):
        if get(flag) is not None:
            if not isinstance(get(flag), bool):
                raise _invalid(f"{where}: '{flag}' must be true or false, got {get(flag)!r}",
                               tensor=tid)
            if get(flag):
                entry[flag] = True
    if get("view_of") is not None:
        view = get("view_of")
        if not isinstance(view, dict) or not is_text(view.get("base")):
            raise _invalid(f"{where}: 'view_of' must be an object with a string 'base', got {view!r}",
                           tensor=tid)
        offset = view.get("byte_offset")
        offset = 0 if offset is None else check_u64(offset, f"{where}: view byte_offset", tid)
        entry["view_of"] = {"base": view["base"], "byte_offset": offset}
    if get("must_not_alias") is not None:
        ids = _check_id_list(get("must_not_alias"), f"{where}: 'must_not_alias'", tensor=tid)
        if ids:
            entry["must_not_alias"] = ids
    _copy_module(get("module"), entry, where, tensor=tid)
    return entry


def _copy_module(module: Any, entry: dict, where: str, tensor=None, node=None) -> None:
    """The optional ``module`` field: the model's module path (for reports; not planned)."""
    if module is not None:
        if not isinstance(module, str):
            raise _invalid(f"{where}: 'module' must be a string, got {module!r}",
                           tensor=tensor, node=node)
        if module:
            entry["module"] = module


def _copy_dim(dim: Any) -> Any:
    """A dimension as stored: an int, or a symbolic dim without null fields."""
    return {k: v for k, v in dim.items() if v is not None} if is_symbolic(dim) else dim


def normalize_node(raw: Any, index: int, owned: bool = False) -> dict:
    """Phase A for one node entry (``owned``: as for normalize_tensor)."""
    if _plain_node(raw):
        if owned:
            return raw
        return {"id": raw["id"], "op": raw["op"], "inputs": raw["inputs"].copy(),
                "outputs": raw["outputs"].copy()}
    if not isinstance(raw, dict):
        raise _invalid(f"node #{index} must be an object, got {type(raw).__name__}")
    nid = raw.get("id")
    if not is_text(nid) or not nid:
        raise _invalid(f"node #{index}: 'id' must be a non-empty UTF-8 string, got {nid!r}")
    op = raw.get("op")
    if not is_text(op):
        raise _invalid(f"node {nid!r}: 'op' must be a UTF-8 string, got {op!r}", node=nid)
    entry = {"id": nid, "op": op}
    for key in ("inputs", "outputs"):
        value = raw.get(key)
        entry[key] = [] if value is None else _check_id_list(value, f"node {nid!r}: '{key}'", node=nid)
    phase = raw.get("phase")
    if phase is not None:
        if phase not in PHASES:
            raise _invalid(f"node {nid!r}: 'phase' must be 'forward' or 'backward', got {phase!r}",
                           node=nid)
        entry["phase"] = phase
    _copy_module(raw.get("module"), entry, f"node {nid!r}", node=nid)
    return entry


class Graph:
    """A computation graph: tensors, nodes in execution order, outputs.

    Build one in code with :meth:`tensor` and :meth:`node`, or read one with
    :func:`load_graph`. Entries are checked as they are added; the whole graph
    is validated when planned (or by :meth:`validate`).
    """

    def __init__(self, name: str = "", source: str = ""):
        self.name = name
        self.source = source
        self.tensors: list[dict] = []
        self.nodes: list[dict] = []
        self.execution_order: list[str] | None = None
        self.outputs: list[str] = []
        self.safepoints: list[str] = []  # node ids where a PlanSession may replan
        self._symbols: dict[str, tuple[int, int]] = {}  # symbol -> (min, max), for tensor()

    # -- building -----------------------------------------------------------
    def tensor(self, id: str, shape: Iterable[int], dtype: str = "float32",
               role: str = "activation", *, nbytes: int | None = None,
               arena: str | None = None, alignment: int | None = None,
               saved_for_backward: bool = False, can_inplace: bool = False,
               view_of: str | None = None, byte_offset: int = 0,
               must_not_alias: Iterable[str] | None = None, module: str | None = None) -> str:
        """Add a tensor; returns its id. ``module``: the model's module path (reports only)."""
        raw = {"id": id, "shape": list(shape), "dtype": dtype, "role": role, "nbytes": nbytes,
               "arena": arena, "alignment": alignment,
               "saved_for_backward": saved_for_backward, "can_inplace": can_inplace,
               "must_not_alias": list(must_not_alias) if must_not_alias is not None else None,
               "module": module}
        if view_of is not None:
            raw["view_of"] = {"base": view_of, "byte_offset": byte_offset}
        entry = normalize_tensor(raw, len(self.tensors))
        for dim in entry["shape"]:  # one envelope per symbol
            if is_symbolic(dim):
                name, lo, hi = parse_symbolic_dim(dim, id)
                seen = self._symbols.setdefault(name, (lo, hi))
                if seen != (lo, hi):
                    raise _invalid(f"tensor {id!r}: symbol {name!r} is declared [{lo}, {hi}] here "
                                   f"but [{seen[0]}, {seen[1]}] before; every use of a symbol must "
                                   f"declare the same envelope", tensor=id)
        self.tensors.append(entry)
        return id

    def node(self, id: str, op: str, inputs: Iterable[str] = (), outputs: Iterable[str] = (),
             phase: str | None = None, module: str | None = None) -> str:
        """Add a node (runs after the nodes added before it); returns its id."""
        raw = {"id": id, "op": op, "inputs": list(inputs), "outputs": list(outputs),
               "phase": phase, "module": module}
        self.nodes.append(normalize_node(raw, len(self.nodes)))
        return id

    # -- documents ----------------------------------------------------------
    @classmethod
    def from_dict(cls, doc: Any) -> "Graph":
        """Read an `emel.graph/1` document (phase A checks)."""
        with _gc_paused():
            return cls._from_document(doc, owned=False)

    @classmethod
    def _from_document(cls, doc: Any, owned: bool) -> "Graph":
        """from_dict; ``owned``: the document was parsed here, its entries may be kept."""
        symbols = document_envelope(doc)  # symbolic dims first, as in the reference
        if not isinstance(doc, dict):
            raise _invalid(f"a graph document must be a JSON object, got {type(doc).__name__}")
        if doc.get("format") != FORMAT:
            raise _invalid(f"'format' must be {FORMAT!r}, got {doc.get('format')!r}")
        for key in ("tensors", "nodes"):
            if not isinstance(doc.get(key), list):
                raise _invalid(f"'{key}' must be a list, got {type(doc.get(key)).__name__}")
        for key in ("name", "source"):
            if doc.get(key) is not None and not is_text(doc[key]):
                raise _invalid(f"'{key}' must be a UTF-8 string, got {doc[key]!r}")
        g = cls(name=doc.get("name") or "", source=doc.get("source") or "")
        g._symbols = dict(symbols)
        g.tensors = [normalize_tensor(t, i, owned) for i, t in enumerate(doc["tensors"])]
        g.nodes = [normalize_node(n, i, owned) for i, n in enumerate(doc["nodes"])]
        if doc.get("execution_order") is not None:
            g.execution_order = _check_id_list(doc["execution_order"], "'execution_order'")
        if doc.get("outputs") is not None:
            g.outputs = _check_id_list(doc["outputs"], "'outputs'")
        if doc.get("safepoints") is not None:
            g.safepoints = _check_id_list(doc["safepoints"], "'safepoints'")
        return g

    def to_dict(self) -> dict:
        """The graph as an `emel.graph/1` document."""
        doc: dict[str, Any] = {"format": FORMAT, "name": self.name}
        if self.source:
            doc["source"] = self.source
        doc["tensors"] = [_copy_entry(t) for t in self.tensors]
        doc["nodes"] = [_copy_entry(n) for n in self.nodes]
        if self.execution_order is not None:
            doc["execution_order"] = list(self.execution_order)
        if self.outputs:
            doc["outputs"] = list(self.outputs)
        if self.safepoints:
            doc["safepoints"] = list(self.safepoints)
        return doc

    def to_json(self, indent: int | None = None) -> str:
        """The graph as `emel.graph/1` JSON text."""
        return json.dumps(self.to_dict(), indent=indent)

    @property
    def shape_envelope(self) -> ShapeEnvelope:
        """The range of every symbolic dimension (empty for a concrete graph)."""
        return envelope_of_tensors(self.tensors)

    # -- checks -------------------------------------------------------------
    def validate(self) -> "Graph":
        """Run the full validation (docs/algorithm.md §1); raise PlanError."""
        from . import _core
        try:
            _core.validate(self._core_input())
        except MemoryError:  # std::bad_alloc from the core
            raise out_of_memory(self, "validating") from None
        return self

    def _core_input(self):
        """The graph as the C++ core's GraphInput (built anew: the graph may change)."""
        from . import _core
        core = _core.GraphInput()
        if not is_text(self.name):  # set by hand after construction
            raise _invalid(f"the graph's name must be a UTF-8 string, got {self.name!r}")
        core.name = self.name
        shapes = [_core_shape(t["shape"]) for t in self.tensors]
        if any(s is not t["shape"] for s, t in zip(shapes, self.tensors)):
            envelope_of_tensors(self.tensors)  # symbols stay consistent after edits by hand
        core.add_tensors([
            (t["id"], shape, t["dtype"], t.get("nbytes"), ROLES.index(t["role"]),
             t.get("arena", ""), t.get("alignment", 0), t.get("saved_for_backward", False),
             t.get("can_inplace", False),
             t["view_of"]["base"] if "view_of" in t else None,
             t["view_of"]["byte_offset"] if "view_of" in t else 0,
             t.get("must_not_alias", []))
            for t, shape in zip(self.tensors, shapes)])
        core.add_nodes([
            (n["id"], 0 if "phase" not in n else 1 + PHASES.index(n["phase"]),
             n["inputs"], n["outputs"])
            for n in self.nodes])
        if self.execution_order is not None:
            core.set_execution_order(_check_id_list(self.execution_order, "'execution_order'"))
        core.set_outputs(_check_id_list(self.outputs, "'outputs'"))
        return core

    def __len__(self) -> int:
        return len(self.tensors)

    def __repr__(self) -> str:
        return (f"Graph(name={self.name!r}, tensors={len(self.tensors)}, "
                f"nodes={len(self.nodes)})")

    def summary_rows(self) -> list[dict]:
        """Tensors and bytes per role, in role order (views counted apart: they own no bytes)."""
        rows = {role: {"role": role, "tensors": 0, "views": 0, "bytes": 0} for role in ROLES}
        for t in self.tensors:
            row = rows[t["role"]]
            if "view_of" in t:
                row["views"] += 1
            else:
                row["tensors"] += 1
                row["bytes"] += tensor_bytes(t)
        return [row for row in rows.values() if row["tensors"] or row["views"]]

    def _repr_html_(self) -> str:
        import html
        rows = self.summary_rows()
        body = "".join(f"<tr><td>{r['role']}</td><td>{r['tensors']}</td><td>{r['views']}</td>"
                       f"<td>{format_bytes(r['bytes'])}</td></tr>" for r in rows)
        flags = sum(1 for t in self.tensors if t.get("can_inplace"))
        saved = sum(1 for t in self.tensors if t.get("saved_for_backward"))
        title = html.escape(f"{self.name or '(unnamed)'}: {len(self.tensors)} tensors, "
                            f"{len(self.nodes)} nodes, {flags} can_inplace, {saved} saved for backward")
        return (f"<div><b>Graph</b> {title}<table><tr><th>role</th><th>tensors</th><th>views</th>"
                f"<th>bytes</th></tr>{body}</table></div>")


#: bytes per element of the dtypes the format sizes by shape.
DTYPE_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1,
               "float8_e5m2": 1, "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1,
               "bool": 1}


def out_of_memory(g: Graph, doing: str) -> PlanError:
    """ALLOCATION_FAILED for a graph too big for the host's memory, with its size."""
    n_nodes = len(g._arrays["in_start"]) - 1 if hasattr(g, "_arrays") else len(g.nodes)
    return PlanError("ALLOCATION_FAILED", f"the host ran out of memory {doing} graph "
                                          f"{g.name or '(unnamed)'}: {len(g)} tensors, {n_nodes} nodes "
                                          f"(std::bad_alloc)")


def tensor_bytes(entry: dict) -> int:
    """A tensor entry's bytes: ``nbytes`` when given, else shape x element size."""
    if "nbytes" in entry:
        return entry["nbytes"]
    n = DTYPE_BYTES.get(entry["dtype"], 0)
    for d in entry["shape"]:
        n *= d
    return n


def _core_shape(shape: list) -> list:
    """The shape the core plans: symbolic dims at their maximum (a fast
    test first: most graphs have none)."""
    return concrete_shape(shape) if dict in map(type, shape) else shape


def _copy_entry(entry: dict) -> dict:
    out = {}
    for key, value in entry.items():
        out[key] = dict(value) if isinstance(value, dict) else (
            [dict(x) if isinstance(x, dict) else x for x in value]  # symbolic dims are dicts
            if isinstance(value, list) else value)
    return out


def load_graph(source: Any) -> Graph:
    """A Graph from a path, an `emel.graph/1` dict, a JSON string or a Graph."""
    if isinstance(source, Graph):
        return source
    if isinstance(source, dict):
        return Graph.from_dict(source)
    with _gc_paused():
        if isinstance(source, str) and source.lstrip().startswith("{"):
            return Graph._from_document(_parse_json(source, "<string>"), owned=True)
        if isinstance(source, (str, bytes, os.PathLike)):
            where = os.fsdecode(source)
            # the bytes go before parsing: less peak memory
            text = _decode(read_input_file(source), where)
            return Graph._from_document(_parse_json(text, where), owned=True)
    raise TypeError(f"load_graph takes a path, a dict or a JSON string, not {type(source).__name__}")


#: The most bytes an input file (graph, trace, shard spec, model, CSV) may hold
#: (a 10^6-tensor graph is 120 MiB): past it the file is refused, not read.
MAX_INPUT_BYTES = 2**32


def check_input_file(path: Any) -> str:
    """``path`` as text, once it names a regular file of at most MAX_INPUT_BYTES:
    a device (/dev/zero), a FIFO or a directory is never opened (reading would
    not end, or opening would block). FileNotFoundError when there is nothing
    at ``path``; INVALID_IR_SHAPES otherwise."""
    where = os.fsdecode(path)
    mode = os.stat(path)
    if not stat.S_ISREG(mode.st_mode):
        raise _invalid(f"{where} is not a regular file (a device, pipe or directory): "
                       f"inputs are read from files")
    if mode.st_size > MAX_INPUT_BYTES:
        raise _invalid(f"{where} holds {format_bytes(mode.st_size)}, more than the "
                       f"{format_bytes(MAX_INPUT_BYTES)} an input may")
    return where


def read_input_file(path: Any) -> bytes:
    """The bytes of the regular file ``path`` (:func:`check_input_file`), read
    to at most MAX_INPUT_BYTES even if it grows meanwhile."""
    where = check_input_file(path)
    with open(path, "rb") as f:
        # Its size and a byte more, not the bound: read(n) reserves n bytes
        # first. A file that grew meanwhile is read on in chunks.
        parts = [f.read(min(os.fstat(f.fileno()).st_size, MAX_INPUT_BYTES) + 1)]
        total = len(parts[0])
        while parts[-1] and total <= MAX_INPUT_BYTES:
            parts.append(f.read(min(1 << 20, MAX_INPUT_BYTES + 1 - total)))
            total += len(parts[-1])
    if total > MAX_INPUT_BYTES:
        raise _invalid(f"{where} grew past the {format_bytes(MAX_INPUT_BYTES)} an input may hold")
    parts = [p for p in parts if p]
    return parts[0] if len(parts) == 1 else b"".join(parts)


@contextlib.contextmanager
def _gc_paused():
    """No cyclic garbage collection while a document's millions of containers
    are made: each full pass walks them all (most of the time of a 10^6-tensor
    load). Reading creates no cycles; the collector resumes after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _decode(data: bytes, where: str) -> str:
    """JSON bytes as text, in the encoding json.loads would detect."""
    if data.startswith((b"PK\x03\x04", b"\x80\x02", b"\x80\x04", b"\x80\x05")):
        # torch.save writes a zip archive (a pickle before torch 1.6)
        raise _invalid(f"{where} looks like a PyTorch file (torch.save), not an emel.graph/1 JSON "
                       f"document: trace the model with emel-import --torch MODULE:FUNCTION (a "
                       f"function returning the model and example inputs) or emel.memory.from_torch")
    try:
        return data.decode(json.detect_encoding(data), "surrogatepass")
    except UnicodeDecodeError as e:
        raise _invalid(f"{where} is not UTF-8 text: {e}") from None


def _unique_keys(where: str):
    """An ``object_pairs_hook`` refusing an object that repeats a key: JSON
    leaves such a document's meaning to the parser (Python keeps the last
    value), so a tensor giving two shapes would be planned with one of them
    silently. About 5% more load time on a 10^6-tensor document."""
    def hook(pairs):
        obj = dict(pairs)
        if len(obj) != len(pairs):
            seen = set()
            for key, _ in pairs:  # the first key met a second time
                if key in seen:
                    break
                seen.add(key)
            ident = obj.get("id")
            owner = f" (the object with id {ident!r})" if isinstance(ident, str) else ""
            raise _invalid(f"{where}: a JSON object repeats the key {key!r}{owner}; each key may appear once",
                           tensor=ident if isinstance(ident, str) and "shape" in obj else None,
                           node=ident if isinstance(ident, str) and "op" in obj and "shape" not in obj else None)
        return obj
    return hook


def _parse_json(text: str | bytes, where: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_unique_keys(where))
    except json.JSONDecodeError as e:
        raise _invalid(f"{where} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except UnicodeDecodeError as e:
        raise _invalid(f"{where} is not UTF-8 text: {e}") from None
    except RecursionError:
        raise _invalid(f"{where} nests JSON too deeply to be a graph document") from None


class ArrayGraph(Graph):
    """A graph given as index arrays (:meth:`Graph.from_arrays`): no Python object
    per tensor until one is asked for. Read-only; ``tensors``/``nodes`` and
    :meth:`to_dict` build the document on first use."""

    def __init__(self, core_input, arrays: dict, name: str):  # noqa: D107 (see from_arrays)
        self.name = name
        self.source = "Graph.from_arrays"
        self.execution_order = None
        self._core = core_input
        self._arrays = arrays
        self._doc = None
        self.safepoints = []

    def _document(self) -> dict:
        if self._doc is None:
            a = self._arrays
            sizes = a["size"].tolist()
            t_width = len(str(max(len(sizes) - 1, 0)))
            n_nodes = len(a["in_start"]) - 1
            n_width = len(str(max(n_nodes - 1, 0)))
            tid = [f"t{i:0{t_width}d}" for i in range(len(sizes))]
            roles = a["role"].tolist() if len(a["role"]) else [ROLES.index("activation")] * len(sizes)
            inplace = a["can_inplace"].tolist() if len(a["can_inplace"]) else [0] * len(sizes)
            align = a["alignment"].tolist() if len(a["alignment"]) else [0] * len(sizes)
            base = a["view_base"].tolist() if len(a["view_base"]) else [-1] * len(sizes)
            boff = a["view_offset"].tolist() if len(a["view_offset"]) else [0] * len(sizes)
            tensors = []
            for i, size in enumerate(sizes):
                t = {"id": tid[i], "shape": [size], "dtype": "uint8", "role": ROLES[roles[i]]}
                if align[i]:
                    t["alignment"] = align[i]
                if inplace[i]:
                    t["can_inplace"] = True
                if base[i] >= 0:
                    t["view_of"] = {"base": tid[base[i]], "byte_offset": boff[i]}
                tensors.append(t)
            ins, outs = a["in_index"].tolist(), a["out_index"].tolist()
            in_start, out_start = a["in_start"].tolist(), a["out_start"].tolist()
            nodes = [{"id": f"n{j:0{n_width}d}", "op": "op",
                      "inputs": [tid[k] for k in ins[in_start[j]:in_start[j + 1]]],
                      "outputs": [tid[k] for k in outs[out_start[j]:out_start[j + 1]]]}
                     for j in range(n_nodes)]
            self._doc = {"tensors": tensors, "nodes": nodes,
                         "outputs": [tid[k] for k in a["outputs"].tolist()]}
        return self._doc

    @property
    def tensors(self) -> list:
        return self._document()["tensors"]

    @property
    def nodes(self) -> list:
        return self._document()["nodes"]

    @property
    def outputs(self) -> list:
        return self._document()["outputs"]

    def tensor(self, *args, **kwargs):
        raise TypeError("a graph made by Graph.from_arrays is read-only; "
                        "use Graph.from_dict(g.to_dict()) for an editable copy")

    node = tensor

    @property
    def shape_envelope(self) -> ShapeEnvelope:
        return ShapeEnvelope()  # sizes given as arrays are concrete

    def _core_input(self):
        return self._core

    def __len__(self) -> int:
        return len(self._arrays["size"])

    def __repr__(self) -> str:
        return (f"Graph(name={self.name!r}, tensors={len(self._arrays['size'])}, "
                f"nodes={len(self._arrays['in_start']) - 1}, from_arrays)")


def _from_arrays(cls, sizes, node_inputs, node_outputs, *, roles=None, can_inplace=None,
                 alignment=None, view_of=None, view_offset=None, outputs=None, name=""):
    """A graph from NumPy arrays, for graphs too big for one object per tensor.

    ``sizes``: bytes per tensor (tensor ``i`` gets the id ``t<i>``, zero-padded
    so id order is index order). ``node_inputs`` / ``node_outputs``: CSR pairs
    ``(indptr, indices)`` — node ``j`` (id ``n<j>``, run in index order) reads
    ``indices[indptr[j]:indptr[j+1]]``. Optional per-tensor arrays: ``roles``
    (role names or codes in ``ROLES`` order), ``can_inplace`` (bool),
    ``alignment`` (0 = none), ``view_of`` (base index, -1 for storage) with
    ``view_offset``; ``outputs``: tensor indices the graph hands back.
    """
    import numpy as np

    from . import _core

    n_tensors = len(sizes) if hasattr(sizes, "__len__") else 0
    width = len(str(max(n_tensors - 1, 0)))

    def arr(values, dtype, what, lo=0, hi=None, per_tensor=False, flags=False):
        return _exact_ints(values, dtype, what, lo, hi, width if per_tensor else None, flags)

    if roles is not None:
        roles = _int_list_array(roles, "roles")  # ragged input is refused here
        if roles.dtype.kind in "US":
            lookup = {r: i for i, r in enumerate(ROLES)}
            try:
                roles = np.array([lookup[str(r)] for r in roles.tolist()], dtype=np.uint8)
            except KeyError as e:
                raise _invalid(f"unknown role {e.args[0]!r} (expected one of {', '.join(ROLES)})") from None
    pairs = {}
    for what, pair in (("node_inputs", node_inputs), ("node_outputs", node_outputs)):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise _invalid(f"{what} must be a pair (indptr, indices)")
        pairs[what] = pair
    arrays = {
        "size": arr(sizes, np.uint64, "sizes", per_tensor=True),
        "in_start": arr(pairs["node_inputs"][0], np.uint64, "node_inputs indptr"),
        "in_index": arr(pairs["node_inputs"][1], np.uint64, "node_inputs indices"),
        "out_start": arr(pairs["node_outputs"][0], np.uint64, "node_outputs indptr"),
        "out_index": arr(pairs["node_outputs"][1], np.uint64, "node_outputs indices"),
        "role": arr(roles, np.uint8, "roles", hi=len(ROLES) - 1, per_tensor=True),
        "can_inplace": arr(can_inplace, np.uint8, "can_inplace", hi=1, per_tensor=True, flags=True),
        "alignment": arr(alignment, np.uint64, "alignment", per_tensor=True),
        "view_base": arr(view_of, np.int64, "view_of", lo=-1, per_tensor=True),
        "view_offset": arr(view_offset, np.uint64, "view_offset", per_tensor=True),
        "outputs": arr(outputs, np.uint64, "outputs"),
    }
    for key in ("in", "out"):  # the core's own checks of the CSR shape, as PlanError
        start, index = arrays[f"{key}_start"], arrays[f"{key}_index"]
        if len(start) != len(arrays["in_start"]) or len(start) == 0:
            raise _invalid("node_inputs and node_outputs need one indptr of num_nodes + 1 entries each, "
                           f"got {len(arrays['in_start'])} and {len(arrays['out_start'])}")
        if np.any(start[1:] < start[:-1]):
            j = int(np.argmax(start[1:] < start[:-1]))
            raise _invalid(f"node_{key}puts indptr decreases at node {j}", node=f"n{j}")
        if int(start[-1]) > len(index):
            raise _invalid(f"node_{key}puts indptr ends at {int(start[-1])}, past its {len(index)} indices")
    for key in ("role", "can_inplace", "alignment", "view_base", "view_offset"):
        if len(arrays[key]) not in (0, len(arrays["size"])):
            raise _invalid(f"{key}: one entry per tensor expected, got {len(arrays[key])} "
                           f"for {len(arrays['size'])} tensors")
    if not is_text(name):
        raise _invalid(f"the graph's name must be a UTF-8 string, got {name!r}")
    try:
        core = _core.GraphInput.from_arrays(
            arrays["size"], arrays["in_start"], arrays["in_index"], arrays["out_start"],
            arrays["out_index"], arrays["role"], arrays["can_inplace"], arrays["alignment"],
            arrays["view_base"], arrays["view_offset"], arrays["outputs"], name)
    except MemoryError:  # std::bad_alloc: the host's memory
        raise PlanError("ALLOCATION_FAILED", f"the host ran out of memory reading graph {name or '(unnamed)'}: "
                                             f"{len(arrays['size'])} tensors, {len(arrays['in_start']) - 1} "
                                             f"nodes (std::bad_alloc)") from None
    return ArrayGraph(core, arrays, name)


Graph.from_arrays = classmethod(_from_arrays)


def _int_list_array(values, what="values"):
    """np.asarray(values), but a list of Python ints that NumPy would make
    float64 (one of them >= 2^63 beside a small one) stays exact, as objects.
    What NumPy cannot make an array of (ragged lists) is INVALID_IR_SHAPES."""
    import numpy as np

    values = [] if values is None else values
    try:
        a = np.asarray(values)
    except (ValueError, TypeError, OverflowError) as e:
        raise _invalid(f"{what} must be a 1-D array of integers: {e}") from None
    if a.dtype.kind == "f" and a.ndim == 1 and not isinstance(values, np.ndarray) \
            and all(is_int(v) for v in values):
        a = np.array(list(values), dtype=object)
    return a


def _exact_ints(values, dtype, what, lo, hi, width, flags):
    """``values`` as a contiguous array of ``dtype``, refusing whatever that
    would change (4.9 -> 4, 258 -> 2 as uint8, 0.5 -> 0): each value must be an
    integer in [lo, hi] (hi: the dtype's max by default). ``flags`` also takes
    bools. ``width``: name per-tensor offenders by id (None: by position)."""
    import numpy as np

    a = _int_list_array(values, what)
    if a.ndim != 1:
        raise _invalid(f"{what} must be a 1-D array, got shape {a.shape}")
    if a.size == 0:
        return np.zeros(0, dtype=dtype)
    hi = int(np.iinfo(dtype).max) if hi is None else hi
    kind = a.dtype.kind
    if kind == "b" and flags:
        return np.ascontiguousarray(a, dtype=dtype)
    if kind in "iu":
        bad = (a < lo) | (a > hi)
    elif kind == "f":  # integral floats in range are exact; hi + 1 is a power of two or small
        bad = ~np.isfinite(a) | (a != np.floor(a)) | (a < lo) | (a >= float(hi + 1))
    elif kind == "O":
        bad = np.array([not (is_int(v) and lo <= v <= hi) for v in a.tolist()])
    else:
        bad = np.ones(a.shape, dtype=bool)
    if bad.any():
        i = int(np.argmax(bad))
        tid = None if width is None else f"t{i:0{width}d}"
        where = f"{what}[{i}]" + (f" (tensor {tid})" if tid else "")
        raise _invalid(f"{where} = {a[i].item() if kind != 'O' else a[i]!r} is not an integer in [{lo}, {hi}]"
                       + (" (nor a bool)" if flags else ""), tensor=tid)
    return np.ascontiguousarray(a.astype(object).astype(dtype) if kind == "O" else a, dtype=dtype)
