"""A pooling allocator for dynamic shapes, where no static plan exists (docs/arenas.md).

The C++ core does the work; this module names the policies, builds the
allocate/free trace of a planned graph and replays it.
"""

from __future__ import annotations

import numpy as np

from . import _core
from .errors import PlanError, U64_MAX, is_int
from .plan_data import Plan

POLICIES = ("exact", "best_fit")
DEFAULT_MAX_PER_SIZE = 16


class PoolingAllocator:
    """Reuses freed host buffers instead of returning them.

    ``policy="exact"``: a free list per size, at most ``max_per_size`` buffers
    each (extra frees go back to the host); a request is served only by a
    buffer of exactly its (aligned) size. ``policy="best_fit"``: freed blocks
    stay in their chunks; a request takes the smallest free block that fits,
    splitting it, and freed neighbours coalesce. ``allocate`` returns an
    integer address; ``stats`` counts ``allocated`` (fresh host allocations),
    ``reused``, ``pooled`` (buffers or blocks held now), ``released``,
    ``bytes_in_use``, ``bytes_pooled``, ``peak_bytes`` (most host bytes held)
    and ``requests``.
    """

    def __init__(self, policy: str = "exact", *, max_per_size: int = DEFAULT_MAX_PER_SIZE,
                 alignment: int = 64):
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}; got {policy!r}")
        if not is_int(max_per_size) or not 0 <= max_per_size <= U64_MAX:
            raise ValueError(f"max_per_size must be an integer >= 0, got {max_per_size!r}")
        if not is_int(alignment) or alignment < 1 or alignment & (alignment - 1) or alignment > U64_MAX:
            raise ValueError(f"alignment must be a power of two, got {alignment!r}")
        self.policy = policy
        self._core = _core.PoolingAllocator(policy, max_per_size, alignment)

    def allocate(self, nbytes: int) -> int:
        """A buffer of ``nbytes``: its address. PlanError ``INVALID_ARGUMENT`` for
        a size that is not an integer in [0, 2^64), ``ALLOCATION_FAILED`` when
        the host refuses it."""
        if not is_int(nbytes) or not 0 <= nbytes <= U64_MAX:
            raise PlanError("INVALID_ARGUMENT", f"allocate: nbytes must be an integer in [0, 2^64), "
                                                f"got {nbytes!r}")
        try:
            return self._core.allocate(nbytes)
        except MemoryError:
            raise PlanError("ALLOCATION_FAILED", f"allocate: the host could not allocate {nbytes} bytes "
                                                 f"(aligned and rounded by the pool)") from None

    def free(self, address: int) -> None:
        if not is_int(address) or not 0 <= address <= U64_MAX or not self._core.free(address):
            raise PlanError("INVALID_ARGUMENT", f"free: address {address!r} is not a live allocation "
                                                f"of this pool")

    def trim(self) -> None:
        """Give the pooled memory back to the host."""
        self._core.trim()

    @property
    def stats(self) -> dict:
        return self._core.stats

    def __repr__(self) -> str:
        s = self.stats
        return (f"<PoolingAllocator {self.policy} allocated={s['allocated']} reused={s['reused']} "
                f"pooled={s['pooled']} in_use={s['bytes_in_use']} peak={s['peak_bytes']}>")


def allocation_trace(plan: Plan, *, include_persistent: bool = False):
    """The allocate/free trace of a planned graph in execution order.

    At each step the storage tensors born there are allocated (tensor order),
    then the ones that die there are freed: a runtime without a static plan
    and without in-place reuse. Zero-size tensors and, unless asked, the
    persistent arenas are left out. Returns ``(sizes, is_alloc, ids)``: the
    byte size per buffer and the events (``ids`` index ``sizes``).
    """
    core = plan._core
    storage = core.view_base < 0
    persistent = np.array([row["persistent"] for row in plan._arena_rows], dtype=bool)
    arena_of = core.arena_of
    keep = storage & (plan.sizes > 0)
    if not include_persistent and len(persistent):
        keep &= ~persistent[arena_of]
    members = np.nonzero(keep)[0]
    births = plan.births[members].astype(np.int64)
    deaths = plan.deaths[members].astype(np.int64)
    # Event key: step * 2 + (0 alloc, 1 free), then tensor order.
    alloc_key = births * 2
    free_key = deaths * 2 + 1
    keys = np.concatenate([alloc_key, free_key])
    ids = np.concatenate([np.arange(len(members)), np.arange(len(members))])
    is_alloc = np.concatenate([np.ones(len(members), np.uint8), np.zeros(len(members), np.uint8)])
    order = np.lexsort((ids, keys))
    return plan.sizes[members].astype(np.uint64), is_alloc[order], ids[order].astype(np.uint32)


def replay(plan: Plan, policy: str = "exact", *, max_per_size: int = DEFAULT_MAX_PER_SIZE,
           alignment: int = 64, include_persistent: bool = False) -> dict:
    """Replay :func:`allocation_trace` of ``plan`` against a fresh pool; its stats
    plus ``tensors`` (one fresh allocation each without a pool)."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}; got {policy!r}")
    sizes, is_alloc, ids = allocation_trace(plan, include_persistent=include_persistent)
    stats = _core.replay_pool_trace(policy, max_per_size, alignment, sizes.tolist(),
                                    is_alloc.tolist(), ids.tolist())
    stats["tensors"] = len(sizes)
    return stats


__all__ = ["PoolingAllocator", "POLICIES", "allocation_trace", "replay"]
