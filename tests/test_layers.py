"""The layers of the ``emel`` Python package, and no import cycles (issue 15).

Every module under ``python/emel`` is parsed with :mod:`ast`; every import
counts, at module level or inside a function, absolute or relative, and
``from emel.memory import x`` where ``x`` is a submodule counts as an import
of ``x``. Literal ``importlib.import_module("...")`` calls count too. An
import names its deepest module (``import emel.memory.cbor`` is an import of
``emel.memory.cbor``, not of the package ``emel.memory``, although Python runs
the package's ``__init__`` first).

The checks:

* the import graph has no cycle;
* every module is in :data:`LAYERS` (a new module must be placed), and no
  module imports a module of a higher layer (same layer or lower is fine).

The layers, bottom to top (module names relative to ``emel.memory``):

0. primitives: ``emel`` (the top package), errors, cbor, formats (units and
   number formatting), native (where the C API lives), ``_core`` (the
   compiled C++ core), bisection (emel-fit's searches' shared loop).
1. data model: determinism (hashes, replay tokens), symbolic (symbolic
   dimensions, shape envelopes), graph (the ``emel.graph/1`` document),
   plan_data (``Plan`` and its placements, and the registry of the plan
   methods upper layers provide), examples (bundled graphs), arena_layout
   (which roles share an arena: plan()'s and the reference's arena_layout).
2. graph transformations the planner applies: sharding (a rank's share of a
   graph), reorder (a memory-aware execution order, for ``order="optimize"``),
   optimizers (the optimizer state and step a training import adds).
3. planning: planning (``plan()``, the driver), placement (``place()`` on
   buffer lists), presets, reference (the pure-Python reference planner).
4. what consumes a plan, and what-if tools: arenas, checkpoint, trace, peak,
   viz, pooling, shapes (replanning for dynamic shapes), ggml, cost_model,
   remat.
5. importers and runtime integrations: torch_importer, onnx_importer,
   remat_torch, executorch (ExecuTorch's memory planning pass).
6. command lines and the package: cli, import_cli, trace_cli, fit, sweep,
   ``__main__``, and ``emel.memory`` itself (its ``__init__`` imports
   everything, which is what fills the plan-method registry).

``Plan.allocate()``, ``.checkpoint()``, ``.peak()`` and ``.plot()`` reach
layer 4 through ``emel.memory.plan_data.plan_method`` (filled by arenas,
checkpoint, peak and viz when they are imported), never by importing it.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "python"
PREFIX = "emel.memory."

LAYERS = {
    # 0: primitives
    "emel": 0, "errors": 0, "cbor": 0, "formats": 0, "native": 0, "_core": 0, "vocabulary": 0,
    "bisection": 0,
    # 1: data model
    "determinism": 1, "symbolic": 1, "graph": 1, "plan_data": 1, "examples": 1, "arena_layout": 1,
    # 2: graph transformations the planner applies
    "sharding": 2, "reorder": 2,
    # 3: planning
    "planning": 3, "placement": 3, "presets": 3, "reference": 3,
    # 4: plan consumers and what-if tools
    "arenas": 4, "checkpoint": 4, "trace": 4, "peak": 4, "viz": 4, "pooling": 4, "shapes": 4,
    "ggml": 4, "cost_model": 4, "remat": 4,
    # the optimizer step a training import adds (graph edits, no torch)
    "optimizers": 2,
    # 5: importers
    "torch_importer": 5, "onnx_importer": 5, "remat_torch": 5,
    # 5 too: the runtime integrations (ExecuTorch's memory planning pass)
    "executorch": 5,
    # 5 too: GGUF models (llama.cpp's graphs and buffers); emel-fit's GGUF search at 6
    "gguf": 5, "gguf.reader": 5, "gguf.ggml_ops": 5, "gguf.llama_graph": 5, "gguf.fit": 6,
    # 6: command lines and the package itself
    "cli": 6, "import_cli": 6, "trace_cli": 6, "fit": 6, "sweep": 6, "__main__": 6, "emel.memory": 6,
}

#: Compiled modules: no .py file to parse, but importable names.
EXTENSIONS = {"emel.memory._core"}


def short(name: str) -> str:
    return name[len(PREFIX):] if name.startswith(PREFIX) else name


# ---------------------------------------------------------------------------
# the checker
# ---------------------------------------------------------------------------
def module_files(root: Path = ROOT) -> dict[str, tuple[Path, bool]]:
    """dotted name -> (path, is_package) for every .py file under root/emel."""
    out = {}
    for path in sorted((root / "emel").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts.pop()
        out[".".join(parts)] = (path, is_pkg)
    return out


def _resolve_relative(module: str, is_pkg: bool, level: int, target: str | None) -> str:
    package = module if is_pkg else module.rpartition(".")[0]
    for _ in range(level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{target}" if target else package


def _deepest(name: str, known: set[str]) -> str | None:
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str, is_pkg: bool, source: str, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``source`` (the text of ``module``) imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.add(_deepest(alias.name, known))
        elif isinstance(node, ast.ImportFrom):
            base = (_resolve_relative(module, is_pkg, node.level, node.module) if node.level
                    else node.module)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else _deepest(base, known))
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                   or (isinstance(node.func, ast.Name) and node.func.id in ("import_module", "__import__")))):
            name = node.args[0].value
            if name.startswith("."):
                level = len(name) - len(name.lstrip("."))
                name = _resolve_relative(module, is_pkg, level, name.lstrip(".") or None)
            found.add(_deepest(name, known))
    found.discard(None)
    found.discard(module)
    return found


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    files = module_files(root)
    known = set(files) | EXTENSIONS
    graph = {name: set() for name in known}
    for name, (path, is_pkg) in files.items():
        graph[name] = imports_of(name, is_pkg, path.read_text(encoding="utf-8"), known)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle as [a, b, ..., a], or None (iterative depth-first search)."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = {n: WHITE for n in graph}
    for start in sorted(graph):
        if colour[start] != WHITE:
            continue
        stack = [(start, iter(sorted(graph[start])))]
        path = [start]
        colour[start] = GREY
        while stack:
            node, children = stack[-1]
            for child in children:
                if colour.get(child, BLACK) == GREY:
                    return path[path.index(child):] + [child]
                if colour.get(child) == WHITE:
                    colour[child] = GREY
                    path.append(child)
                    stack.append((child, iter(sorted(graph[child]))))
                    break
            else:
                colour[node] = BLACK
                path.pop()
                stack.pop()
    return None


def upward_imports(graph: dict[str, set[str]], layers: dict[str, int]) -> list[str]:
    """'a (layer i) imports b (layer j > i)' for every import that goes up."""
    out = []
    for name in sorted(graph):
        for dep in sorted(graph[name]):
            mine, theirs = layers.get(short(name)), layers.get(short(dep))
            if mine is not None and theirs is not None and theirs > mine:
                out.append(f"{short(name)} (layer {mine}) imports {short(dep)} (layer {theirs})")
    return out


# ---------------------------------------------------------------------------
# the package
# ---------------------------------------------------------------------------
def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(short(n) for n in cycle)


def test_every_module_has_a_layer():
    modules = {short(n) for n in import_graph()}
    missing = sorted(modules - set(LAYERS))
    stale = sorted(set(LAYERS) - modules)
    assert not missing, f"modules without a layer (add them to LAYERS in {__file__}): {missing}"
    assert not stale, f"LAYERS names modules that do not exist: {stale}"


def test_no_module_imports_upward():
    assert upward_imports(import_graph(), LAYERS) == []


def test_planning_reaches_no_plan_consumer():
    """The old hub: planning and plan_data import none of layer 4 and above."""
    graph = import_graph()
    for name in ("planning", "plan_data", "graph"):
        assert {short(d) for d in graph[PREFIX + name] if LAYERS[short(d)] >= 4} == set()


# ---------------------------------------------------------------------------
# the checker can fail
# ---------------------------------------------------------------------------
def test_the_checker_finds_a_cycle_and_an_upward_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    cycle = find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1] and set(cycle) == {"a", "b", "c"}
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"a"}}) == ["a", "a"]
    layers = {"a": 0, "b": 1, "c": 1}
    assert upward_imports({"a": {"b"}, "b": {"c"}, "c": set()}, layers) == [
        "a (layer 0) imports b (layer 1)"]
    assert upward_imports({"b": {"a", "c"}, "a": set(), "c": set()}, layers) == []


def test_the_parser_sees_every_form_of_import():
    known = {"emel", "emel.memory", "emel.memory.a", "emel.memory.b", "emel.memory.c",
             "emel.memory.d", "emel.memory.e", "emel.memory.sub", "emel.memory.sub.x", "emel.memory._core"}
    source = '''
import json
from . import a, _core
from .b import thing
import emel.memory.c as c
def later():
    from emel.memory import d
    import importlib
    importlib.import_module(".e", __package__)
    return importlib.import_module("emel.memory.sub.x")
class K:
    def m(self):
        from .sub import x
        from emel.memory import not_a_module
'''
    found = imports_of("emel.memory.mod", False, source, known)
    assert found == {"emel.memory.a", "emel.memory._core", "emel.memory.b", "emel.memory.c",
                     "emel.memory.d", "emel.memory.e", "emel.memory.sub.x", "emel.memory"}
    # relative imports from a package's __init__ and from a subpackage
    assert imports_of("emel.memory", True, "from .a import f", known) == {"emel.memory.a"}
    assert imports_of("emel.memory.sub", True, "from ..b import f", known) == {"emel.memory.b"}
    assert imports_of("emel.memory.sub.x", False, "from .. import a", known) == {"emel.memory.a"}


# ---------------------------------------------------------------------------
# the registry and fresh interpreters
# ---------------------------------------------------------------------------
def _package_root() -> str:
    """Where the emel this suite tests lives: the source tree in a checkout
    run, site-packages after ``pip install`` (the compiled core is there)."""
    import emel.memory
    return str(Path(emel.memory.__file__).resolve().parents[2])


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([_package_root()] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


# Each module imported on its own: emel and emel.memory are stand-in packages
# (so the package __init__, which imports everything, does not run), and the
# emel modules loaded for one module are dropped before the next, so each one
# must import what it needs itself. The compiled core stays loaded.
_ALONE = r'''
import importlib, sys, types
root, names = sys.argv[1], sys.argv[2:]
for pkg, path in (("emel", root + "/emel"), ("emel.memory", root + "/emel/memory")):
    stub = types.ModuleType(pkg)
    stub.__path__ = [path]
    sys.modules[pkg] = stub
for name in names:
    for loaded in [m for m in sys.modules if m.startswith("emel.memory.") and m != "emel.memory._core"]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception as e:
        print(f"{name}: {type(e).__name__}: {e}")
'''


def test_each_module_imports_alone():
    names = sorted((n for n in import_graph() if n.startswith(PREFIX) and n not in EXTENSIONS
                    and not n.endswith("__main__")), key=lambda n: (LAYERS[short(n)], n))
    out = subprocess.run([sys.executable, "-c", _ALONE, _package_root(), *names], env=_env(),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "", out.stdout


def test_a_fresh_interpreter_fills_every_plan_method_slot():
    """Importing any emel.memory module runs the package __init__, which imports the providers."""
    code = ("import emel.memory.plan_data as pd, emel.memory as mm\n"
            "assert set(pd._PLAN_METHODS) == set(pd.PLAN_METHOD_PROVIDERS), pd._PLAN_METHODS\n"
            "for name in mm.__all__: getattr(mm, name)\n"
            "import emel.memory.planning as p\n"
            "assert p.Plan is mm.Plan and p.format_bytes(1536) == '1.5 KiB'\n")
    out = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr


def test_an_empty_slot_says_which_module_to_import(monkeypatch):
    import emel.memory as mm
    from emel.memory import examples, plan_data

    p = mm.plan(examples.load())
    monkeypatch.delitem(plan_data._PLAN_METHODS, "plot")
    with pytest.raises(ImportError, match=r"Plan\.plot\(\) is provided by emel\.memory\.viz"):
        p.plot()
    with pytest.raises(ValueError, match="no plan method slot"):
        plan_data.register_plan_method("nope", print)


# ---------------------------------------------------------------------------
# C++: the include directions of src/ (docs/architecture.md, "Include directions")
# ---------------------------------------------------------------------------
CPP_SRC = ROOT.parent / "src"
#: folder of src/emel/memory -> the folders below it that it may include (its
#: own headers always); src/bindings may include any of them. A new folder must
#: be placed here.
CPP_MAY_INCLUDE = {
    "core": set(),
    "placement": {"core"},
    "determinism": {"core"},
    "runtime": {"determinism", "core"},
    "ggml": {"placement", "core"},
    "pipeline": {"placement", "determinism", "core"},
    "c_api": {"pipeline", "ggml", "runtime", "placement", "determinism", "core"},
}
_CPP_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def cpp_include_violations(src: Path = CPP_SRC) -> list[str]:
    """One line per quoted #include that breaks the table above, or per
    folder of src/emel/memory that the table does not place."""
    out = []
    core_root = src / "emel" / "memory"
    for folder in sorted(p.name for p in core_root.iterdir() if p.is_dir()):
        if folder not in CPP_MAY_INCLUDE:
            out.append(f"src/emel/memory/{folder}/: a folder with no place in CPP_MAY_INCLUDE")
    for path in sorted(src.rglob("*.[ch]pp")):
        rel = path.relative_to(src).as_posix()
        parts = rel.split("/")
        folder = parts[2] if parts[:2] == ["emel", "memory"] and len(parts) > 3 else None
        for target in _CPP_INCLUDE.findall(path.read_text(encoding="utf-8")):
            if not target.startswith("emel/memory/"):
                if folder is not None and target != "emel/memory.h":
                    out.append(f"{rel}: includes {target!r} without its folder")
                continue
            other = target.split("/")[2]
            if folder is None or other == folder:
                continue  # src/bindings, or the folder's own header
            if other not in CPP_MAY_INCLUDE.get(folder, set()):
                out.append(f"{rel}: {folder}/ includes {target} ({other}/ is not below it)")
    return out


def test_cpp_include_directions():
    assert cpp_include_violations() == []


def test_cpp_include_check_finds_an_upward_include(tmp_path):
    core = tmp_path / "emel" / "memory" / "core"
    core.mkdir(parents=True)
    (core / "plan.cpp").write_text('#include "emel/memory/core/plan.hpp"\n'
                                   '#include "emel/memory/placement/placement.hpp"\n')
    (tmp_path / "emel" / "memory" / "newfolder").mkdir()
    assert cpp_include_violations(tmp_path) == [
        "src/emel/memory/newfolder/: a folder with no place in CPP_MAY_INCLUDE",
        "emel/memory/core/plan.cpp: core/ includes emel/memory/placement/placement.hpp "
        "(placement/ is not below it)",
    ]


# ---------------------------------------------------------------------------
# the compiled module's type stub (python/emel/memory/_core.pyi)
# ---------------------------------------------------------------------------
def _stub_names(text: str) -> set[str]:
    names = set()
    for node in ast.parse(text).body:
        if isinstance(node, ast.ClassDef):
            names.add(node.name)
            names.update(f"{node.name}.{m.name}" for m in node.body if isinstance(m, ast.FunctionDef))
        elif isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            names.add(node.target.id)
    return names


def _module_names(module) -> set[str]:
    import inspect
    names = set()
    for name, obj in vars(module).items():
        if name.startswith("__"):
            continue
        names.add(name)
        if inspect.isclass(obj):
            for member, raw in vars(obj).items():
                if member.startswith("_") and member != "__init__":
                    continue
                if member == "__init__" and "Initialize self" in (getattr(obj, member).__doc__ or ""):
                    continue  # no constructor bound: made by the core only
                if isinstance(raw, (property, staticmethod)) or callable(raw):
                    names.add(f"{name}.{member}")
    return names


def test_core_stub_names_what_the_module_has():
    """scripts/core_stub.py writes the stub; rerun it after changing src/bindings/."""
    from emel.memory import _core
    stub = (ROOT / "emel" / "memory" / "_core.pyi").read_text(encoding="utf-8")
    assert _stub_names(stub) == _module_names(_core)
