"""Symbolic dimensions and shape envelopes: parsing, :class:`ShapeEnvelope`,
:func:`resolve` (docs/dynamic-shapes-and-sharding.md).

Bottom layer (tests/test_layers.py), standard library only: the graph
document, the pure-Python reference and the planner all use it. Replanning
(:class:`DynamicPlanner`, :class:`PlanSession`) needs the planner and lives
in emel.memory.shapes, which re-exports everything here: these names were
defined there before, and ``from emel.memory.shapes import ...`` keeps working.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from . import cbor
from .errors import PlanError, U64_MAX, check_u64

SYMBOLIC_DIM_KEYS = ("sym", "min", "max")
#: The tag that opens the hashed structure of an envelope.
ENVELOPE_FORMAT = "emel.shape_envelope/1"
REPLAN_POLICIES = ("ABORT", "REPLAN_AT_SAFEPOINT")
#: How a replan widens a symbol's maximum: to the runtime value, or to the
#: next power of two (fewer replans, and more cache hits, for growing sizes).
GROWTH = ("exact", "pow2")


def _invalid(message: str, tensor=None, node=None) -> PlanError:
    return PlanError("INVALID_IR_SHAPES", message, tensor=tensor, node=node)



def is_symbolic(dim) -> bool:
    """True for a symbolic dimension (a JSON object); integers are concrete."""
    return isinstance(dim, dict)


def parse_symbolic_dim(dim: dict, tensor: str | None = None) -> tuple[str, int, int]:
    """``(name, min, max)`` of a symbolic dimension; PlanError naming ``tensor``
    when it is malformed. ``min`` defaults to 0; a ``null`` counts as absent."""
    where = f"tensor {tensor!r}: " if tensor else ""
    unknown = sorted(str(key) for key in dim if key not in SYMBOLIC_DIM_KEYS)
    if unknown:
        raise _invalid(f"{where}symbolic dimension {dim!r} has unknown key {unknown[0]!r} "
                       f"(expected {', '.join(SYMBOLIC_DIM_KEYS)})", tensor=tensor)
    name = dim.get("sym")
    if not isinstance(name, str) or not name:
        raise _invalid(f"{where}symbolic dimension {dim!r}: 'sym' must be a non-empty string",
                       tensor=tensor)
    if dim.get("max") is None:
        raise _invalid(f"{where}symbolic dimension {name!r} has no 'max': the envelope must be "
                       f"declared", tensor=tensor)
    hi = check_u64(dim["max"], f"{where}the max of symbol {name!r}", tensor)
    lo = 0 if dim.get("min") is None else check_u64(dim["min"], f"{where}the min of symbol {name!r}",
                                                      tensor)
    if lo > hi:
        raise _invalid(f"{where}symbol {name!r} has min {lo} > max {hi}", tensor=tensor)
    return name, lo, hi


class ShapeEnvelope(Mapping):
    """The declared range of every symbol: name -> ``(min, max)``, in name order.

    Its :attr:`hash` is SHA-256 over the canonical CBOR of
    ``["emel.shape_envelope/1", [[name, min, max], ...]]`` (names sorted by
    code point): arrays of text and unsigned integers only, so every
    canonical CBOR encoder gives the same bytes.
    """

    def __init__(self, bounds: Mapping | None = None):
        items = {}
        for name, pair in (bounds or {}).items():
            if not isinstance(name, str) or not name:
                raise _invalid(f"a symbol name must be a non-empty string, got {name!r}")
            lo, hi = pair
            check_u64(lo, f"the min of symbol {name!r}")
            check_u64(hi, f"the max of symbol {name!r}")
            if lo > hi:
                raise _invalid(f"symbol {name!r} has min {lo} > max {hi}")
            items[name] = (lo, hi)
        self._bounds = dict(sorted(items.items()))

    def __getitem__(self, name: str) -> tuple[int, int]:
        return self._bounds[name]

    def __iter__(self):
        return iter(self._bounds)

    def __len__(self) -> int:
        return len(self._bounds)

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}=[{lo}, {hi}]" for name, (lo, hi) in self._bounds.items())
        return f"ShapeEnvelope({inner})"

    def to_dict(self) -> dict:
        """``{name: {"min": lo, "max": hi}}`` (JSON-ready)."""
        return {name: {"min": lo, "max": hi} for name, (lo, hi) in self._bounds.items()}

    def canonical(self) -> list:
        """The structure that is hashed (see the class docstring)."""
        return [ENVELOPE_FORMAT, [[name, lo, hi] for name, (lo, hi) in self._bounds.items()]]

    @property
    def hash(self) -> str:
        """shape_envelope_hash: SHA-256 (hex) of the canonical CBOR of :meth:`canonical`."""
        return hashlib.sha256(cbor.dumps(self.canonical())).hexdigest()

    def check_values(self, values: Mapping) -> dict:
        """Runtime symbol values, checked: known names, integers >= 0."""
        if not isinstance(values, Mapping):
            raise _invalid(f"runtime shapes must map symbol names to sizes, got {values!r}")
        out = {}
        for name in sorted(values, key=str):
            if name not in self._bounds:
                known = ", ".join(self._bounds) or "none"
                raise _invalid(f"unknown symbol {name!r} (the graph's symbols: {known})")
            out[name] = check_u64(values[name], f"the runtime size of symbol {name!r}")
        return out

    def violations(self, values: Mapping) -> list[tuple[str, int, int, int]]:
        """``(name, value, min, max)`` for every value outside its range, by name."""
        return [(name, value, *self._bounds[name])
                for name, value in self.check_values(values).items()
                if not self._bounds[name][0] <= value <= self._bounds[name][1]]

    def contains(self, values: Mapping) -> bool:
        return not self.violations(values)

    def widened(self, values: Mapping, growth: str = "exact") -> "ShapeEnvelope":
        """The smallest envelope holding this one and ``values``; with
        ``growth="pow2"`` a raised maximum goes up to the next power of two."""
        if growth not in GROWTH:
            raise ValueError(f"growth must be one of {', '.join(GROWTH)}; got {growth!r}")
        bounds = dict(self._bounds)
        for name, value in self.check_values(values).items():
            lo, hi = bounds[name]
            if value > hi:
                grown = 1 << (value - 1).bit_length() if growth == "pow2" else value
                hi = grown if grown <= U64_MAX else value
            bounds[name] = (min(lo, value), hi)
        return ShapeEnvelope(bounds)


_INT = {int}


def envelope_of_tensors(tensors) -> ShapeEnvelope:
    """The envelope declared by the symbolic dimensions of ``tensors``.

    Checks every symbolic dimension, that all uses of a symbol declare the
    same ``(min, max)``, and that no tensor with a symbolic dimension states
    ``nbytes``. Entries malformed in other ways are skipped: the document
    checks (phase A) report them.
    """
    bounds: dict[str, tuple[int, int, str | None]] = {}
    for t in tensors:
        if not isinstance(t, dict) or not isinstance(t.get("shape"), list):
            continue
        if set(map(type, t["shape"])) <= _INT:  # fast: most tensors have only integer dims
            continue
        symbolic = [dim for dim in t["shape"] if is_symbolic(dim)]
        if not symbolic:
            continue
        tid = t["id"] if isinstance(t.get("id"), str) and t["id"] else None
        for dim in symbolic:
            name, lo, hi = parse_symbolic_dim(dim, tid)
            seen = bounds.setdefault(name, (lo, hi, tid))
            if seen[:2] != (lo, hi):
                raise _invalid(f"tensor {tid!r}: symbol {name!r} is declared [{lo}, {hi}] here but "
                               f"[{seen[0]}, {seen[1]}] at tensor {seen[2]!r}; every use of a symbol "
                               f"must declare the same envelope", tensor=tid)
        if t.get("nbytes") is not None:
            raise _invalid(f"tensor {tid!r} has a symbolic dimension, so it may not state nbytes "
                           f"(its size comes from its shape)", tensor=tid)
    return ShapeEnvelope({name: (lo, hi) for name, (lo, hi, _) in bounds.items()})


def document_envelope(document) -> ShapeEnvelope:
    """The envelope of an ``emel.graph/1`` document (empty when it has no symbols)."""
    tensors = document.get("tensors") if isinstance(document, dict) else None
    return envelope_of_tensors(tensors) if isinstance(tensors, list) else ShapeEnvelope()


def concrete_shape(shape: list, envelope: Mapping | None = None) -> list:
    """``shape`` with every symbolic dimension at its maximum (the envelope's,
    or the one it declares itself)."""
    return [dim if not is_symbolic(dim) else
            (dim["max"] if envelope is None else envelope[dim["sym"]][1]) for dim in shape]


def resolve(document, envelope: Mapping | None = None):
    """The document with every symbolic dimension replaced by its maximum in
    ``envelope`` (default: the envelope the document declares).

    Checks the symbolic dimensions first (:func:`envelope_of_tensors`).
    Returns ``document`` itself when it has none; otherwise a copy (the input
    is never modified).
    """
    declared = document_envelope(document)
    if not declared:
        return document
    if envelope is not None:
        missing = [name for name in declared if name not in envelope]
        if missing:
            raise _invalid(f"the envelope has no range for symbol {missing[0]!r}")
    out = dict(document)
    out["tensors"] = [
        dict(t, shape=concrete_shape(t["shape"], envelope))
        if isinstance(t, dict) and isinstance(t.get("shape"), list)
        and any(is_symbolic(dim) for dim in t["shape"]) else t
        for t in document["tensors"]]
    return out


def resolve_at(document, values: Mapping):
    """The document with the symbols of ``values`` (``{name: size}``) at those
    sizes and every other symbolic dimension at its maximum: a concrete graph
    for one point of the envelope.

    A value outside its symbol's declared range raises PlanError
    ``SHAPE_ENVELOPE_EXCEEDED`` naming the first tensor (in document order)
    that uses the symbol; an unknown symbol is ``INVALID_IR_SHAPES``.
    """
    declared = document_envelope(document)
    checked = declared.check_values(values)
    for name, value, lo, hi in declared.violations(checked):
        first = next(t["id"] for t in document["tensors"]
                     if any(is_symbolic(d) and d.get("sym") == name for d in t.get("shape", [])))
        raise PlanError("SHAPE_ENVELOPE_EXCEEDED",
                        f"symbol {name!r} = {value} is outside its envelope [{lo}, {hi}] "
                        f"(declared at tensor {first!r})", tensor=first)
    point = {name: (lo, checked.get(name, hi)) for name, (lo, hi) in declared.items()}
    return resolve(document, ShapeEnvelope(point))
