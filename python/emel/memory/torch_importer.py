"""from_torch(): a PyTorch module in, an `emel.graph/1` Graph out.

The module is traced with ``make_fx`` under fake tensors, so no real memory is
touched (a model on the ``meta`` device imports as cheaply as a real one).
The trace is the ATen-level program that eager PyTorch runs: one node per
ATen call, in execution order. Tensor facts come from the traced values, not
from op names:

- a value that shares the storage of an earlier value is a view of that
  storage's owner, at its real byte offset, covering its real byte span — this
  catches ``view``/``t``/``expand``/``slice`` and in-place ops (``relu_``,
  ``add_``) alike, since an in-place result is the same storage;
- a pointwise op (``torch.Tag.pointwise``) whose result has the shape and
  dtype of one of its inputs may write over that input (``can_inplace``).

With ``training=True`` the trace is the joint forward+backward program of one
training step (forward, a scalar loss, ``torch.autograd.grad`` of every
trainable parameter), with ``phase``, ``saved_for_backward`` and ``gradient``
roles.
"""

from __future__ import annotations

import copy
import inspect
import logging
import operator
import os
import warnings
from typing import Any, Callable

from .errors import PlanError
from .graph import DTYPE_BYTES, Graph
from .optimizers import add_optimizer_step, optimized_parameters, optimizer_kind


def _require_torch():
    try:
        import torch  # noqa: F401
    except ImportError:  # pragma: no cover - exercised only without torch
        raise ImportError("emel.memory.from_torch needs PyTorch: pip install 'emel[torch]' (in a checkout: pip install '.[torch]'), which takes the CPU wheel torch==2.13.0") from None
    import torch
    return torch


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _span_bytes(t) -> int:
    """Bytes of storage a (possibly strided or broadcast) tensor covers."""
    if t.numel() == 0:
        return 0
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return (last + 1) * t.element_size()


def _input_names(model, count: int) -> list[str]:
    """Names of the forward's positional parameters, when there are enough of them."""
    try:
        params = [p for p in inspect.signature(model.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    if len(params) >= count:
        return [p.name for p in params[:count]]
    return ["input" if count == 1 else f"input.{i}" for i in range(count)]


def _default_loss(outputs):
    """Sum of every floating-point output: a scalar whose gradient reaches every output."""
    torch = _require_torch()
    leaves = [t for t in torch.utils._pytree.tree_leaves(outputs)
              if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not leaves:
        raise ValueError("from_torch(training=True): the model returns no floating-point tensor "
                         "to build a loss from; pass loss_fn=")
    loss = leaves[0].sum()
    for t in leaves[1:]:
        loss = loss + t.sum()
    return loss


def _tensor_leaves(value, torch, depth: int = 0, seen: set | None = None) -> list:
    """Every tensor a model hands back, in order: pytrees, and objects that are not
    pytrees (a Hugging Face ``DynamicCache``) through their attributes (``__dict__``
    and ``__slots__``, as :func:`_held_tensors` reads inputs), so the returned
    key/value caches count as outputs."""
    from torch.utils import _pytree as pytree
    seen = set() if seen is None else seen
    out = []
    for leaf in pytree.tree_leaves(value):
        if isinstance(leaf, torch.Tensor):
            out.append(leaf)
        elif depth < 4 and id(leaf) not in seen and not isinstance(leaf, (torch.nn.Module, type)):
            attrs = _attributes(leaf)
            if attrs:
                seen.add(id(leaf))
                out.extend(_tensor_leaves([v for k, v in sorted(attrs.items()) if not k.startswith("__")],
                                          torch, depth + 1, seen))
    return out


def _held_tensors(value, name: str, torch, depth: int = 0, seen: set | None = None) -> list:
    """(name, tensor) for the tensors an input object that is not a pytree holds (a
    Hugging Face ``DynamicCache``), walked as :func:`_tensor_leaves` walks outputs:
    lists, tuples and dicts by position and key, other objects by attribute."""
    seen = set() if seen is None else seen
    if isinstance(value, torch.Tensor):
        return [(name, value)]
    if isinstance(value, (list, tuple)):
        return [h for i, v in enumerate(value) for h in _held_tensors(v, f"{name}.{i}", torch, depth, seen)]
    if isinstance(value, dict):
        return [h for k, v in value.items() for h in _held_tensors(v, f"{name}.{k}", torch, depth, seen)]
    attrs = _attributes(value)
    if depth < 4 and attrs and id(value) not in seen and not isinstance(value, (torch.nn.Module, type)):
        seen.add(id(value))
        return [h for k, v in sorted(attrs.items()) if not k.startswith("__")
                for h in _held_tensors(v, f"{name}.{k}", torch, depth + 1, seen)]
    return []


def _attributes(value) -> dict:
    """An object's attributes: its ``__dict__`` and its ``__slots__``."""
    attrs = dict(vars(value)) if hasattr(value, "__dict__") else {}
    for cls in type(value).__mro__:
        slots = getattr(cls, "__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:
            if slot not in ("__dict__", "__weakref__") and hasattr(value, slot):
                attrs.setdefault(slot, getattr(value, slot))
    return attrs


class _ModuleTracker:
    """Which module runs while make_fx records each ATen call.

    Forward hooks on every submodule note, each time the innermost running
    module changes, the last fx node traced so far; afterwards each traced
    node gets the module that ran when it was recorded (``nn_module_stack``
    is not recorded when tracing a function, so this is our own)."""

    def __init__(self, model, torch):
        from torch.fx.experimental.proxy_tensor import get_proxy_mode
        self._proxy_mode = get_proxy_mode
        self.names = {id(m): n for n, m in model.named_modules() if n}
        self.stack: list[str] = []
        self.events: list[tuple[str | None, str | None]] = []   # (last fx node name, module)
        self.handles = []
        for module in model.modules():
            if id(module) in self.names:
                self.handles.append(module.register_forward_pre_hook(self._enter))
                self.handles.append(module.register_forward_hook(self._leave, always_call=True))

    def current(self) -> str | None:
        return self.stack[-1] if self.stack else None

    def _mark(self) -> None:
        last = None
        try:   # the newest traced node (fx internals: without them, no module paths)
            node = self._proxy_mode().tracer.graph._root.prev
            last = None if node.op == "root" else node.name
        except AttributeError:
            pass
        self.events.append((last, self.current()))

    def _enter(self, module, args):
        self.stack.append(self.names[id(module)])
        self._mark()

    def _leave(self, module, args, output):
        if self.stack:
            self.stack.pop()
        self._mark()

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()

    def modules_of(self, gm) -> dict:
        """fx node name -> the innermost module running when it was traced."""
        after: dict[str | None, str | None] = {}
        for last, module in self.events:     # the last event after a node wins
            after[last] = module
        current, out = after.get(None), {}
        for node in gm.graph.nodes:
            if current is not None:
                out[node.name] = current
            if node.name in after:
                current = after[node.name]
        return out


def _user_frame(torch, exc) -> str | None:
    """'file.py:12 in forward: if y.sum() > 0:' for the innermost frame of the
    traceback outside torch and emel: the user's line that failed."""
    import traceback
    emel_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    skip = (os.path.dirname(torch.__file__) + os.sep, emel_dir + os.sep)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(skip)
              and not f.filename.startswith("<")]
    if not frames:
        return None
    f = frames[-1]
    return f"{f.filename}:{f.lineno} in {f.name}" + (f": {f.line.strip()}" if f.line else "")


def _inside(module: str | None) -> str:
    """Where an op ran, for a refusal: its module path, or the top-level forward."""
    return f"module {module!r}" if module else "the model's forward"


def _tracing_error(torch, exc, module: str | None) -> PlanError | None:
    """The one-line PlanError for an exception raised while tracing (None: our
    own refusals, which pass as they are): a value-dependent branch or size,
    or the model failing on its example inputs."""
    if isinstance(exc, (PlanError, ValueError)):
        return None
    from torch.fx.experimental import symbolic_shapes
    kinds = tuple(k for k in (getattr(symbolic_shapes, "GuardOnDataDependentSymNode", None),
                              getattr(torch._subclasses.fake_tensor, "DynamicOutputShapeException", None),
                              getattr(torch._subclasses.fake_tensor, "DataDependentOutputException", None))
                  if k is not None)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    where = _user_frame(torch, exc)
    at = f" at {where}" if where else ""
    inside = _inside(module)
    if isinstance(exc, kinds):
        return PlanError("INVALID_IR_SHAPES",
                         f"from_torch: {inside} depends on tensor values{at} ({type(exc).__name__}: "
                         f"{first[:160]}); tracing computes shapes, not values. A Python branch on a "
                         f"tensor (`if y.sum() > 0:`) can be written as torch.where(cond, a, b) or "
                         f"torch.cond, or switched off for planning (a Hugging Face model's layerdrop: "
                         f"eval mode or config.layerdrop=0); a size that depends on values (x[mask], "
                         f"nonzero) can be bounded (torch.where(mask, x, 0), a top-k of fixed k)")
    return PlanError("INVALID_IR_SHAPES",
                     f"from_torch: the model failed while tracing on its example inputs, in "
                     f"{inside}{at}: {type(exc).__name__}: {first[:300]}")


def from_torch(model, example_inputs: Any = (), training: bool = False, *,
               kwargs: dict | None = None, loss_fn: Callable | None = None,
               name: str | None = None, optimizer: Any = None) -> Graph:
    """Trace ``model(*example_inputs, **kwargs)`` and return its `emel.graph/1` Graph.

    ``example_inputs``: a tensor, a tuple of arguments (tensors, or pytrees of
    tensors; other values are baked into the trace), or a dict of keyword
    arguments (as ``torch.export`` takes); ``kwargs``: keyword arguments.
    Tensors may live on any device, including ``meta``: tracing uses fake
    tensors and never computes. What the model returns (pytrees, and objects
    such as a Hugging Face key/value cache) are the outputs.
    ``training=True``: the joint forward+backward graph of one step, in train
    mode, with the loss ``loss_fn(outputs)`` (default: the sum of every
    floating-point output); the loss and the parameter gradients are the
    graph's outputs. ``optimizer`` (with ``training=True``): a torch.optim.SGD,
    Adam or AdamW instance over the model's parameters, or a name (sgd,
    sgd_momentum, adam, adamw): the state it allocates is added as
    ``optimizer_state`` tensors and its step's temporaries after the backward
    pass (emel.memory.optimizers). Parameters and buffers get the role ``parameter``. Every
    tensor and node made inside a submodule carries its ``module`` path.
    """
    torch = _require_torch()
    from torch.func import functional_call
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.utils import _pytree as pytree

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"from_torch takes a torch.nn.Module, not {type(model).__name__}")
    if isinstance(example_inputs, dict) and kwargs is None:
        example_inputs, kwargs = (), example_inputs
    if kwargs is not None and not isinstance(kwargs, dict):
        raise TypeError(f"from_torch: kwargs must be a dict of keyword inputs, not "
                        f"{type(kwargs).__name__}")
    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    kwargs = dict(kwargs or {})
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    param_names, buffer_names = list(params), list(buffers)
    trainable = [n for n in param_names if params[n].requires_grad] if training else []
    paths_leaves, spec = pytree.tree_flatten_with_path((args, kwargs))
    leaves = [leaf for _, leaf in paths_leaves]
    tensor_slots = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
    # Tensors held by input objects that are not pytrees (a key/value cache
    # object): the trace captures them as constants, so they are named as
    # inputs by identity; and the model may update such an object in place
    # (the cache appends), so it gets a copy that shares the tensors: the
    # caller's object is left as it was, not holding traced values.
    held: dict[int, str] = {}
    owned = {id(t) for t in (*params.values(), *buffers.values())}   # the model's own: not inputs
    shared: dict[int, Any] = {}     # what every copy shares: the held tensors and the model's modules
    for i, (path, leaf) in enumerate(paths_leaves):
        if isinstance(leaf, torch.Tensor):
            continue
        base = _leaf_names(model, [path], len(args))[0]
        tensors = [(n, t) for n, t in _held_tensors(leaf, base, torch) if id(t) not in owned]
        if not tensors:
            continue
        if not shared:
            shared.update((id(m), m) for m in model.modules())
        for n, t in tensors:
            held.setdefault(id(t), n)               # a tensor at two paths: the first names it
            shared[id(t)] = t
        try:
            leaves[i] = copy.deepcopy(leaf, shared)
        except Exception as e:                      # (a lock, a non-leaf tensor, ...): the object itself
            warnings.warn(f"from_torch: input {base!r} could not be copied ({type(e).__name__}: {e}); "
                          f"the model runs on the object itself, which it may leave holding traced "
                          f"tensors", stacklevel=2)
    if optimizer is not None and not training:
        raise ValueError("from_torch: optimizer= needs training=True (the optimizer steps after the backward pass)")
    # An unsupported optimizer is refused before tracing.
    step_kind = optimizer_kind(optimizer) if optimizer is not None else None
    if training and not trainable:
        raise ValueError("from_torch(training=True): the model has no parameter that requires grad")

    n_params, n_buffers = len(param_names), len(buffer_names)
    counts = {}

    def step(*flat):
        p = dict(zip(param_names, flat[:n_params]))
        b = dict(zip(buffer_names, flat[n_params:n_params + n_buffers]))
        call_leaves = list(leaves)
        for slot, value in zip(tensor_slots, flat[n_params + n_buffers:]):
            call_leaves[slot] = value
        call_args, call_kwargs = pytree.tree_unflatten(call_leaves, spec)
        out = functional_call(model, {**p, **b}, call_args, call_kwargs)
        if not training:
            result = tuple(_tensor_leaves(out, torch))
            counts["outputs"] = len(result)
            return result
        loss = (loss_fn or _default_loss)(out)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise ValueError("from_torch(training=True): the loss must be a one-element tensor")
        grads = torch.autograd.grad(loss, [p[n] for n in trainable], allow_unused=True)
        return (loss, *grads)

    flat_inputs = ([params[n] for n in param_names] + [buffers[n] for n in buffer_names]
                   + [leaves[i] for i in tensor_slots])
    was_training = model.training
    model.train(training)
    tracker = _ModuleTracker(model, torch)
    # A failing op would be logged by the fake-tensor machinery in ~20 lines
    # before its exception reaches us; the PlanError below says it in one.
    fake_log = logging.getLogger("torch._subclasses.fake_tensor")
    fake_level = fake_log.level
    fake_log.setLevel(logging.CRITICAL)
    try:
        with torch.enable_grad() if training else torch.no_grad():
            # Non-fake inputs allowed: a model on ``meta`` may make real meta
            # tensors while tracing (an empty key/value cache); they hold no data.
            gm = make_fx(step, tracing_mode="fake", _allow_non_fake_inputs=True)(*flat_inputs)
    except Exception as e:
        err = _tracing_error(torch, e, tracker.current())
        if err is None:
            raise
        raise err from None
    finally:
        fake_log.setLevel(fake_level)
        tracker.remove()
        model.train(was_training)

    placeholder_names = param_names + buffer_names + _leaf_names(
        model, [paths_leaves[i][0] for i in tensor_slots], len(args))
    placeholder_roles = ["parameter"] * (n_params + n_buffers) + ["input"] * len(tensor_slots)
    title = name or f"{type(model).__name__}-{'training' if training else 'inference'}"
    source = (f"emel.memory.from_torch: torch {torch.__version__} make_fx (fake tensors) of "
              f"{type(model).__name__}, {'joint forward+backward training step' if training else 'inference'}; "
              f"views and in-place results found by storage sharing")
    grad_of: dict[str, str] = {}
    graph = _graph_from_fx(gm, placeholder_names, placeholder_roles, training,
                           grad_names=trainable, name=title, source=source,
                           modules=tracker.modules_of(gm), grad_of=grad_of, held_inputs=held)
    if optimizer is not None:
        names = [n for n in optimized_parameters(optimizer, params) if n in trainable]
        add_optimizer_step(graph, optimizer, names, grad_of)
        graph.source += f"; optimizer step: {step_kind.name}"
    return graph


def _leaf_names(model, paths: list, n_args: int) -> list[str]:
    """Input ids: forward()'s parameter names for top-level tensors, keyword names for
    keyword inputs (``input_ids``), ``input.<path>`` inside positional pytrees."""
    def part(key) -> str:
        for attr in ("key", "idx", "name"):
            if hasattr(key, attr):
                return str(getattr(key, attr))
        return str(key)

    positional = [p for p in paths if part(p[0]) == "0"]
    top_level = all(len(p) == 2 for p in positional)   # (arguments that are not tensors have no path here)
    forward_names = _input_names(model, n_args) if top_level else []
    names = []
    for path in paths:
        rest = [part(k) for k in path[1:]]
        if part(path[0]) == "1":                              # a keyword input
            names.append(".".join(rest))
        elif forward_names:
            names.append(forward_names[int(rest[0])])
        else:
            names.append("input." + ".".join(rest))
    return names


class _Builder:
    """Turns traced values into graph tensors, tracking which storage each one owns."""

    def __init__(self, torch):
        from torch.multiprocessing.reductions import StorageWeakRef
        self.torch = torch
        self.weak_ref = StorageWeakRef
        self.tensors: dict[str, dict] = {}       # id -> entry, in creation order
        self.owner: dict[Any, tuple[str, int, int]] = {}  # storage -> (id, byte start, bytes)
        self.taken: set[str] = set()

    def unique(self, wanted: str) -> str:
        ident, k = wanted, 1
        while ident in self.taken:
            ident, k = f"{wanted}#{k}", k + 1
        self.taken.add(ident)
        return ident

    def add(self, ident: str, value, role: str) -> dict:
        """Add a tensor for a traced value; a value on a known storage becomes a view."""
        dtype = _dtype_name(value.dtype)
        entry = {"id": ident, "shape": [int(d) for d in value.shape], "dtype": dtype, "role": role}
        start = int(value.storage_offset()) * value.element_size()
        span = _span_bytes(value)
        key = self.weak_ref(value.untyped_storage())
        if key in self.owner:
            base, base_start, base_bytes = self.owner[key]
            offset = start - base_start
            if offset < 0 or offset + span > base_bytes:
                raise PlanError("INVALID_IR_SHAPES",
                                f"traced tensor {ident!r} covers bytes [{offset}, {offset + span}) "
                                f"of {base!r}, which has {base_bytes} bytes: a view outside the "
                                f"tensor that owns its storage is not supported", tensor=ident)
            entry["nbytes"] = span
            entry["view_of"] = {"base": base, "byte_offset": offset}
        else:
            dense = value.numel() * value.element_size()
            owned = max(dense, span, int(value.untyped_storage().nbytes()) - start)
            if owned != dense:
                # The value owns more storage than its shape (a strided result):
                # plan the storage it really holds.
                entry["shape"], entry["dtype"] = [owned], "uint8"
            elif dtype not in DTYPE_BYTES:  # the format sizes only its own dtypes
                entry["nbytes"] = dense
            self.owner[key] = (ident, start, owned)
        self.tensors[ident] = entry
        return entry

    def root(self, ident: str) -> str:
        entry = self.tensors[ident]
        while "view_of" in entry:
            entry = self.tensors[entry["view_of"]["base"]]
        return entry["id"]


def _tensors_in(value, torch) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []


def _graph_from_fx(gm, placeholder_names, placeholder_roles, training, *, grad_names, name,
                   source, modules: dict | None = None, grad_of: dict | None = None,
                   held_inputs: dict | None = None) -> Graph:
    """The Graph of a traced step; ``grad_of``, when given, is filled with
    parameter name -> the tensor id of its gradient. ``held_inputs``: id() of
    an input tensor the trace captured as a constant -> its input name."""
    torch = _require_torch()
    modules = modules or {}
    b = _Builder(torch)
    for wanted in placeholder_names:
        b.taken.add(wanted)
    ids_of: dict[Any, list[str]] = {}     # fx node -> tensor ids it stands for
    nodes: list[dict] = []
    pointwise = torch.Tag.pointwise
    placeholder_index = 0
    output_ids: list[str] = []

    for fx_node in gm.graph.nodes:
        if fx_node.op == "placeholder":
            value = fx_node.meta["val"]
            ident = placeholder_names[placeholder_index]
            entry = b.add(ident, value, placeholder_roles[placeholder_index])
            if placeholder_roles[placeholder_index] == "parameter" and "." in ident:
                entry["module"] = ident.rsplit(".", 1)[0]   # layers.0.mlp.up_proj.weight
            placeholder_index += 1
            ids_of[fx_node] = [ident]
            continue
        if fx_node.op == "get_attr":            # a constant captured by the trace
            value = fx_node.meta.get("val")
            if value is None:
                value = getattr(gm, fx_node.target)
            if isinstance(value, torch.Tensor):
                held = (held_inputs or {}).get(id(getattr(gm, fx_node.target, None)))
                ident = b.unique(held or fx_node.name)
                b.add(ident, value, "input" if held else "parameter")
                ids_of[fx_node] = [ident]
            continue
        if fx_node.op == "output":
            for arg in torch.utils._pytree.tree_leaves(fx_node.args[0]):
                if isinstance(arg, torch.fx.Node):
                    output_ids.extend(ids_of.get(arg, []))
            if training:   # (loss, *grads): a gradient belongs to its parameter's module
                results = fx_node.args[0]
                for grad, pname in zip(results[1:], grad_names):
                    for ident in ids_of.get(grad, []) if isinstance(grad, torch.fx.Node) else []:
                        if grad_of is not None:
                            grad_of.setdefault(pname, ident)
                        for tid in (ident, b.root(ident)):   # the view handed back, its storage
                            if "." in pname and "module" not in b.tensors[tid]:
                                b.tensors[tid]["module"] = pname.rsplit(".", 1)[0]
            continue
        if fx_node.target is operator.getitem:   # picks one result of a multi-result node
            parent, index = fx_node.args
            picked = getattr(parent, "meta", {}).get("_emel_results", {}).get(index)
            ids_of[fx_node] = [picked] if picked else []
            continue
        inputs: list[str] = []
        for arg in fx_node.all_input_nodes:
            for ident in ids_of.get(arg, []):
                if ident not in inputs:
                    inputs.append(ident)
        value = fx_node.meta.get("val")
        results = _tensors_in(value, torch)
        if not results and not inputs:
            continue
        node_id = fx_node.name
        tags = getattr(fx_node.target, "tags", ())
        outputs = []
        by_index = {}
        multi = not isinstance(value, torch.Tensor)
        module = modules.get(fx_node.name)
        for k, item in enumerate(value if multi and isinstance(value, (list, tuple)) else [value]):
            if not isinstance(item, torch.Tensor):
                continue
            _check_static(item, fx_node, module)
            ident = b.unique(f"{fx_node.name}.{k}" if multi else fx_node.name)
            entry = b.add(ident, item, "activation")
            if module:
                entry["module"] = module
            if (pointwise in tags and "view_of" not in entry
                    and any(b.tensors[i]["shape"] == entry["shape"]
                            and b.tensors[i]["dtype"] == entry["dtype"] for i in inputs)):
                entry["can_inplace"] = True
            outputs.append(ident)
            by_index[k] = ident
        fx_node.meta["_emel_results"] = by_index
        ids_of[fx_node] = outputs
        nodes.append({"id": node_id, "op": str(getattr(fx_node.target, "__name__", fx_node.target))
                      .replace("aten.", ""), "inputs": inputs, "outputs": outputs})
        if module:
            nodes[-1]["module"] = module

    _mark_outputs(b, output_ids, training, grad_names)
    if training:
        _mark_phases(b, nodes, output_ids[0])

    g = Graph(name=name, source=source)
    g.tensors = list(b.tensors.values())
    g.nodes = nodes
    g.outputs = list(dict.fromkeys(output_ids))
    # Drop the fx bookkeeping: the graph module may be traced or printed again.
    for fx_node in gm.graph.nodes:
        fx_node.meta.pop("_emel_results", None)
    return g


def _check_static(value, fx_node, module: str | None) -> None:
    """Refuse a traced value whose size depends on tensor values (``x[x > 0]``, ``nonzero``)."""
    import torch
    dims = list(value.shape) + [value.storage_offset()]
    if all(isinstance(d, int) or (isinstance(d, torch.SymInt) and d.node.is_constant()) for d in dims):
        return
    raise PlanError("INVALID_IR_SHAPES",
                    f"from_torch: op {fx_node.target} (node {fx_node.name!r}) in {_inside(module)} "
                    f"returns a tensor of shape {[str(d) for d in value.shape]}: its size depends "
                    f"on tensor values, which "
                    f"tracing does not compute. Bound the size instead (e.g. torch.where(mask, x, 0) "
                    f"or a top-k of fixed k in place of x[mask]), or switch the op off for planning "
                    f"(a Hugging Face model's train-time masking or layerdrop: its config)",
                    node=fx_node.name)



def _mark_outputs(b: _Builder, output_ids: list[str], training: bool, grad_names: list[str]) -> None:
    """Results the step hands back: the model outputs (inference) or the loss and gradients."""
    for k, ident in enumerate(output_ids):
        role = "gradient" if training and k >= 1 else "output"
        for tid in (ident, b.root(ident)):
            if b.tensors[tid]["role"] == "activation":
                b.tensors[tid]["role"] = role


def _mark_phases(b: _Builder, nodes: list[dict], loss_id: str) -> None:
    """Forward = every node up to the last one the loss depends on; backward = the rest.

    Forward tensors (and inputs) that a backward node reads are saved for backward.
    """
    producer = {out: k for k, node in enumerate(nodes) for out in node["outputs"]}
    last_forward, stack, seen = -1, [loss_id], set()
    while stack:
        tid = stack.pop()
        if tid in seen:
            continue
        seen.add(tid)
        k = producer.get(tid)
        if k is not None:
            last_forward = max(last_forward, k)
            stack.extend(nodes[k]["inputs"])
    forward_made = set()
    for k, node in enumerate(nodes):
        node["phase"] = "forward" if k <= last_forward else "backward"
        if k <= last_forward:
            forward_made.update(node["outputs"])
            continue
        for tid in node["inputs"]:
            entry = b.tensors[tid]
            if b.tensors[b.root(tid)]["role"] in ("parameter", "gradient"):
                continue            # live for the whole step anyway
            if tid in forward_made or entry["role"] == "input":
                entry["saved_for_backward"] = True
