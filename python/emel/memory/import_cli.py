"""emel-import: write the `emel.graph/1` JSON of an ONNX or PyTorch model.

    emel-import MODEL.onnx [-o GRAPH.json] [--input-shape NAME=D,D,...]
    emel-import --torch MODULE:FUNCTION [--training [--optimizer NAME]] [-o GRAPH.json]
    emel-import --example NAME [-o GRAPH.json]

``--torch``: ``FUNCTION()`` in the importable ``MODULE`` returns ``(model,
example_inputs)``; the model is traced with :func:`emel.memory.from_torch`.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys

from . import examples
from .cli import add_input_shape_option, check_output_path, parse_input_shapes, write_output


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="emel-import",
        description="Import an ONNX model or a PyTorch module and write its emel.graph/1 JSON.")
    p.add_argument("model", nargs="?", help="an ONNX model file (.onnx)")
    p.add_argument("--torch", metavar="MODULE:FUNCTION",
                   help="a function returning (model, example_inputs) to trace with PyTorch")
    p.add_argument("--example", metavar="NAME",
                   help=f"write a bundled example graph ({', '.join(examples.names())})")
    p.add_argument("--training", action="store_true",
                   help="with --torch: the joint forward+backward graph of a training step")
    add_optimizer_option(p)
    p.add_argument("-o", "--output", default="-", metavar="GRAPH.json",
                   help="where to write the graph (default: standard output)")
    p.add_argument("--name", help="the graph's name (default: the model's)")
    add_input_shape_option(p)
    return p


def add_optimizer_option(p: argparse.ArgumentParser) -> None:
    from .optimizers import OPTIMIZER_NAMES
    p.add_argument("--optimizer", choices=sorted(OPTIMIZER_NAMES), default=None,
                   help="with --training: add the state this optimizer allocates and its step "
                        "(" + "; ".join(f"{k}: {v}" for k, v in OPTIMIZER_NAMES.items()) + ")")


def check_training_flags(p: argparse.ArgumentParser, args) -> None:
    """--training and --optimizer go with --torch, and --optimizer with --training
    (emel-import and emel-fit alike)."""
    if (args.training or args.optimizer) and args.torch is None:
        p.error("--training and --optimizer apply to --torch models")
    if args.optimizer and not args.training:
        p.error("--optimizer applies to --training")


def load_factory(spec: str):
    """The function ``MODULE:FUNCTION`` names: an importable module (one beside
    the caller included, as `python -m` finds it) or a ``.py`` file's path."""
    module_name, sep, func_name = spec.rpartition(":")
    if not sep or not module_name or not func_name:
        raise ValueError(f"--torch wants MODULE:FUNCTION (or FILE.py:FUNCTION), got {spec!r}")
    if module_name.endswith(".py") or "/" in module_name or os.sep in module_name:
        if not os.path.isfile(module_name):
            raise ValueError(f"--torch {spec}: no file {module_name!r}")
        spec_ = importlib.util.spec_from_file_location(
            os.path.splitext(os.path.basename(module_name))[0], module_name)
        module = importlib.util.module_from_spec(spec_)
        spec_.loader.exec_module(module)
    else:
        sys.path.insert(0, os.getcwd())  # a module beside the caller, as `python -m` would find it
        importlib.invalidate_caches()      # a file written since the last import in this process
        try:
            module = importlib.import_module(module_name)
        finally:
            sys.path.pop(0)
    factory = getattr(module, func_name, None)
    if not callable(factory):
        raise ValueError(f"--torch {spec}: {module_name} has no function {func_name!r}")
    return factory


def trace_made(made, spec: str, training: bool, name: str | None, optimizer: str | None = None):
    """from_torch of what a --torch factory returned: (model, args[, kwargs])."""
    func_name = spec.rpartition(":")[2]
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
    return from_torch(model, example_inputs, training=training, kwargs=kwargs, name=name,
                      optimizer=optimizer)


def _torch_graph(spec: str, training: bool, name: str | None, optimizer: str | None = None):
    return trace_made(load_factory(spec)(), spec, training, name, optimizer)


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    if sum(x is not None for x in (args.model, args.torch, args.example)) != 1:
        p.error("give an ONNX MODEL file, --torch MODULE:FUNCTION or --example NAME (one of them)")
    check_training_flags(p, args)
    try:
        shapes = parse_input_shapes(args.input_shape)
        check_output_path(args.output, "-o")
    except ValueError as e:
        p.error(str(e))
    if shapes and args.model is None:
        p.error("--input-shape applies to ONNX models only")
    try:
        if args.example is not None:
            graph = examples.load(args.example)
        elif args.torch is not None:
            graph = _torch_graph(args.torch, args.training, args.name, args.optimizer)
        else:
            from .onnx_importer import from_onnx
            graph = from_onnx(args.model, input_shapes=shapes or None, name=args.name,
                              _flag="--input-shape")
    except KeyError as e:  # an unknown example: its message lists the names
        print(f"emel-import: {e.args[0]}", file=sys.stderr)
        return 1
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
