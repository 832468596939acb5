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
from .arenas import Arenas, verify_execution
from .pooling import PoolingAllocator
from .fit import FitResult, max_fit, memory_curve
from .peak import PeakReport
from .reorder import reorder
from .remat import remat
# The modules behind Plan.allocate(), .checkpoint(), .peak() and .plot(): each
# fills its slot of the registry in emel.memory.plan_data when imported, and
# every import of an emel.memory module runs this file first.
from . import arenas, checkpoint, peak, viz  # noqa: F401,E402


def from_torch(model, example_inputs=(), training=False, **kwargs):
    """Trace a PyTorch module into a Graph (emel.memory.torch_importer; needs ``emel[torch]``)."""
    from .torch_importer import from_torch as _from_torch
    return _from_torch(model, example_inputs, training=training, **kwargs)


def from_onnx(path_or_model, **kwargs):
    """Read an ONNX model as a Graph (emel.memory.onnx_importer; needs ``emel[onnx]``)."""
    from .onnx_importer import from_onnx as _from_onnx
    return _from_onnx(path_or_model, **kwargs)


def from_gguf(path, n_ctx=0, n_ubatch=512, n_seq=1, flash_attn="auto", kv_type="f16", **kwargs):
    """Predict llama.cpp's buffers for a GGUF model (emel.memory.gguf; needs ``emel[gguf]``)."""
    from .gguf import from_gguf as _from_gguf
    return _from_gguf(path, n_ctx=n_ctx, n_ubatch=n_ubatch, n_seq=n_seq, flash_attn=flash_attn,
                      kv_type=kv_type, **kwargs)


__all__ = [
    "FAILURE_CODES", "PlanError", "Graph", "load_graph", "MODES", "STRATEGIES",
    "ArenaPlacement", "Plan", "TensorPlacement", "plan", "plan_json",
    "Placement", "place", "read_buffers_csv", "from_torch", "from_onnx", "from_gguf",
    "Arenas", "verify_execution", "PoolingAllocator",
    "CheckpointError", "restore", "memory_curve", "max_fit", "FitResult", "PeakReport", "reorder", "remat",
]
