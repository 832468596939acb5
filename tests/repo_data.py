"""Where the tests' data lives: inside the repository, under data/ (data/README.md
names each set's source and licence). Nothing here looks beside the checkout.

conftest.py serves these as fixtures; module-level parametrisation imports
the lists directly (pytest collects parameters before any fixture exists).
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
GRAPHS = DATA / "graphs"
CHALLENGING = DATA / "dsa" / "minimalloc-challenging"
IDEALLOC = DATA / "dsa" / "idealloc"
GGML_BASELINE = DATA / "baselines" / "ggml-alloc.tsv"

#: every model graph, by name (gpt2-small-inference, llama-tiny-training, ...)
GRAPH_FILES = sorted(GRAPHS.glob("*.json"))


def graph_path(name: str) -> Path:
    """A bundled model graph by its stem; a missing one is a broken checkout, not a skip."""
    path = GRAPHS / f"{name}.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: data/ is part of the repository")
    return path


def challenging_path(name: str) -> Path:
    """MiniMalloc's challenging instance A-K, posed at 1,048,576 bytes."""
    path = CHALLENGING / f"{name}.1048576.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: data/ is part of the repository")
    return path


def child_env(**extra: str) -> dict:
    """The environment for a test's child interpreter: it imports the bench/
    and tests/ helpers as pytest's `pythonpath` setting lets the tests do."""
    import os
    paths = [str(ROOT / "tests"), str(ROOT / "bench"), str(ROOT / "fuzz")]
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths), **extra)
