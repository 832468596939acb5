"""The optimizer step of a training import: the state an optimizer keeps and
the temporaries its step makes (``from_torch(..., training=True, optimizer=...)``).

"Does my fine-tune fit?" needs the optimizer's state beside the weights,
gradients and activations. What PyTorch's optimizers allocate on their first
``step()`` (torch.optim, the single-tensor implementation used for CPU tensors,
torch 2.x), per parameter ``p`` that has a gradient:

- ``sgd``: no state (``momentum=0``); with ``weight_decay`` the step makes
  ``grad + wd * p`` (one temporary of ``p``'s size).
- ``sgd`` with ``momentum > 0``: ``momentum_buffer`` (``p``'s shape and dtype);
  ``nesterov`` makes ``grad + momentum * buf`` (a temporary).
- ``adam`` / ``adamw``: ``step`` (a float32 scalar tensor), ``exp_avg`` and
  ``exp_avg_sq`` (``p``'s shape and dtype), ``max_exp_avg_sq`` with
  ``amsgrad``; the step makes ``exp_avg_sq.sqrt()`` and its quotient by the
  bias correction (two temporaries of ``p``'s size, the first freed as the
  second is made); Adam's ``weight_decay`` (not AdamW's, which decays ``p`` in
  place) adds ``grad + wd * p``.

State tensors get the role ``optimizer_state`` (persistent: the parameters
arena); the step's nodes run after the backward pass, one parameter at a time
as the for-loop implementation does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .graph import Graph, tensor_bytes

#: The names ``optimizer=`` takes, and what each is (the PyTorch defaults).
OPTIMIZER_NAMES = {
    "sgd": "torch.optim.SGD(momentum=0)",
    "sgd_momentum": "torch.optim.SGD(momentum=0.9)",
    "adam": "torch.optim.Adam",
    "adamw": "torch.optim.AdamW",
}


@dataclass(frozen=True)
class OptimizerKind:
    """What the step of one optimizer allocates (see the module docstring)."""
    name: str                 # sgd, adam or adamw
    momentum: bool = False    # sgd: a momentum buffer
    nesterov: bool = False
    amsgrad: bool = False
    weight_decay: bool = False


def optimizer_kind(optimizer: Any) -> OptimizerKind:
    """An optimizer instance (torch.optim.SGD, Adam, AdamW) or one of
    :data:`OPTIMIZER_NAMES`; ValueError for anything else."""
    if isinstance(optimizer, str):
        name = optimizer.lower().replace("-", "_").replace(" ", "_")
        if name in ("sgd_momentum", "momentum", "sgd_with_momentum"):
            return OptimizerKind("sgd", momentum=True)
        if name in ("sgd", "adam", "adamw"):
            return OptimizerKind(name)
        raise ValueError(f"optimizer {optimizer!r}: expected one of {', '.join(OPTIMIZER_NAMES)} "
                         f"or a torch.optim.SGD / Adam / AdamW instance")
    kind = type(optimizer).__name__
    groups = getattr(optimizer, "param_groups", None)
    if kind not in ("SGD", "Adam", "AdamW") or not groups:
        raise ValueError(f"optimizer: {kind} is not supported (torch.optim.SGD, Adam and AdamW are, "
                         f"or the names {', '.join(OPTIMIZER_NAMES)})")
    group = groups[0]
    decay = any(g.get("weight_decay", 0) for g in groups)
    if kind == "SGD":
        return OptimizerKind("sgd", momentum=any(g.get("momentum", 0) for g in groups),
                             nesterov=any(g.get("nesterov", False) for g in groups),
                             weight_decay=decay)
    return OptimizerKind(kind.lower(), amsgrad=bool(group.get("amsgrad", False)),
                         weight_decay=decay and kind == "Adam")


def optimized_parameters(optimizer: Any, params: dict) -> list[str]:
    """The names of ``params`` the optimizer updates: all of them for a name,
    the ones in its param groups (by identity) for an instance."""
    if isinstance(optimizer, str):
        return list(params)
    ids = {id(p) for g in optimizer.param_groups for p in g["params"]}
    return [n for n, p in params.items() if id(p) in ids]


def add_optimizer_step(graph: Graph, optimizer: Any, names: list[str], grad_of: dict[str, str]) -> int:
    """Append the state tensors and the step of ``optimizer`` for the parameters
    ``names`` (those with a gradient in ``grad_of``) to a training graph.
    Returns the bytes of optimizer state added."""
    kind = optimizer_kind(optimizer)
    entries = {t["id"]: t for t in graph.tensors}
    node_ids = {n["id"] for n in graph.nodes}
    state_bytes = 0

    def state(pid: str, suffix: str, shape, dtype: str) -> str:
        nonlocal state_bytes
        tid = _unique(entries, f"{pid}.{suffix}")
        graph.tensor(tid, shape, dtype, role="optimizer_state", module=entries[pid].get("module"))
        entries[tid] = graph.tensors[-1]
        state_bytes += tensor_bytes(entries[tid])
        return tid

    def temporary(pid: str, suffix: str) -> str:
        tid = _unique(entries, f"{pid}.{suffix}")
        graph.tensor(tid, entries[pid]["shape"], entries[pid]["dtype"],
                     module=entries[pid].get("module"))
        entries[tid] = graph.tensors[-1]
        return tid

    def node(pid: str, op: str, inputs: list[str], outputs: list[str]) -> None:
        nid = _unique(node_ids, f"optimizer.{pid}.{op}")
        node_ids.add(nid)
        graph.node(nid, op, inputs, outputs, phase="backward", module=entries[pid].get("module"))

    for name in names:
        if name not in grad_of:
            continue            # no gradient: PyTorch's step skips it, no state is made
        pid, grad = name, grad_of[name]
        shape, dtype = entries[pid]["shape"], entries[pid]["dtype"]
        reads = [pid, grad]
        if kind.weight_decay:                      # grad + wd * p, a new tensor
            decayed = temporary(pid, "decayed_grad")
            node(pid, "add", [grad, pid], [decayed])
            reads = [pid, decayed]
        if kind.name == "sgd":
            if kind.momentum:
                buf = state(pid, "momentum_buffer", shape, dtype)
                reads.append(buf)
                if kind.nesterov:
                    ahead = temporary(pid, "nesterov_grad")
                    node(pid, "add", [reads[1], buf], [ahead])
                    reads.append(ahead)
            node(pid, "sgd_update", reads, [])
            continue
        state(pid, "step", [], "float32")
        exp_avg = state(pid, "exp_avg", shape, dtype)
        exp_avg_sq = state(pid, "exp_avg_sq", shape, dtype)
        second = state(pid, "max_exp_avg_sq", shape, dtype) if kind.amsgrad else exp_avg_sq
        root = temporary(pid, "sqrt")
        node(pid, "sqrt", [second], [root])
        denom = temporary(pid, "denom")
        node(pid, "div", [root], [denom])
        node(pid, f"{kind.name}_update", reads + [exp_avg, exp_avg_sq, denom], [])
    if graph.execution_order is not None:   # the step runs last, in the order added
        ordered = set(graph.execution_order)
        graph.execution_order = list(graph.execution_order) + [
            n["id"] for n in graph.nodes if n["id"] not in ordered]
    return state_bytes


def _unique(taken, wanted: str) -> str:
    """``wanted``, or ``wanted_1``, ``wanted_2``... if a tensor or node has it."""
    ident, k = wanted, 1
    while ident in taken:
        ident, k = f"{wanted}_{k}", k + 1
    return ident
