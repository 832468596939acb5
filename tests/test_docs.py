"""Every ```python block in docs/*.md and README.md runs.

The blocks of one page run in order in one namespace (a page reads as one
session), with the repository root as the working directory.
"""

import re
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
FENCE = re.compile(r"^(?P<indent>[ \t]*)```python[ \t]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
                   re.MULTILINE | re.DOTALL)


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(line number, dedented code) of each ```python block, indented ones (in lists) too."""
    return [(text.count("\n", 0, m.start()) + 2, textwrap.dedent(m.group("body")))
            for m in FENCE.finditer(text)]


def test_block_extraction():
    text = "a\n```python\nx = 1\n```\n- item\n  ```python\n  y = x\n  ```\n```sh\nls\n```\n"
    assert python_blocks(text) == [(3, "x = 1\n"), (7, "y = x\n")]


PAGES_WITH_CODE = [p for p in PAGES if python_blocks(p.read_text(encoding="utf-8"))]


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=[p.name for p in PAGES_WITH_CODE])
def test_page_code_runs(page, monkeypatch):
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    monkeypatch.chdir(ROOT)
    namespace = {"__name__": f"docs_{page.stem}"}
    for line, code in python_blocks(page.read_text(encoding="utf-8")):
        try:
            exec(compile(code, f"{page.relative_to(ROOT)}:{line}", "exec"), namespace)
        except Exception as e:  # name the block in the failure
            raise AssertionError(f"{page.relative_to(ROOT)}, block at line {line}: "
                                 f"{type(e).__name__}: {e}") from e
