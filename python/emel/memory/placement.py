"""place(): the low-level placement API over NumPy arrays (docs/strategies.md §6)."""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _core
from .errors import PlanError, U64_MAX, is_int
from .graph import _int_list_array, check_input_file
from .planning import DEFAULT_TIME_BUDGET_MS, check_strategy, core_budget



@dataclass(frozen=True)
class Placement:
    """The result of :func:`place`: ``offsets`` (uint64, one per row) and ``size``.

    Two bounds, different things (docs/architecture.md, "Bounds"):
    ``lower_bound`` is the rows' peak of live bytes (sizes rounded to the
    alignment), which no placement can go below, for every strategy;
    ``proven_bound`` is what auto / optimal proved about ``size`` within its
    budget (``optimal`` when it reaches ``size``).
    """
    offsets: np.ndarray
    size: int
    strategy: str
    method: str
    lower_bound: int   # the rows' peak of live bytes
    optimal: bool
    proven_bound: int  # the search's proven bound (auto, optimal)
    work: int

    def __iter__(self):  # offsets, size = place(...)
        return iter((self.offsets, self.size))


def _as_u64(values: Any, what: str) -> np.ndarray:
    if values is None:
        raise ValueError(f"{what} must be a 1-D array, got None")
    arr = _int_list_array(values, what)  # Python ints up to 2^64-1 stay exact
    if arr.dtype.kind == "O" and arr.ndim == 1:
        bad = [i for i, v in enumerate(arr.tolist()) if not is_int(v) or not 0 <= v <= U64_MAX]
        if bad:
            raise PlanError("INVALID_IR_SHAPES", f"{what}[{bad[0]}] = {arr[bad[0]]!r} is not an integer "
                                                 f"in [0, 2^64)", tensor=str(bad[0]))
        arr = arr.astype(np.uint64)
    if arr.ndim != 1:
        raise ValueError(f"{what} must be a 1-D array, got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        raise ValueError(f"{what} must hold integers, got dtype {arr.dtype}")
    if arr.size and arr.dtype.kind == "i" and arr.min() < 0:
        raise PlanError("INVALID_IR_SHAPES", f"{what} has a negative value at row {int(arr.argmin())}",
                        tensor=str(int(arr.argmin())))
    if arr.dtype == np.int64:  # checked non-negative above: the same bits, no copy
        return np.ascontiguousarray(arr).view(np.uint64)
    return np.ascontiguousarray(arr, dtype=np.uint64)


def place(lower: Any, upper: Any, size: Any, strategy: str = "auto",
          alignment: int = 1, *, fit: str = "best",
          time_budget_ms: int | None = DEFAULT_TIME_BUDGET_MS, capacity: int | None = None) -> Placement:
    """Place buffers live over half-open ``[lower[i], upper[i])`` with ``size[i]`` bytes.

    Returns a :class:`Placement`; ``offsets, size = place(...)`` also works.
    ``strategy`` is ``auto`` by default, as in ``plan()``: the heuristics, the
    smallest kept, then a bounded exact search (docs/strategies.md).
    Offsets are multiples of ``alignment`` and sizes are rounded up to it; the
    row index breaks ties. Two rows conflict when their intervals intersect.
    ``capacity`` (auto / optimal): a target size to try first, the way
    MiniMalloc's benchmarks pose each instance; the search still minimises.
    ``time_budget_ms`` (auto / optimal): deterministic work units worth about
    that many milliseconds; None (the default) follows the default-budget
    policy (docs/strategies.md §4).
    """
    check_strategy(strategy, fit, time_budget_ms)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment < 1 \
            or alignment & (alignment - 1) or alignment > U64_MAX:
        raise PlanError("ALIGNMENT_VIOLATION", f"alignment must be a power of two, got {alignment!r}")
    lo, hi, sz = (_as_u64(v, name) for v, name in ((lower, "lower"), (upper, "upper"), (size, "size")))
    if not (len(lo) == len(hi) == len(sz)):
        raise ValueError(f"lower, upper and size must have one length, got {len(lo)}, {len(hi)}, {len(sz)}")
    if capacity is not None and (not isinstance(capacity, int) or isinstance(capacity, bool)
                                 or capacity < 0 or capacity > U64_MAX):
        raise ValueError(f"capacity must be an integer in [0, 2^64), got {capacity!r}")
    offsets, end, info = _core.place(lo, hi, sz, strategy, alignment, fit,
                                     core_budget(time_budget_ms), capacity or 0)
    return Placement(offsets=offsets, size=int(end), strategy=strategy, method=info["method"],
                     lower_bound=int(info["lower_bound"]), optimal=bool(info["optimal"]),
                     proven_bound=int(info["proven_bound"]), work=int(info["work"]))


def read_buffers_csv(path: str | os.PathLike):
    """Read an ``id,lower,upper,size`` CSV (MiniMalloc / idealloc benchmarks).

    Returns ``(ids, lower, upper, size)``: ids as a list of strings, the rest
    as int64 arrays. Intervals are half-open ``[lower, upper)``, which is what
    :func:`place` takes; a planner lifetime ``[birth, death]`` (inclusive) is
    ``[birth, death + 1)``.
    """
    try:
        return _read_buffers_csv(path)
    except UnicodeDecodeError as e:
        raise PlanError("INVALID_IR_SHAPES", f"{os.fspath(path)}: not UTF-8 text ({e.reason} at "
                                             f"byte {e.start})") from None


def _read_buffers_csv(path):
    ids, cols = [], ([], [], [])
    check_input_file(path)
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None or [h.strip() for h in header[:4]] != ["id", "lower", "upper", "size"]:
            raise PlanError("INVALID_IR_SHAPES", f"{os.fspath(path)}: expected the header "
                                                 f"'id,lower,upper,size', got {header!r}")
        for line, row in enumerate(reader, start=2):
            if not row:
                continue
            if len(row) < 4:
                raise PlanError("INVALID_IR_SHAPES", f"{os.fspath(path)}:{line}: expected 4 fields, "
                                                     f"got {len(row)}")
            try:
                values = [int(row[1]), int(row[2]), int(row[3])]
            except ValueError:
                raise PlanError("INVALID_IR_SHAPES", f"{os.fspath(path)}:{line}: lower, upper and size "
                                                     f"must be integers, got {row[1:4]}",
                                tensor=row[0]) from None
            for name, v in zip(("lower", "upper", "size"), values):
                if v > 2**63 - 1:  # the arrays are int64
                    raise PlanError("ALLOCATION_OVERFLOW", f"{os.fspath(path)}:{line}: {name} = {v} "
                                                           f"does not fit in 63 bits", tensor=row[0])
            if min(values) < 0 or values[0] > values[1]:
                raise PlanError("INVALID_IR_SHAPES", f"{os.fspath(path)}:{line}: need "
                                                     f"0 <= lower <= upper and size >= 0, got {row[1:4]}",
                                tensor=row[0])
            ids.append(row[0].strip())
            for col, v in zip(cols, values):
                col.append(v)
    return (ids,) + tuple(np.array(c, dtype=np.int64) for c in cols)
