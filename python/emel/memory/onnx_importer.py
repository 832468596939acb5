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

import os
from typing import Any, Mapping

from .errors import PlanError
from .graph import DTYPE_BYTES, Graph

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
        raise ImportError("emel.memory.from_onnx needs onnx: pip install 'emel[onnx]'") from None
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
    if isinstance(source, onnx.ModelProto):
        return source
    if isinstance(source, (bytes, bytearray)):
        return onnx.load_from_string(bytes(source))
    if isinstance(source, (str, os.PathLike)):
        return onnx.load(os.fspath(source))
    raise TypeError(f"from_onnx takes a path, bytes or an onnx.ModelProto, not {type(source).__name__}")


def _fix_input_shapes(onnx, model, input_shapes: Mapping[str, Any]):
    """A copy of the model whose named graph inputs have the given fixed shapes."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    inputs = {v.name: v for v in model.graph.input}
    for name in sorted(input_shapes):
        if name not in inputs:
            raise PlanError("INVALID_IR_SHAPES",
                            f"input_shapes names {name!r}, which is not a graph input (inputs: "
                            f"{', '.join(sorted(inputs))})", tensor=name)
        dims = inputs[name].type.tensor_type.shape.dim
        del dims[:]
        for d in input_shapes[name]:
            dims.add().dim_value = int(d)
    return model


def from_onnx(path_or_model: Any, *, input_shapes: Mapping[str, Any] | None = None,
              name: str | None = None) -> Graph:
    """Read an ONNX model (path, bytes or ModelProto) as an `emel.graph/1` Graph.

    ``input_shapes``: fixed shapes for graph inputs whose dimensions are
    symbolic (``{"x": [1, 3, 224, 224]}``). Raises PlanError
    (``INVALID_IR_SHAPES``) naming the first tensor whose shape is unknown
    after shape inference.
    """
    onnx = _require_onnx()
    model = _load(onnx, path_or_model)
    if input_shapes:
        model = _fix_input_shapes(onnx, model, input_shapes)
    try:
        model = onnx.shape_inference.infer_shapes(model, check_type=True, data_prop=True)
    except Exception as e:  # onnx raises its own InferenceError / ValidationError types
        raise PlanError("INVALID_IR_SHAPES", f"ONNX shape inference failed: {e}") from None
    graph = model.graph

    value_types = {}
    for info in list(graph.input) + list(graph.value_info) + list(graph.output):
        if info.type.HasField("tensor_type"):
            value_types.setdefault(info.name, info.type.tensor_type)

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

    def shape_of(tid: str, where: str, node: str | None = None):
        ttype = value_types.get(tid)
        if ttype is None or not ttype.HasField("shape"):
            raise PlanError("INVALID_IR_SHAPES",
                            f"ONNX tensor {tid!r} ({where}) has an unknown shape after shape "
                            f"inference; give fixed input shapes (input_shapes=) or a model with "
                            f"static shapes", tensor=tid, node=node)
        dims = []
        for d in ttype.shape.dim:
            if not d.HasField("dim_value"):
                what = f"the symbolic dimension {d.dim_param!r}" if d.dim_param else "an unknown dimension"
                raise PlanError("INVALID_IR_SHAPES",
                                f"ONNX tensor {tid!r} ({where}) has {what}; give fixed shapes "
                                f"with input_shapes=", tensor=tid, node=node)
            dims.append(d.dim_value)
        return dims, ttype.elem_type

    for init in graph.initializer:
        add(init.name, init.dims, init.data_type, "parameter", "initializer")
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
            dims, elem = shape_of(out, f"output {k} of {node.op_type} node {node_id!r}", node_id)
            entry = add(out, dims, elem, "output" if out in output_set else "activation", "")
            data = tensors.get(node.input[0]) if node.input and node.input[0] else None
            if node.op_type in VIEW_OPS and k == 0 and data is not None and _aliases(
                    entry, data, out in output_set):
                entry["nbytes"] = _nbytes(entry, onnx, elem)
                entry["view_of"] = {"base": data["id"], "byte_offset": 0}
            elif node.op_type in ELEMENTWISE_OPS and any(
                    tensors[i]["shape"] == entry["shape"] and tensors[i]["dtype"] == entry["dtype"]
                    for i in inputs):
                entry["can_inplace"] = True
            outputs.append(out)
        nodes.append({"id": node_id, "op": node.op_type, "inputs": inputs, "outputs": outputs})

    for out in graph_outputs:
        if out not in tensors:
            dims, elem = shape_of(out, "graph output")
            add(out, dims, elem, "output", "graph output")

    opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import)
    g = Graph(name=name or graph.name or "onnx-model",
              source=f"emel.memory.from_onnx: ONNX IR {model.ir_version}, opsets {opsets}; "
                     f"shapes from onnx.shape_inference")
    g.tensors = list(tensors.values())
    g.nodes = nodes
    g.outputs = list(dict.fromkeys(graph_outputs))
    return g


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
