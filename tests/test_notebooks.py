"""The notebooks in notebooks/ run top to bottom (nbclient, a fresh Python kernel) and show what they say."""

import os
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("torch")
pytest.importorskip("matplotlib")
pytest.importorskip("ipykernel")

import emel  # noqa: E402

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path, monkeypatch):
    # The kernel is a new process: it must import the same emel as these tests.
    package_root = str(Path(emel.__file__).resolve().parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [package_root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    CHECKS[path.name](outputs)


def _explore_a_plan(outputs):
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 2, "the plan and the strategies must be drawn"
    html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any(h.startswith("<div><b>Graph</b>") for h in html)
    assert any(h.startswith("<div><b>Plan</b>") for h in html)


def _executorch_planner(outputs):
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    numbers = {m.group(1).strip(): int(m.group(2).replace(",", ""))
               for m in re.finditer(r"^(ExecuTorch default|emel|lower bound)\s*:\s*([\d,]+) bytes", text, re.M)}
    assert set(numbers) == {"ExecuTorch default", "emel", "lower bound"}, text
    assert numbers["lower bound"] <= numbers["emel"] <= numbers["ExecuTorch default"]
    assert "bit-identical: True" in text
    assert "re-planned program, bit-identical: True" in text
    assert re.search(r"forward: mem_id 1, \d+ tensors, [\d,]+ -> [\d,]+ bytes", text)
    assert any("image/png" in o.get("data", {}) for o in outputs), "the comparison must be drawn"


CHECKS = {"01-explore-a-plan.ipynb": _explore_a_plan, "02-executorch-planner.ipynb": _executorch_planner}
