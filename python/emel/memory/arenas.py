"""The arena engine: a plan backed by real memory (docs/arenas.md).

``Arenas(plan)`` allocates one aligned host buffer per arena (ApplyPlan_v1)
and resolves every tensor to ``base + offset``; ``array(tensor_id)`` is a NumPy
view of the tensor's bytes, no copy, exportable through DLPack. The C++ core
owns the memory; every array keeps it alive.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _core
from .errors import PlanError, U64_MAX
from .formats import format_bytes
from .plan_data import Plan, register_plan_method
from .symbolic import concrete_shape

EXECUTION_MODES = ("standard", "confidential", "regulated")

#: dtypes NumPy has, by their emel.graph/1 names; any other dtype (bfloat16,
#: float8, quantized blocks) is viewed as raw uint8 bytes.
NUMPY_DTYPES = {
    "float64": np.float64, "float32": np.float32, "float16": np.float16,
    "int64": np.int64, "int32": np.int32, "int16": np.int16, "int8": np.int8,
    "uint8": np.uint8, "bool": np.bool_,
}



@dataclass(frozen=True)
class Ledger:
    """The resource ledger at one step (docs/arenas.md, "Resource ledger")."""
    step: int
    bytes_allocated: int
    peak_bytes: int
    allocation_failures: int
    internal_fragmentation_ratio: float


@dataclass(frozen=True)
class Commit:
    """What CommitExecution_v1 sealed: the step, the state hash (hex) and, per
    arena, its visibility before the commit and the step its bytes last changed."""
    step: int
    state_hash: str
    includes_data: bool
    visibility: dict
    committed_step: dict


@dataclass(frozen=True)
class ExecutionReport:
    """What :func:`verify_execution` walked: steps, tensors and bytes written and checked."""
    steps: int
    tensors_written: int
    bytes_written: int
    tensors_checked: int
    bytes_checked: int


def _check_u64(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{what} must be an integer >= 0, got {value!r}")
    if value > U64_MAX:
        raise ValueError(f"{what} must fit in 64 bits, got {value}")
    return value


def _plan_arrays(plan: Plan) -> tuple:
    return (plan._core, plan.offsets, plan.births, plan.deaths, list(plan._arena_sizes))


class Arenas:
    """A plan's arenas in host memory.

    ``execution_mode``: ``standard`` (default), ``confidential`` or
    ``regulated`` — the last two refuse debug fills and execution checks,
    always zero on apply, and wipe the buffers when they are released.
    ``zero``: zero every tensor on apply (the spec's step 5; tensor-id order).
    ``memory_bytes_budget``: refuse, before taking any memory, a plan whose
    arenas need more bytes (``PlanError`` code ``QUOTA_EXCEEDED``).
    ``pattern_seed``: seeds the debug pattern (:meth:`debug_fill`,
    :func:`verify_execution`).
    """

    def __init__(self, plan: Plan, *, zero: bool = True, execution_mode: str = "standard",
                 memory_bytes_budget: int | None = None, pattern_seed: int = 0):
        if not isinstance(plan, Plan):
            raise TypeError(f"Arenas takes a Plan (from emel.memory.plan), not {type(plan).__name__}")
        if execution_mode not in EXECUTION_MODES:
            raise ValueError(f"execution_mode must be one of {', '.join(EXECUTION_MODES)}; "
                             f"got {execution_mode!r}")
        if memory_bytes_budget is not None:
            _check_u64(memory_bytes_budget, "memory_bytes_budget")
        _check_u64(pattern_seed, "pattern_seed")
        self._core = _core.ArenaEngine(*_plan_arrays(plan), execution_mode, bool(zero),
                                       memory_bytes_budget, pattern_seed)
        self._set_plan(plan)
        self.memory_bytes_budget = memory_bytes_budget
        self.pattern_seed = pattern_seed

    def _set_plan(self, plan: Plan) -> None:
        self._plan = plan
        self._index = {tid: i for i, tid in enumerate(plan.tensor_ids)}
        self._arena_names = [row["name"] for row in plan._arena_rows]

    # -- ApplyPlan_v1 -------------------------------------------------------
    @property
    def plan(self) -> Plan:
        return self._plan

    @property
    def execution_mode(self) -> str:
        return self._core.execution_mode

    def apply(self, plan: Plan, *, zero: bool = True) -> "Arenas":
        """Re-apply: back another plan with new buffers. On a refusal (quota,
        capacity, bounds, host out of memory) nothing changes: the old buffers,
        the ledger and the commits stay as they were. Arrays of the old buffers
        stay valid (they keep those buffers alive)."""
        if not isinstance(plan, Plan):
            raise TypeError(f"apply takes a Plan, not {type(plan).__name__}")
        self._core.apply(*_plan_arrays(plan), bool(zero))
        self._set_plan(plan)
        return self

    def _tensor(self, tensor_id: str) -> int:
        try:
            return self._index[tensor_id]
        except (KeyError, TypeError):
            raise KeyError(f"no tensor {tensor_id!r} in plan of graph "
                           f"{self._plan.graph_name or '(unnamed)'}") from None

    def array(self, tensor_id: str) -> np.ndarray:
        """The tensor's bytes as a NumPy array of its shape and dtype, no copy.

        Writes through it land in the arena; it keeps the arena memory alive.
        A dtype NumPy lacks, or a view whose span is not shape x element size,
        comes back as a 1-D ``uint8`` array of the tensor's bytes, as does a
        shape NumPy cannot hold (a zero-size tensor with a dimension of 2^62).
        Symbolic dimensions are taken at their maximum, as planned.
        """
        i = self._tensor(tensor_id)
        nbytes = int(self._plan.sizes[i])
        dtype, shape = np.dtype(np.uint8), [nbytes]
        graph = self._plan.graph
        if graph is not None and i < len(graph.tensors):
            entry = graph.tensors[i]
            np_type = NUMPY_DTYPES.get(entry.get("dtype"))
            if entry.get("id") == tensor_id and np_type is not None:
                dt = np.dtype(np_type)
                dims = concrete_shape(entry["shape"])
                # NumPy refuses shapes whose nonzero dims span 2^63 bytes, even empty ones
                if math.prod(dims) * dt.itemsize == nbytes and \
                        math.prod(d for d in dims if d) * dt.itemsize < 2**63:
                    dtype, shape = dt, dims
        return self._core.array(i, dtype, shape)

    def buffer(self, arena: str) -> np.ndarray:
        """The whole arena as a 1-D ``uint8`` array (no copy)."""
        try:
            k = self._arena_names.index(arena)
        except ValueError:
            raise KeyError(f"no arena {arena!r}; arenas: {', '.join(self._arena_names)}") from None
        return self._core.arena_array(k)

    def address(self, tensor_id: str) -> int:
        """The tensor's host address: its arena's base + its offset."""
        return self._core.address(self._tensor(tensor_id))

    # -- ZeroTensor_v1 / DebugFillTensor_v1 -------------------------------
    def zero(self, tensor_id: str | None = None) -> None:
        """Zero one tensor's bytes; without an id, every tensor in id order."""
        if tensor_id is None:
            self._core.zero_all()
        else:
            self._core.zero_tensor(self._tensor(tensor_id))

    def debug_fill(self, tensor_id: str) -> None:
        """Fill the tensor with the pattern of (pattern_seed, its root's id) at its
        range. Refused (``DEBUG_FILL_FORBIDDEN``) outside standard mode."""
        self._core.debug_fill_tensor(self._tensor(tensor_id))

    # -- CommitExecution_v1 -------------------------------------------------
    def commit(self, include_data: bool = False) -> Commit:
        """Seal the step: a new step number when anything was written since the
        last commit (repeating it with nothing in between returns the same
        commit), and the SHA-256 state hash of docs/arenas.md. ``include_data``
        adds a digest of every arena's bytes (always, in regulated mode)."""
        r = self._core.commit(bool(include_data))
        names = self._arena_names
        return Commit(step=r["step"], state_hash=r["state_hash"], includes_data=r["includes_data"],
                      visibility=dict(zip(names, r["visibility"])),
                      committed_step=dict(zip(names, r["committed_step"])))

    @property
    def step(self) -> int:
        return self._core.step

    # -- ledger -------------------------------------------------------------
    @property
    def ledger(self) -> Ledger:
        return Ledger(**self._core.ledger)

    @property
    def ledger_history(self) -> list[Ledger]:
        """One entry per apply and per commit that sealed a new step."""
        return [Ledger(**row) for row in self._core.ledger_history]

    @property
    def nbytes(self) -> int:
        """Bytes the arena buffers hold."""
        return self._core.ledger["bytes_allocated"]

    def info(self) -> list[dict]:
        """Per arena: name, size, base alignment, address, visibility, and the
        plan's busiest-step bytes (``lower_bound``)."""
        rows = self._core.arenas
        for row, plan_row in zip(rows, self._plan._arena_rows):
            row["lower_bound"] = plan_row["lower_bound"]
            row["persistent"] = plan_row["persistent"]
        return rows

    def __repr__(self) -> str:
        parts = ", ".join(f"{r['name']}={format_bytes(r['size'])}" for r in self.info())
        return (f"<Arenas {self._plan.graph_name or '(unnamed)'} {self.execution_mode} "
                f"step={self.step} total={format_bytes(self.nbytes)}"
                f"{' [' + parts + ']' if parts else ''}>")

    def _repr_html_(self) -> str:
        head = ("<tr><th>arena</th><th>size</th><th>busiest step</th><th>use</th>"
                "<th>alignment</th><th>address</th><th>state</th></tr>")
        body = "".join(
            f"<tr><td>{html.escape(r['name'])}{' (persistent)' if r['persistent'] else ''}</td>"
            f"<td>{format_bytes(r['size'])}</td><td>{format_bytes(r['lower_bound'])}</td>"
            f"<td>{'-' if not r['size'] else format(min(1.0, r['lower_bound'] / r['size']), '.1%')}</td>"
            f"<td>{r['alignment']}</td><td>{r['address']:#x}</td><td>{r['visibility']}</td></tr>"
            for r in self.info())
        led = self.ledger
        title = html.escape(f"{self._plan.graph_name or '(unnamed)'}: {self.execution_mode}, "
                            f"step {self.step}, {format_bytes(led.bytes_allocated)} allocated, "
                            f"peak {format_bytes(led.peak_bytes)}")
        return f"<div><b>Arenas</b> {title}<table>{head}{body}</table></div>"


def verify_execution(plan: Plan, arenas: Arenas) -> ExecutionReport:
    """Execute ``plan``'s graph over the real bytes of ``arenas`` and prove that
    no live tensor is clobbered (docs/arenas.md, "Execution check").

    Every tensor gets a deterministic pattern when it is born; each node first
    checks that its inputs still hold theirs, then writes its outputs. A clobber
    raises ``PlanError`` (``ADDRESS_COLLISION``) naming the tensor, the node and
    the ``step``, with ``overwritten_by`` the tensor whose pattern was found.
    Overwrites the arenas' contents; refused outside standard mode.
    """
    if not isinstance(arenas, Arenas):
        raise TypeError(f"verify_execution takes Arenas, not {type(arenas).__name__}")
    if arenas.plan is not plan:
        raise ValueError("these arenas back another plan; allocate them with Arenas(plan) "
                         "or arenas.apply(plan) first")
    return ExecutionReport(**arenas._core.verify_execution())


__all__ = ["Arenas", "Commit", "ExecutionReport", "Ledger", "EXECUTION_MODES", "NUMPY_DTYPES",
           "verify_execution", "PlanError"]


# Plan.allocate(**options) (emel.memory.plan_data, a lower layer) is Arenas(plan, **options).
register_plan_method("allocate", Arenas)
