"""Run an imported PyTorch graph, as rewritten by remat(), with real tensors
(docs/below-bound.md#checking-a-rewrite-with-pytorch).

``trace_torch`` imports a module like ``from_torch(training=True)`` and keeps
the ATen program (the ``make_fx`` graph module) behind it. ``run_graph``
executes an emel graph of that import — the original or a rewrite — node by
node in its execution order: each emel node runs the ATen call of the fx
node it is (or, for a ``@remat`` copy, repeats), reading its inputs by the
*emel* tensor ids the node lists. A tensor is dropped once the graph's last
reader has run, so a backward node that still read a recomputed original,
or a replay placed too late, fails instead of silently reusing the value.
``compare`` runs the fx program itself beside it on the same inputs.

Limits: the check proves the rewritten dataflow computes the same loss and
gradients for the inputs given (exactly: the same ops run on the same
values); it does not prove it for every input, nor that a runtime honours
the plan's addresses (that is :func:`emel.memory.verify_execution`).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

from .graph import Graph
from .reorder import _order_of


@dataclass
class TorchTrace:
    graph: Graph        # what from_torch(training=True) returns
    gm: Any             # the make_fx graph module it was read from
    inputs: list        # real values for the placeholders: parameters, buffers, inputs
    n_inputs: int = 0   # how many of them (at the end) are the model's inputs

    def random_inputs(self, seed: int = 0) -> list:
        """The placeholders with the model's inputs drawn afresh (seeded):
        floats from a normal distribution, integers (token ids) uniformly
        below one more than the example's largest value."""
        import torch
        gen = torch.Generator().manual_seed(seed)
        fixed = self.inputs[:len(self.inputs) - self.n_inputs]
        drawn = []
        for x in self.inputs[len(fixed):]:
            if x.is_floating_point():
                drawn.append(torch.randn(x.shape, generator=gen, dtype=x.dtype))
            else:
                high = int(x.max()) + 1 if x.numel() else 1
                drawn.append(torch.randint(0, max(high, 1), x.shape, generator=gen, dtype=x.dtype))
        return list(fixed) + drawn


def trace_torch(model, example_inputs, *, loss_fn=None, name=None) -> TorchTrace:
    """``from_torch(model, example_inputs, training=True)`` plus its ATen program."""
    import torch

    from . import torch_importer

    captured = {}
    original = torch_importer._graph_from_fx

    def keep(gm, *args, **kwargs):  # see the graph module from_torch reads
        captured["gm"] = gm
        return original(gm, *args, **kwargs)

    torch_importer._graph_from_fx = keep
    try:
        graph = torch_importer.from_torch(model, example_inputs, training=True, loss_fn=loss_fn,
                                          name=name)
    finally:
        torch_importer._graph_from_fx = original
    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    leaves = [x for x in torch.utils._pytree.tree_leaves(args) if isinstance(x, torch.Tensor)]
    values = ([p.detach() for p in model.parameters()] + [b.detach() for b in model.buffers()]
              + [x.detach() for x in leaves])
    names = [n for n, _ in model.named_parameters()] + [n for n, _ in model.named_buffers()]
    assert len(names) + len(leaves) == len(values)
    return TorchTrace(graph=graph, gm=captured["gm"], inputs=values, n_inputs=len(leaves))


def _ids_of(trace: TorchTrace) -> dict:
    """fx node -> {result index (None for a single tensor): emel tensor id}."""
    import torch
    nodes = {n["id"]: n for n in trace.graph.nodes}
    out = {}
    for fx in trace.gm.graph.nodes:
        if fx.op != "call_function" or fx.target is operator.getitem or fx.name not in nodes:
            continue
        value = fx.meta.get("val")
        ids = iter(nodes[fx.name]["outputs"])
        if isinstance(value, torch.Tensor):
            out[fx] = {None: next(ids)}
        elif isinstance(value, (list, tuple)):
            out[fx] = {k: next(ids) for k, v in enumerate(value) if isinstance(v, torch.Tensor)}
    return out


def run_graph(trace: TorchTrace, graph: Graph | None = None, inputs: list | None = None) -> list:
    """The outputs (loss, gradients) of ``graph`` (default: the import itself)
    run on ``inputs`` (default: the module's own parameters and example inputs)."""
    import torch
    from torch.utils._pytree import tree_map

    graph = graph or trace.graph
    original = {n["id"]: n for n in trace.graph.nodes}
    fx_of = {fx.name: fx for fx in trace.gm.graph.nodes}
    ids = _ids_of(trace)
    recompute_of = getattr(graph, "recompute_of", {})
    inputs = [x.clone() for x in (inputs if inputs is not None else trace.inputs)]
    placeholders = [fx for fx in trace.gm.graph.nodes if fx.op == "placeholder"]
    fixed = dict(zip(placeholders, inputs))          # placeholders and constants, by fx node
    for fx in trace.gm.graph.nodes:
        if fx.op == "get_attr":
            fixed[fx] = getattr(trace.gm, fx.target)
    env: dict[str, Any] = {t["id"]: v for t, v in zip(trace.graph.tensors, inputs)}
    # Placeholders are the first tensors of the import, in order; they stay.
    order = _order_of(graph)
    nodes = {n["id"]: n for n in graph.nodes}
    last_read = {}
    for s, nid in enumerate(order):
        for tid in nodes[nid]["inputs"]:
            last_read[tid] = s
    keep = set(graph.outputs) | {t["id"] for t in trace.graph.tensors[:len(inputs)]}
    scalars = {}                                     # fx nodes with no tensor result

    def value_of(a, rename):
        if a in fixed:
            return fixed[a]
        if a.target is operator.getitem and a.args[0] in ids:
            tid = ids[a.args[0]][a.args[1]]
            return env[rename.get(tid, tid)]
        if a in ids and None in ids[a]:
            tid = ids[a][None]
            return env[rename.get(tid, tid)]
        if a not in scalars:                         # not in the emel graph: no tensor inputs
            scalars[a] = a.target(*tree_map(lambda x: value_of(x, rename) if isinstance(
                x, torch.fx.Node) else x, a.args), **a.kwargs)
        return scalars[a]

    with torch.no_grad():
        for s, nid in enumerate(order):
            node = nodes[nid]
            orig = original[recompute_of.get(nid, nid)]
            fx = fx_of[orig["id"]]
            rename = dict(zip(orig["inputs"], node["inputs"]))
            missing = [t for t in node["inputs"] if t not in env]
            if missing:
                raise KeyError(f"node {nid!r} (step {s}) reads {missing[0]!r}, which is not live")
            args = tree_map(lambda x: value_of(x, rename) if isinstance(x, torch.fx.Node) else x,
                            fx.args)
            kwargs = tree_map(lambda x: value_of(x, rename) if isinstance(x, torch.fx.Node) else x,
                              fx.kwargs)
            result = fx.target(*args, **kwargs)
            out_rename = dict(zip(orig["outputs"], node["outputs"]))
            for k, tid in ids.get(fx, {}).items():
                env[out_rename.get(tid, tid)] = result if k is None else result[k]
            if fx not in ids:
                scalars[fx] = result
            for tid in node["inputs"]:
                if last_read.get(tid) == s and tid not in keep:
                    env.pop(tid, None)
        out_node = next(fx for fx in trace.gm.graph.nodes if fx.op == "output")
        return [value_of(a, {}) if isinstance(a, torch.fx.Node) else a
                for a in torch.utils._pytree.tree_leaves(out_node.args[0])]


def reference_outputs(trace: TorchTrace, inputs: list | None = None) -> list:
    """The fx program's own outputs on the same inputs (clones: buffers may change)."""
    import torch
    values = [x.clone() for x in (inputs if inputs is not None else trace.inputs)]
    with torch.no_grad():
        return list(torch.utils._pytree.tree_leaves(trace.gm(*values)))


def compare(trace: TorchTrace, graph: Graph, inputs: list | None = None) -> float:
    """Largest absolute difference between ``graph``'s outputs and the fx
    program's (0.0 when bit-identical); raises if their count or shapes differ."""
    mine = run_graph(trace, graph, inputs)
    theirs = reference_outputs(trace, inputs)
    if len(mine) != len(theirs):
        raise AssertionError(f"{len(mine)} outputs, expected {len(theirs)}")
    worst = 0.0
    for a, b in zip(mine, theirs):
        if a is None or b is None:
            if a is not b:
                raise AssertionError("an output is None on one side only")
            continue
        if a.shape != b.shape:
            raise AssertionError(f"output shape {tuple(a.shape)} != {tuple(b.shape)}")
        worst = max(worst, float((a.double() - b.double()).abs().max()) if a.numel() else 0.0)
    return worst


# -- PyTorch's partitioner, planned by emel -----------------------------------

def partitioned_graph(model, example_inputs, budget: float | None, *, name: str | None = None,
                      loss_fn=None) -> Graph:
    """The training step of ``model`` as AOTAutograd partitions it, as an emel graph.

    ``budget``: ``torch._functorch.config.activation_memory_budget`` for
    ``min_cut_rematerialization_partition``; ``None`` for ``default_partition``
    (every activation backward needs is saved, nothing recomputed). The
    forward and backward graph modules are joined into one program (the
    backward's saved-tensor placeholders become the forward values they
    stand for, its tangent becomes ``ones_like(loss)``) and read by the
    ``from_torch`` importer: forward ops replayed by the backward are
    backward-phase nodes, the saved set is what the backward reads.
    """
    import torch
    import torch._functorch.config as functorch_config
    from torch._functorch.aot_autograd import aot_function
    from torch._functorch.partitioners import (default_partition,
                                               min_cut_rematerialization_partition)
    from torch.func import functional_call

    from .torch_importer import _default_loss, _graph_from_fx

    names = [n for n, _ in model.named_parameters()]
    buffer_names = [n for n, _ in model.named_buffers()]
    state = names + buffer_names  # buffers are inputs too: batch norm updates them
    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)

    def step(*flat):
        out = functional_call(model, dict(zip(state, flat[:len(state)])), tuple(flat[len(state):]))
        return (loss_fn or _default_loss)(out)

    captured = {}
    chosen = default_partition if budget is None else min_cut_rematerialization_partition

    def partition(joint, inputs, **kwargs):
        fwd, bwd = chosen(joint, inputs, **kwargs)
        captured.update(fwd=fwd, bwd=bwd, outputs=kwargs["num_fwd_outputs"])
        return fwd, bwd

    compiled = aot_function(step, fw_compiler=lambda gm, _: gm, bw_compiler=lambda gm, _: gm,
                            partition_fn=partition)
    params = ([p.detach().requires_grad_(True) for p in model.parameters()]
              + [b.detach().clone() for b in model.buffers()])
    was_training = model.training
    model.train(True)
    try:
        with functorch_config.patch(activation_memory_budget=1.0 if budget is None else budget):
            compiled(*params, *args)
    finally:
        model.train(was_training)
    fwd, bwd, n_out = captured["fwd"], captured["bwd"], captured["outputs"]

    joint = torch.fx.Graph()
    env = {}
    fwd_outputs = None
    for node in fwd.graph.nodes:
        if node.op == "output":
            fwd_outputs = list(node.args[0])
            continue
        env[node] = joint.node_copy(node, lambda a: env[a])
    user, saved = fwd_outputs[:n_out], fwd_outputs[n_out:]
    placeholders = [n for n in bwd.graph.nodes if n.op == "placeholder"]
    benv = {ph: env[s] for ph, s in zip(placeholders, saved)}
    loss = env[user[0]]
    for ph in placeholders[len(saved):]:  # the tangent of the loss: ones, like autograd
        ones = joint.call_function(torch.ops.aten.ones_like.default, (loss,))
        ones.meta["val"] = ph.meta["val"]
        benv[ph] = ones
    grads = None
    for node in bwd.graph.nodes:
        if node.op == "placeholder":
            continue
        if node.op == "output":
            grads = list(node.args[0])
            continue
        benv[node] = joint.node_copy(node, lambda a: benv[a])
    joint.output(tuple([env[u] for u in user] + [benv[g] if g is not None else None for g in grads]))
    gm = torch.fx.GraphModule(torch.nn.Module(), joint)
    # Fresh fake values: the partitioner copies a recomputed node's metadata
    # from the forward node, storage included, which would read as an alias.
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    leaves = [x for x in torch.utils._pytree.tree_leaves(args) if isinstance(x, torch.Tensor)]
    FakeTensorProp(gm, mode).propagate(*[mode.from_tensor(t) for t in params + leaves])
    inputs = [n for n in fwd.graph.nodes if n.op == "placeholder"]
    input_names = state + [f"input.{i}" for i in range(len(inputs) - len(state))]
    roles = ["parameter"] * len(state) + ["input"] * (len(inputs) - len(state))
    label = "default" if budget is None else f"min-cut budget {budget}"
    return _graph_from_fx(gm, input_names, roles, True, grad_names=names,
                          name=name or f"{type(model).__name__}-aot-{label}",
                          source=f"torch {torch.__version__} AOTAutograd {label} partition, joined")
