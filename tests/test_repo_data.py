"""The repository owns its data: every set the tests, benches and docs use is
under data/, complete, and nothing looks beside the checkout for it."""

import re

import emel.memory as mm
from emel.memory import examples
from repo_data import CHALLENGING, DATA, GGML_BASELINE, GRAPH_FILES, IDEALLOC, ROOT, graph_path


def test_every_data_set_is_in_the_repository():
    assert [p.stem for p in GRAPH_FILES] == [
        "gpt2-small-inference", "llama-tiny-inference", "llama-tiny-training",
        "mobilenet_v2-inference", "resnet18-inference", "resnet18-training"]
    assert sorted(p.name[0] for p in CHALLENGING.glob("*.1048576.csv")) == list("ABCDEFGHIJK")
    assert sorted(p.stem for p in IDEALLOC.glob("*.csv")) == ["S_1", "Y_1", "pangu_2.6B"]
    rows = [r for r in GGML_BASELINE.read_text().splitlines() if r and not r.startswith(("#", "file"))]
    assert sorted(r.split("\t")[0] for r in rows) == [p.stem for p in GRAPH_FILES]
    # every CSV parses and has the rows its README states (D: 400 buffers... checked by size)
    _, lower, _, _ = mm.read_buffers_csv(IDEALLOC / "pangu_2.6B.csv")
    assert len(lower) == 18_692


def test_bundled_examples_are_the_data_copies():
    for name in examples.names():
        assert examples.path(name).read_bytes() == graph_path(name).read_bytes(), name


def test_nothing_reads_beside_the_checkout_or_edits_sys_path():
    """A user's clone has nothing beside it (no shared folder); the tests' and benches' imports come
    from pytest's pythonpath (pyproject.toml) or the script's own folder, not
    from sys.path edits."""
    beside = re.compile(r"\.\./shared|parents\[2\]\s*/\s*\"shared\"|\.parent\s*/\s*\"shared\"")
    path_edit = re.compile(r"sys\.path\.(insert|append)")
    offenders = []
    for folder in ("tests", "bench", "docs", "scripts", "fuzz"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in (".py", ".md", ".sh") or path.name == "test_repo_data.py":
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if beside.search(line) or (folder in ("tests", "bench", "docs") and path_edit.search(line)):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []
    assert (DATA / "README.md").is_file()
