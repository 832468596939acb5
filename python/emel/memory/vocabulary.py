"""The names of strategies, modes, fits and roles, read from the C++ core's tables.

core/tables.hpp is the one place they are spelled (name, code, and for a
strategy whether the Python reference implements it and whether it searches
under the work budget); the compiled module exports the tables and this
module gives them to the rest of the package, the tests and the fuzzer.
Adding a strategy: docs/architecture.md ("Recipe: adding a placement strategy").
"""

from __future__ import annotations

from typing import NamedTuple

from . import _core


class StrategyRow(NamedTuple):
    name: str
    code: int            # the enum's value and the C API's emel_strategy code
    has_reference: bool  # reference.py implements it bit for bit (E0 tests, fuzzer)
    searches: bool       # searches under the work budget; reports work, optimal, proven_bound


class RoleRow(NamedTuple):
    name: str
    code: int
    default_arena: str
    persistent: bool
    never_inplace_victim: bool


STRATEGY_TABLE: tuple[StrategyRow, ...] = tuple(StrategyRow(*row) for row in _core.STRATEGY_TABLE)
ROLE_TABLE: tuple[RoleRow, ...] = tuple(RoleRow(*row) for row in _core.ROLE_TABLE)

#: Every strategy plan() and place() take, in code order.
STRATEGIES: tuple[str, ...] = tuple(row.name for row in STRATEGY_TABLE)
#: The strategies the pure-Python reference implements (the E0 oracle).
REFERENCE_STRATEGIES: tuple[str, ...] = tuple(row.name for row in STRATEGY_TABLE if row.has_reference)
#: The strategies that search under the work budget (auto, optimal).
SEARCH_STRATEGIES: tuple[str, ...] = tuple(row.name for row in STRATEGY_TABLE if row.searches)
STRATEGY_CODES: dict[str, int] = {row.name: row.code for row in STRATEGY_TABLE}
MODES: tuple[str, ...] = tuple(_core.MODES)
FITS: tuple[str, ...] = tuple(_core.FITS)
ROLES: tuple[str, ...] = tuple(row.name for row in ROLE_TABLE)
