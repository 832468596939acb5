"""Which arenas a plan's transient tensors share: the ``arena_layout`` option
of plan() (the C++ core's path and the reference alike).

"pooled": activations and gradients are planned as one arena, as a runtime
keeps its transient tensors in one pool, so the total is the peak of live
bytes over all arenas. "separate": the specification's one arena per role
class (gradients apart). ``None`` is "separate" under tmmu, the
specification's algorithm, whose layout, hashes and golden traces stay as
specified, and "pooled" under every other strategy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ARENA_LAYOUTS = ("pooled", "separate")
#: The roles "pooled" moves, and where to (roles the caller maps itself stay put).
POOLED_ROLES = {"gradient": "activations"}


def resolved_layout(arena_layout: str | None, strategy: str) -> str | None:
    """The layout ``arena_layout`` stands for under ``strategy`` (``None``: the
    strategy's default); an unknown value passes through for the caller's check."""
    if arena_layout is None:
        return "separate" if strategy == "tmmu" else "pooled"
    return arena_layout


def roles_for_layout(arena_layout: str | None, strategy: str, role_arenas: Any) -> Any:
    """``role_arenas`` with the layout applied; ValueError for an unknown layout.
    A ``role_arenas`` that is not a mapping passes through for the caller's
    own check to name."""
    arena_layout = resolved_layout(arena_layout, strategy)
    if arena_layout not in ARENA_LAYOUTS:
        raise ValueError(f"arena_layout must be one of {', '.join(ARENA_LAYOUTS)}; "
                         f"got {arena_layout!r}")
    if arena_layout == "separate" or (role_arenas is not None and not isinstance(role_arenas, Mapping)):
        return role_arenas
    return {**POOLED_ROLES, **(role_arenas or {})}
