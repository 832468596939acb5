"""The recompute cost of a node, for remat() (docs/below-bound.md#cost-model).

Costs are integers in one unit: a FLOP for the ops whose arithmetic is known
from shapes (matrix products and convolutions), a byte moved (every input and
output read or written once) for everything else, where memory traffic, not
arithmetic, is the cost. Pure views cost nothing. The model only ranks
choices; it is not a runtime prediction.
"""

from __future__ import annotations

from math import prod
from typing import Callable

from .graph import Graph, tensor_bytes
from .reorder import is_view_op
from .symbolic import concrete_shape

#: Matrix products: 2 x output elements x the contracted dimension (+ the bias add).
_MATMUL = {"mm": False, "bmm": False, "matmul": False, "addmm": True, "baddbmm": True,
           "linear": True, "addbmm": True}
_CONV = ("convolution", "conv2d", "conv1d", "conv3d", "_convolution", "conv")


def _shape(t: dict) -> list[int]:
    return concrete_shape(t["shape"])


def _base_op(op: str) -> str:
    """``addmm.default`` / ``aten::addmm`` -> ``addmm``."""
    return op.split("::")[-1].split(".")[0]


def flops_or_bytes(node: dict, tensors: dict[str, dict]) -> int:
    """The default cost model (module docstring). ``tensors``: id -> entry."""
    op = node["op"]
    if is_view_op(op):
        return 0
    ins = [tensors[t] for t in node["inputs"]]
    outs = [tensors[t] for t in node["outputs"]]
    base = _base_op(op)
    if base in _MATMUL and outs:
        out = prod(_shape(outs[0]))
        mats = [t for t in ins if len(_shape(t)) >= 2]
        if mats:
            k = _shape(mats[0])[-1]
            return 2 * out * k + (out if _MATMUL[base] else 0)
    if base in _CONV and outs:
        out = prod(_shape(outs[0]))
        weights = [t for t in ins[1:] if len(_shape(t)) >= 3]
        if weights:
            bias = any(len(_shape(t)) == 1 for t in ins[2:])
            return 2 * out * prod(_shape(weights[0])[1:]) + (out if bias else 0)
    return sum(_bytes(t) for t in ins) + sum(_bytes(t) for t in outs)


def _bytes(t: dict) -> int:
    if all(type(d) is int for d in t["shape"]):
        return tensor_bytes(t)
    return tensor_bytes({**t, "shape": concrete_shape(t["shape"])})


def cost_function(cost) -> Callable[[dict, dict], int]:
    """``cost=`` of remat(): ``"flops"`` (the default model) or a callable
    ``(node, tensors_by_id) -> number >= 0``."""
    if cost in (None, "flops"):
        return flops_or_bytes
    if callable(cost):
        return cost
    raise ValueError(f"cost must be 'flops' or a callable (node, tensors) -> number; got {cost!r}")


def graph_costs(graph: Graph, cost="flops") -> dict[str, int]:
    """The cost of every node of ``graph``, by node id."""
    fn = cost_function(cost)
    tensors = {t["id"]: t for t in graph.tensors}
    return {n["id"]: fn(n, tensors) for n in graph.nodes}
