"""The real model graphs of data/graphs: every mode plans, passes the
invariants and matches the reference exactly (E0)."""

import json

import pytest

import emel.memory as mm
from emel.memory import reference

from invariants import check_plan

from repo_data import GRAPH_FILES as FILES

CASES = [(path, mode) for path in FILES for mode in mm.MODES]


@pytest.mark.parametrize("path,mode", CASES, ids=[f"{p.stem}-{m}" for p, m in CASES])
@pytest.mark.parametrize("alignment", [None, 32])
def test_model_graph_matches_reference_and_invariants(model_documents, path, mode, alignment):
    doc = model_documents[path]  # conftest.py
    plan = mm.plan(doc, strategy="tmmu", mode=mode, alignment=alignment)
    ours = plan.to_dict()
    ref = reference.plan(doc, mode=mode, alignment=alignment)
    assert ours == ref
    assert plan.to_json() == json.dumps(ref, sort_keys=True)
    check_plan(doc, ours, mode, alignment=alignment)
    for name, arena in plan.arenas.items():
        if not arena.persistent:
            assert arena.slots == plan.metrics["max_live"][name]
        assert arena.size >= arena.lower_bound or not arena.persistent


def test_training_graphs_differ_by_mode(model_documents):
    """Saved tensors make the forward mode keep more than inference."""
    for path in FILES:
        if "training" not in path.stem:
            continue
        doc = model_documents[path]
        inf = mm.plan(doc, strategy="tmmu", mode="inference")
        fwd = mm.plan(doc, strategy="tmmu", mode="forward")
        assert fwd.metrics["total_lower_bound"] > inf.metrics["total_lower_bound"]
        saved = [t["id"] for t in doc["tensors"] if t.get("saved_for_backward")
                 and "view_of" not in t]
        assert saved and all(fwd.tensors[t].death == fwd.steps - 1 for t in saved)
