"""emel.memory: tensor memory planning for ML computation graphs.

>>> import emel.memory as mm
>>> plan = mm.plan(mm.load_graph("graph.json"), mode="inference")   # doctest: +SKIP
>>> plan.arenas["activations"].size                                  # doctest: +SKIP
"""

from .errors import FAILURE_CODES, PlanError
from .graph import Graph, load_graph
from .planning import MODES, STRATEGIES, ArenaPlacement, Plan, TensorPlacement, plan, plan_json
from .placement import Placement, place, read_buffers_csv
from .checkpoint import CheckpointError, restore

__all__ = [
    "FAILURE_CODES", "PlanError", "Graph", "load_graph", "MODES", "STRATEGIES",
    "ArenaPlacement", "Plan", "TensorPlacement", "plan", "plan_json",
    "Placement", "place", "read_buffers_csv", "CheckpointError", "restore",
]
