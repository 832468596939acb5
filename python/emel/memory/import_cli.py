"""emel-import: write the `emel.graph/1` JSON of an ONNX or PyTorch model.

    emel-import MODEL.onnx [-o GRAPH.json] [--input-shape NAME=D,D,...]
    emel-import --torch MODULE:FUNCTION [--training] [-o GRAPH.json]

``--torch``: ``FUNCTION()`` in the importable ``MODULE`` returns ``(model,
example_inputs)``; the model is traced with :func:`emel.memory.from_torch`.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .cli import add_input_shape_option, check_output_path, parse_input_shapes, write_output


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="emel-import",
        description="Import an ONNX model or a PyTorch module and write its emel.graph/1 JSON.")
    p.add_argument("model", nargs="?", help="an ONNX model file (.onnx)")
    p.add_argument("--torch", metavar="MODULE:FUNCTION",
                   help="a function returning (model, example_inputs) to trace with PyTorch")
    p.add_argument("--training", action="store_true",
                   help="with --torch: the joint forward+backward graph of a training step")
    p.add_argument("-o", "--output", default="-", metavar="GRAPH.json",
                   help="where to write the graph (default: standard output)")
    p.add_argument("--name", help="the graph's name (default: the model's)")
    add_input_shape_option(p)
    return p


def _torch_graph(spec: str, training: bool, name: str | None):
    module_name, sep, func_name = spec.partition(":")
    if not sep or not module_name or not func_name:
        raise ValueError(f"--torch wants MODULE:FUNCTION, got {spec!r}")
    sys.path.insert(0, ".")  # a module beside the caller, as `python -m` would find it
    try:
        factory = getattr(importlib.import_module(module_name), func_name)
    finally:
        sys.path.pop(0)
    made = factory()
    # (model, args) or (model, args, kwargs): say so in one line, not a traceback.
    if not isinstance(made, (tuple, list)) or len(made) not in (2, 3):
        raise ValueError(f"--torch {spec}: {func_name}() must return (model, example_inputs) or "
                         f"(model, example_inputs, kwargs), got {type(made).__name__}"
                         f"{' of length ' + str(len(made)) if isinstance(made, (tuple, list)) else ''}")
    model, example_inputs, kwargs = (*made, None) if len(made) == 2 else made
    import torch
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"--torch {spec}: the first value {func_name}() returns must be a "
                         f"torch.nn.Module, got {type(model).__name__}")
    from .torch_importer import from_torch
    return from_torch(model, example_inputs, training=training, kwargs=kwargs, name=name)


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    if (args.model is None) == (args.torch is None):
        p.error("give an ONNX MODEL file or --torch MODULE:FUNCTION (one of them)")
    if args.training and args.torch is None:
        p.error("--training applies to --torch models")
    try:
        shapes = parse_input_shapes(args.input_shape)
        check_output_path(args.output, "-o")
    except ValueError as e:
        p.error(str(e))
    try:
        if args.torch is not None:
            graph = _torch_graph(args.torch, args.training, args.name)
        else:
            from .onnx_importer import from_onnx
            graph = from_onnx(args.model, input_shapes=shapes or None, name=args.name,
                              _flag="--input-shape")
    except (OSError, ImportError, ValueError, AttributeError) as e:  # PlanError is a ValueError
        print(f"emel-import: {e}", file=sys.stderr)
        return 1
    text = graph.to_json(indent=1) + "\n"
    if args.output == "-":
        sys.stdout.write(text)
    else:
        if not write_output(args.output, text, "emel-import"):
            return 1
        print(f"{graph.name}: {len(graph.tensors)} tensors, {len(graph.nodes)} nodes "
              f"written to {args.output}")
    return 0


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    entry()
