"""from_onnx(): an ONNX model in, an `emel.graph/1` Graph out.

ONNX shape inference gives every value its shape; initializers (and
``Constant`` nodes, which runtimes fold into initializers) are parameters,
graph inputs are inputs and graph outputs are outputs. Ops that only
reinterpret their data — ``Reshape``, ``Flatten``, ``Squeeze``, ``Unsqueeze``,
``Identity`` — become views of their data input, as ONNX Runtime aliases them,
except when the result is a graph output made from a graph input or an
initializer (the runtime copies then: a caller owns what it gets back).
Elementwise ops whose result has the shape and type of an input may write over
it (``can_inplace``).
"""

from __future__ import annotations

import math
import os
from typing import Any, Mapping

from .errors import PlanError
from .graph import DTYPE_BYTES, Graph, check_input_file

#: ops whose output shares its data input's bytes.
VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})

#: elementwise ops whose output may overwrite an input of the same shape and type.
ELEMENTWISE_OPS = frozenset({
    "Abs", "Acos", "Acosh", "Add", "Asin", "Asinh", "Atan", "Atanh", "Ceil", "Clip", "Cos",
    "Cosh", "Div", "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid", "HardSwish",
    "LeakyRelu", "Log", "Max", "Min", "Mish", "Mul", "Neg", "Pow", "PRelu", "Reciprocal",
    "Relu", "Round", "Selu", "Sigmoid", "Sign", "Sin", "Sinh", "Softplus", "Softsign",
    "Sqrt", "Sub", "Sum", "Tan", "Tanh", "ThresholdedRelu", "Where"})


def _require_onnx():
    try:
        import onnx  # noqa: F401
    except ImportError:  # pragma: no cover - exercised only without onnx
        raise ImportError("emel.memory.from_onnx needs onnx: pip install 'emel[onnx]' (in a checkout: pip install '.[onnx]')") from None
    import onnx
    return onnx


def _dtype(onnx, elem_type: int, tensor: str) -> tuple[str, int]:
    """(format dtype name, element bytes) of an ONNX element type."""
    if elem_type == onnx.TensorProto.STRING or elem_type == onnx.TensorProto.UNDEFINED:
        raise PlanError("INVALID_IR_SHAPES",
                        f"ONNX tensor {tensor!r} has element type "
                        f"{onnx.TensorProto.DataType.Name(elem_type)}, which has no fixed size",
                        tensor=tensor)
    np_type = onnx.helper.tensor_dtype_to_np_dtype(elem_type)
    name = onnx.TensorProto.DataType.Name(elem_type).lower()
    name = {"float": "float32", "double": "float64", "float8e4m3fn": "float8_e4m3fn",
            "float8e5m2": "float8_e5m2"}.get(name, name)
    return name, int(np_type.itemsize)


def _load(onnx, source):
    return _load_shapes_only(onnx, source)


def _check_names_are_text(model) -> None:
    """protobuf hands a string field that is not UTF-8 back as bytes (ONNX is proto2):
    a damaged model's names are refused here, not deep in the import."""
    g = model.graph
    names = [("graph", g.name)]
    names += [("initializer", t.name) for t in g.initializer]
    names += [(where, v.name) for where, vs in (("graph input", g.input), ("graph output", g.output),
                                                ("value_info", g.value_info)) for v in vs]
    for node in g.node:
        names += [("node", node.name), ("node op_type", node.op_type), ("node domain", node.domain)]
        names += [("node input", x) for x in node.input] + [("node output", x) for x in node.output]
    for where, name in names:
        if not isinstance(name, str):
            raise PlanError("INVALID_IR_SHAPES",
                            f"the ONNX model has a {where} name that is not UTF-8 text ({bytes(name)[:40]!r}); "
                            f"the file is damaged: re-export it")


def _load_shapes_only(onnx, source):
    """The model without its external weights: planning needs shapes only (dims are
    in the model file), so a missing or huge ``.data`` file costs nothing."""
    if isinstance(source, onnx.ModelProto):
        _check_names_are_text(source)
        return source
    if isinstance(source, (bytes, bytearray)):
        where, load = "the ONNX bytes", lambda: onnx.load_from_string(bytes(source))
    elif isinstance(source, (str, os.PathLike)):
        where = os.fspath(source)
        if not os.path.exists(where):
            raise FileNotFoundError(f"{where}: no such ONNX model file")
        check_input_file(where)
        load = lambda: onnx.load(where, load_external_data=False)  # noqa: E731
    else:
        raise TypeError(f"from_onnx takes a path, bytes or an onnx.ModelProto, not "
                        f"{type(source).__name__}")
    try:
        model = load()
    except OSError:
        raise
    except Exception as e:  # protobuf's DecodeError and the like: not a model at all
        raise PlanError("INVALID_IR_SHAPES",
                        f"{where} is not a readable ONNX model ({type(e).__name__}: "
                        f"{str(e).strip() or 'corrupt protobuf'}); re-export it, or check that "
                        f"the file was copied completely") from None
    _check_names_are_text(model)
    return model


def _fix_input_shapes(onnx, model, input_shapes: Mapping[str, Any], flag: str = "input_shapes"):
    """A copy of the model whose named graph inputs have the given fixed shapes.

    The exporter's value_info (stale symbolic shapes) is dropped so that shape
    inference starts again from the fixed inputs. ``flag`` names the option in
    messages (``--input-shape`` on the command line)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    inputs = {v.name: v for v in model.graph.input}
    for name in sorted(input_shapes):
        if name not in inputs:
            raise PlanError("INVALID_IR_SHAPES",
                            f"{flag} names {name!r}, which is not a graph input (inputs: "
                            f"{', '.join(sorted(inputs))})", tensor=name)
        ttype = inputs[name].type.tensor_type
        given = [int(d) for d in input_shapes[name]]
        if ttype.HasField("shape") and len(ttype.shape.dim) != len(given):
            declared = [d.dim_param or d.dim_value for d in ttype.shape.dim]
            raise PlanError("INVALID_IR_SHAPES",
                            f"{flag} gives input {name!r} rank {len(given)} ({given}) but the "
                            f"model declares rank {len(ttype.shape.dim)} ({declared})", tensor=name)
        dims = ttype.shape.dim
        del dims[:]
        for d in given:
            dims.add().dim_value = d
    del model.graph.value_info[:]
    for out in model.graph.output:
        out.type.tensor_type.ClearField("shape")
    return model


#: Shape-computing values are folded only up to this many elements (shape vectors,
#: index ranges, small masks), never real activations.
FOLD_LIMIT = 1 << 16
#: ops that make a tensor of a size given by an input: checked before evaluating.
_SIZED_BY_INPUT = {"ConstantOfShape": 0, "Expand": 1, "Tile": None, "Range": None}
_NOT_FOLDED = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike",
                         "RandomUniformLike", "Multinomial", "Bernoulli", "If", "Loop", "Scan"})


def _static_dims(ttype) -> list[int] | None:
    if ttype is None or not ttype.HasField("shape"):
        return None
    if not all(d.HasField("dim_value") for d in ttype.shape.dim):
        return None
    return [d.dim_value for d in ttype.shape.dim]


def _types(model) -> dict:
    out = {}
    g = model.graph
    for info in list(g.input) + list(g.value_info) + list(g.output):
        if info.type.HasField("tensor_type"):
            out.setdefault(info.name, info.type.tensor_type)
    return out


def _fold(onnx, model, consts: dict) -> dict:
    """New shape-computing values of ``model`` that can be computed now: ``Shape`` of a
    value with a static shape, and small ops whose inputs are all known (constants,
    small initializers, values folded before). Returns name -> numpy array."""
    import numpy as np
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator
    types = _types(model)
    known = dict(consts)
    for init in model.graph.initializer:
        n = int(np.prod(init.dims)) if len(init.dims) else 1
        if n <= FOLD_LIMIT and init.data_location != onnx.TensorProto.EXTERNAL:
            known.setdefault(init.name, numpy_helper.to_array(init))
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    new = {}
    for node in model.graph.node:
        outs = [o for o in node.output if o]
        if not outs or all(o in known for o in outs) or node.domain not in ("", "ai.onnx") \
                or node.op_type in _NOT_FOLDED:
            continue
        ins = [i for i in node.input if i]
        values = None
        if node.op_type in ("Shape", "Size"):
            dims = _static_dims(types.get(node.input[0]))
            if dims is None:
                continue
            if node.op_type == "Size":
                values = [np.array(int(np.prod(dims)), dtype=np.int64)]
            else:
                attrs = {a.name: a.i for a in node.attribute}
                values = [np.array(dims[attrs.get("start", 0):attrs.get("end", len(dims))]
                                   if "end" in attrs else dims[attrs.get("start", 0):],
                                   dtype=np.int64)]
        elif all(i in known for i in ins):
            if not _small_enough(node, [known[i] for i in ins]):
                continue
            try:
                values = ReferenceEvaluator(node, opsets={"": opset} if opset else None).run(
                    None, {i: known[i] for i in ins})
            except Exception:  # an op the reference cannot run: leave it to inference
                continue
        if values is None or any(np.asarray(v).size > FOLD_LIMIT for v in values):
            continue
        for name, value in zip(node.output, values):
            if name:
                known[name] = new[name] = np.asarray(value)
    return new


def _small_enough(node, inputs) -> bool:
    """Whether a size-making op would stay under FOLD_LIMIT elements (checked before running)."""
    import numpy as np
    try:
        if node.op_type in ("ConstantOfShape", "Expand"):
            shape = inputs[_SIZED_BY_INPUT[node.op_type]] if len(inputs) > _SIZED_BY_INPUT[node.op_type] else []
            return int(np.prod(np.maximum(np.asarray(shape, dtype=np.int64), 1))) <= FOLD_LIMIT
        if node.op_type == "Tile":
            return inputs[0].size * int(np.prod(np.asarray(inputs[1]))) <= FOLD_LIMIT
        if node.op_type == "Range":
            start, limit, delta = (float(np.asarray(x)) for x in inputs[:3])
            return delta != 0 and (limit - start) / delta <= FOLD_LIMIT
    except (TypeError, ValueError, IndexError):
        return False
    return all(np.asarray(x).size <= FOLD_LIMIT for x in inputs)


def _infer(onnx, model):
    """Shape inference; where shapes stay unknown (shape arithmetic such as ``Range``
    that ONNX's data propagation does not follow), fold the shape-computing values
    to constants and infer again, until nothing new folds. Returns the model whose
    value_info to read (the original's structure is unchanged)."""
    from onnx import helper, numpy_helper
    inferred = onnx.shape_inference.infer_shapes(model, check_type=True, data_prop=True)
    consts: dict = {}
    for _ in range(16):
        types = _types(inferred)
        if all(_static_dims(types.get(o)) is not None for n in model.graph.node
               for o in n.output if o):
            break
        new = _fold(onnx, inferred, consts)
        if not new:
            break
        consts.update(new)
        probe = onnx.ModelProto.FromString(model.SerializeToString())
        keep = [n for n in probe.graph.node if not all(o in consts for o in n.output if o)]
        del probe.graph.node[:]
        probe.graph.node.extend(keep)
        done = {i.name for i in probe.graph.initializer}
        probe.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in consts.items()
                                       if k not in done)
        inferred = onnx.shape_inference.infer_shapes(probe, check_type=True, data_prop=True)
        inferred.graph.value_info.extend(
            helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for k, v in consts.items())
    return inferred


def from_onnx(path_or_model: Any, *, input_shapes: Mapping[str, Any] | None = None,
              name: str | None = None, _flag: str = "input_shapes=") -> Graph:
    """Read an ONNX model (path, bytes or ModelProto) as an `emel.graph/1` Graph.

    ``input_shapes``: fixed shapes for graph inputs whose dimensions are
    symbolic (``{"x": [1, 3, 224, 224]}``); the fixed shapes are carried
    through shape arithmetic (``Shape``, ``Range``, ``Concat`` of sizes) by
    folding it. External weights (``.data`` files) are never read: planning
    needs shapes only. Raises PlanError (``INVALID_IR_SHAPES``) naming the
    first tensor whose shape is unknown after shape inference.
    """
    onnx = _require_onnx()
    flag = _flag.rstrip("=")
    model = _load_shapes_only(onnx, path_or_model)
    if input_shapes:
        model = _fix_input_shapes(onnx, model, input_shapes, flag)
    try:
        inferred = _infer(onnx, model)
    except Exception as e:  # onnx raises its own InferenceError / ValidationError types
        raise PlanError("INVALID_IR_SHAPES", f"ONNX shape inference failed: {e}") from None
    graph = model.graph
    value_types = _types(inferred)

    tensors: dict[str, dict] = {}

    def add(tid: str, dims, elem_type: int, role: str, where: str) -> dict:
        dtype, itemsize = _dtype(onnx, elem_type, tid)
        entry = {"id": tid, "shape": [int(d) for d in dims], "dtype": dtype, "role": role}
        if dtype not in DTYPE_BYTES:
            n = itemsize
            for d in entry["shape"]:
                n *= d
            entry["nbytes"] = n
        tensors[tid] = entry
        return entry

    def shape_of(tid: str, where: str, node: str | None = None, reads: list | None = None):
        ttype = value_types.get(tid)
        if ttype is None or not ttype.HasField("shape"):
            # A node's inputs that disagree (a Concat of 15x15 and 14x14 at input
            # shapes the model cannot take) leave its output without a shape too.
            known = [f"{i!r} {tensors[i]['shape']}" for i in (reads or []) if i in tensors]
            why = (f"; its node {node!r} reads {', '.join(known)} (shape inference gives no "
                   f"shape for an operator it does not know, nor for inputs whose shapes "
                   f"disagree)") if known else ""
            raise PlanError("INVALID_IR_SHAPES",
                            f"ONNX tensor {tid!r} ({where}) has an unknown shape after shape "
                            f"inference{why}; give fixed input shapes ({_flag}) the model can take, "
                            f"or a model with static shapes", tensor=tid, node=node)
        dims = []
        for d in ttype.shape.dim:
            if not d.HasField("dim_value"):
                what = f"the symbolic dimension {d.dim_param!r}" if d.dim_param else "an unknown dimension"
                raise PlanError("INVALID_IR_SHAPES",
                                f"ONNX tensor {tid!r} ({where}) has {what}; give fixed shapes "
                                f"with {_flag}", tensor=tid, node=node)
            dims.append(d.dim_value)
        return dims, ttype.elem_type

    for init in graph.initializer:
        entry = add(init.name, init.dims, init.data_type, "parameter", "initializer")
        if "." in init.name.strip("."):                 # model.layers.0.mlp.up_proj.weight
            entry["module"] = init.name.rsplit(".", 1)[0]
    for info in graph.input:
        if info.name not in tensors:
            dims, elem = shape_of(info.name, "graph input")
            add(info.name, dims, elem, "input", "graph input")

    graph_outputs = [o.name for o in graph.output]
    output_set = set(graph_outputs)
    nodes, node_ids = [], set()
    for index, node in enumerate(graph.node):
        node_id = node.name or f"{node.op_type}_{index}"
        while node_id in node_ids:
            node_id = f"{node_id}#{index}"
        node_ids.add(node_id)
        if node.op_type == "Constant":          # folded into an initializer by runtimes
            for out in node.output:
                if out:
                    dims, elem = shape_of(out, f"output of Constant node {node_id!r}", node_id)
                    add(out, dims, elem, "parameter", "constant")
            continue
        inputs = [i for i in dict.fromkeys(node.input) if i]
        for i in inputs:
            if i not in tensors:
                raise PlanError("INVALID_IR_SHAPES",
                                f"node {node_id!r} ({node.op_type}) reads {i!r}, which no earlier "
                                f"node, input or initializer defines (subgraph and outer-scope "
                                f"values are not supported)", tensor=i, node=node_id)
        outputs = []
        for k, out in enumerate(node.output):
            if not out:
                continue
            if out in tensors:
                raise PlanError("INVALID_IR_SHAPES",
                                f"node {node_id!r} ({node.op_type}) writes {out!r}, which is already "
                                f"defined (ONNX values are assigned once)", tensor=out, node=node_id)
            dims, elem = shape_of(out, f"output {k} of {node.op_type} node {node_id!r}", node_id, inputs)
            entry = add(out, dims, elem, "output" if out in output_set else "activation", "")
            data = tensors.get(node.input[0]) if node.input and node.input[0] else None
            # The first output of a view op: the same bytes as its data input, reshaped.
            view = data if node.op_type in VIEW_OPS and k == 0 else None
            if view is not None and math.prod(entry["shape"]) != math.prod(data["shape"]):
                # A view keeps its element count: the shapes disagree at these input shapes
                # (an exporter that traced the model may have fixed this target's sizes).
                raise PlanError("INVALID_IR_SHAPES",
                                f"node {node_id!r} ({node.op_type}) turns {data['id']!r} of shape "
                                f"{data['shape']} ({math.prod(data['shape'])} elements) into {out!r} of "
                                f"shape {entry['shape']} ({math.prod(entry['shape'])} elements); the model's "
                                f"shapes disagree at these input shapes (a traced export may have fixed "
                                f"this {node.op_type}'s target at the traced ones)", tensor=out, node=node_id)
            if view is not None and _aliases(entry, data, out in output_set):
                entry["nbytes"] = _nbytes(entry, onnx, elem)
                entry["view_of"] = {"base": data["id"], "byte_offset": 0}
            elif node.op_type in ELEMENTWISE_OPS and any(
                    tensors[i]["shape"] == entry["shape"] and tensors[i]["dtype"] == entry["dtype"]
                    for i in inputs):
                entry["can_inplace"] = True
            outputs.append(out)
        nodes.append({"id": node_id, "op": node.op_type, "inputs": inputs, "outputs": outputs})
        module = _node_module(node)
        if module:
            nodes[-1]["module"] = module
            for out in outputs:
                tensors[out]["module"] = module

    for out in graph_outputs:
        if out not in tensors:
            dims, elem = shape_of(out, "graph output")
            add(out, dims, elem, "output", "graph output")

    opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import)

    # Exporters name every graph alike (torch: "main_graph"): the file says which model it is.
    if name is None and isinstance(path_or_model, (str, os.PathLike)):
        name = os.path.splitext(os.path.basename(os.fspath(path_or_model)))[0]
    g = Graph(name=name or graph.name or "onnx-model",
              source=f"emel.memory.from_onnx: ONNX IR {model.ir_version}, opsets {opsets}; "
                     f"shapes from onnx.shape_inference")
    g.tensors = list(tensors.values())
    g.nodes = nodes
    g.outputs = list(dict.fromkeys(graph_outputs))
    return g


def _node_module(node) -> str | None:
    """The module path of an exported node: the torch exporter's name scopes
    (``['', 'model', 'layers.0', 'mlp', 'up_proj', 'linear']``), or a TorchScript-style
    node name (``/model/layers.0/mlp/up_proj/MatMul``); the last part is the op."""
    import ast
    for prop in node.metadata_props:
        if prop.key == "pkg.torch.onnx.name_scopes":
            try:
                scopes = ast.literal_eval(prop.value)
            except (ValueError, SyntaxError):
                break
            # Cumulative scopes: ['', 'model', 'model.layers.0', ..., op name].
            parts = [str(p) for p in scopes[:-1] if p]
            return parts[-1] if parts else None
    if node.name.startswith("/") and node.name.count("/") >= 2:
        return ".".join(p for p in node.name.strip("/").split("/")[:-1] if p) or None
    return None


def _nbytes(entry: dict, onnx, elem: int) -> int:
    n = _dtype(onnx, elem, entry["id"])[1]
    for d in entry["shape"]:
        n *= d
    return n


def _aliases(entry: dict, data: dict, is_graph_output: bool) -> bool:
    """Whether a runtime would let this view op's result share its input's bytes."""
    if entry["dtype"] != data["dtype"]:
        return False
    if is_graph_output and data["role"] in ("input", "parameter"):
        return False
    return True
