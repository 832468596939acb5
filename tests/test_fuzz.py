"""A short fuzz run over every public surface (fuzz/run.py, issue 12): a fixed
seed, every input in a forked worker with a time limit, so a crash, a hang,
a stray exception type or an accepted-but-wrong answer fails the suite.
Long campaigns: ``python fuzz/run.py --minutes N`` (docs/reliability.md)."""

import os
from pathlib import Path

import pytest

FUZZ = Path(__file__).resolve().parents[1] / "fuzz"

#: Inputs per surface in the suite: about 20-40 s on the 2-core CI box.
PER_SURFACE = int(os.environ.get("EMEL_FUZZ_PER_SURFACE", "1000"))


@pytest.fixture(scope="module")
def fuzz_run():
    if not FUZZ.is_dir():
        pytest.skip("no fuzz/ directory (not a source checkout)")
    os.environ.setdefault("EMEL_FUZZ_INSTALLED", "1")  # test the emel this suite imports
    import run  # fuzz/ is on pytest's pythonpath (pyproject.toml)
    import targets
    try:
        targets._lib()
    except OSError:  # no C library next to the package nor in build/: the C surface is skipped
        surfaces = [s for s in targets.SURFACES if s != "capi"]
    else:
        surfaces = list(targets.SURFACES)
    return run.campaign(inputs=PER_SURFACE * len(surfaces), seed=12, surfaces=surfaces, timeout=20)


def test_short_fuzz_run_finds_nothing(fuzz_run):
    assert fuzz_run["findings"] == []
    assert fuzz_run["inputs"] == PER_SURFACE * len(fuzz_run["counts"])


def test_short_fuzz_run_reaches_both_answers_on_every_surface(fuzz_run):
    """The mutators are not all refused nor all accepted: both paths run."""
    for surface, row in fuzz_run["counts"].items():
        assert row["accepted"] > 0 and row["refused"] > 0, (surface, row)


def test_a_seed_reproduces_its_input_after_any_other_inputs():
    """Generating inputs never edits the mutators' shared pools: the value
    pool once handed out the same list and dict to many documents, and a
    later in-place edit grew them (a long campaign ended with a document that
    contained itself, and a saved seed no longer reproduced its input)."""
    if not FUZZ.is_dir():
        pytest.skip("no fuzz/ directory (not a source checkout)")
    import mutate
    import targets
    pool = repr(mutate.ODD_VALUES)
    first = {s: repr(targets.generate(s, 7)) for s in targets.SURFACES}
    for seed in range(300):
        for s in targets.SURFACES:
            targets.generate(s, seed)
    assert repr(mutate.ODD_VALUES) == pool
    assert {s: repr(targets.generate(s, 7)) for s in targets.SURFACES} == first
