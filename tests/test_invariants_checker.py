"""The plan checker of tests/invariants.py can fail.

A small graph with a hand-computed plan (worked out from docs/algorithm.md)
passes the checker; each corruption of it (overlap, misalignment, wrong
death, wrong view offset, ...) must raise AssertionError from the right
check.  A property test then mutates real plans of random graphs in ways the
documented rules always detect.
"""

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

import graphgen
from invariants import check_plan

# x ──┐
#     ├─ n0 ─► h (+ hv = h[16:32], produced by n0 too) ─ n1 ─► g (in place of h) ─ n2 ─► y
# w ──┘
GRAPH = {
    "format": "emel.graph/1",
    "name": "checker-fixture",
    "tensors": [
        {"id": "x", "shape": [8], "dtype": "float32", "role": "input"},
        {"id": "w", "shape": [8], "dtype": "float32", "role": "parameter"},
        {"id": "h", "shape": [8], "dtype": "float32", "role": "activation"},
        {"id": "hv", "shape": [4], "dtype": "float32", "role": "activation",
         "view_of": {"base": "h", "byte_offset": 16}},
        {"id": "g", "shape": [8], "dtype": "float32", "role": "activation", "can_inplace": True},
        {"id": "y", "shape": [2], "dtype": "float32", "role": "output"},
    ],
    "nodes": [
        {"id": "n0", "op": "matmul", "inputs": ["x", "w"], "outputs": ["h", "hv"]},
        {"id": "n1", "op": "relu", "inputs": ["h"], "outputs": ["g"]},
        {"id": "n2", "op": "sum", "inputs": ["g"], "outputs": ["y"]},
    ],
}

# Worked by hand (inference, default alignment 128):
#   lifetimes x [0,0]  w [0,2]  h [0,1]  g [1,2]  y [2,2]
#   activations sweep (birth, size desc, id): h -> slot 0, x -> slot 1,
#   g takes h's slot in place at step 1, y reuses slot 1 (x died at 0).
#   slot sizes 128, 128 -> offsets 0, 128, arena 256.
#   max_live 2 (step 1: h, g minus the pair), lower_bound 64.
#   fragmentation: A = 32+64+64+8 = 168, B = 128*(1+2+2+1) = 768.
PLAN = {
    "format": "emel.plan/1",
    "graph": "checker-fixture",
    "mode": "inference",
    "strategy": "tmmu",
    "steps": 3,
    "arenas": {
        "activations": {"size": 256, "alignment": 128, "slots": 2, "lower_bound": 64,
                        "page_size": 4096, "persistent": False},
        "parameters": {"size": 128, "alignment": 128, "slots": 1, "lower_bound": 32,
                       "page_size": 4096, "persistent": True},
    },
    "tensors": {
        "x": {"arena": "activations", "offset": 128, "size": 32, "slot": 1, "birth": 0, "death": 0},
        "w": {"arena": "parameters", "offset": 0, "size": 32, "slot": 0, "birth": 0, "death": 2},
        "h": {"arena": "activations", "offset": 0, "size": 32, "slot": 0, "birth": 0, "death": 1},
        "hv": {"arena": "activations", "offset": 16, "size": 16, "view_of": "h"},
        "g": {"arena": "activations", "offset": 0, "size": 32, "slot": 0, "birth": 1, "death": 2,
              "inplace_of": "h"},
        "y": {"arena": "activations", "offset": 128, "size": 8, "slot": 1, "birth": 2, "death": 2},
    },
    "metrics": {
        "peak_logical_slots": {"activations": 2, "parameters": 1},
        "peak_physical_bytes": {"activations": 256, "parameters": 128},
        "lower_bound": {"activations": 64, "parameters": 32},
        "peak_live_bytes": {"activations": 64, "parameters": 32},
        "max_live": {"activations": 2, "parameters": 1},
        "storage_tensors": {"activations": 4, "parameters": 1},
        "memory_reuse_ratio": {"activations": 0.5, "parameters": 0.0},
        "internal_fragmentation_ratio": {"activations": 1.0 - 168 / 768, "parameters": 0.75},
        "total_bytes": 384,
        "total_lower_bound": 96,
    },
}


def _plan():
    return copy.deepcopy(PLAN)


def _graph():
    return copy.deepcopy(GRAPH)


def test_fixture_plan_passes():
    assert check_plan(GRAPH, PLAN, "inference")


def test_fixture_plan_matches_implementations():
    """The hand-computed plan is what both planners produce (when present)."""
    import emel.memory as mm
    # The hash fields (docs/determinism.md) are not hand-computed here; both
    # planners must agree on them.
    determinism_keys = ("hashes", "replay_token", "rank", "world_size")
    without = lambda d: {k: v for k, v in d.items() if k not in determinism_keys}  # noqa: E731
    if hasattr(mm, "plan"):
        assert without(mm.plan(_graph(), strategy="tmmu").to_dict()) == PLAN
    try:
        from emel.memory import reference
    except ImportError:
        reference = None
    if reference is not None:
        assert without(reference.plan(_graph())) == PLAN
        if hasattr(mm, "plan"):
            assert reference.plan(_graph()) == mm.plan(_graph(), strategy="tmmu").to_dict()
    if not hasattr(mm, "plan") and reference is None:
        pytest.skip("no planner available yet")


def _mut(fn):
    p = _plan()
    g = _graph()
    fn(g, p)
    return g, p


CORRUPTIONS = {
    # name: (mutation, regex the assertion message must match)
    "overlap": (lambda g, p: p["tensors"]["y"].update(slot=0, offset=0), "overlap"),
    "misaligned": (lambda g, p: (p["tensors"]["x"].update(offset=129), p["tensors"]["y"].update(offset=129)),
                   "misaligned"),
    "wrong_death": (lambda g, p: p["tensors"]["h"].update(death=2), "death"),
    "wrong_birth": (lambda g, p: p["tensors"]["g"].update(birth=0), "birth"),
    "wrong_view_offset": (lambda g, p: p["tensors"]["hv"].update(offset=0), "view offset"),
    "view_of_not_root": (lambda g, p: p["tensors"]["hv"].update(view_of="g"), "view_of"),
    "wrong_size": (lambda g, p: p["tensors"]["y"].update(size=4), "size"),
    "missing_entry": (lambda g, p: p["tensors"].pop("w"), "tensor entries"),
    "past_arena_end": (lambda g, p: p["arenas"]["activations"].update(size=128), "arena end"),
    "no_can_inplace": (lambda g, p: g["tensors"][4].pop("can_inplace"), "can_inplace"),
    "inplace_dropped": (lambda g, p: p["tensors"]["g"].pop("inplace_of"), "overlap"),
    "victim_saved_in_forward": (
        lambda g, p: (g["tensors"][3].update(saved_for_backward=True), p.update(mode="backward")),
        "saved"),
    "victim_is_output": (lambda g, p: g.update(outputs=["hv"]), "death"),
    "must_not_alias_overlap": (lambda g, p: g["tensors"][5].update(must_not_alias=["x"]),
                               "must_not_alias"),
    "wrong_lower_bound": (lambda g, p: p["arenas"]["activations"].update(lower_bound=63), "lower_bound"),
    "wrong_max_live": (lambda g, p: p["metrics"]["max_live"].update(activations=1), "max_live"),
    "wrong_ratio": (lambda g, p: p["metrics"]["memory_reuse_ratio"].update(activations=0.25),
                    "memory_reuse_ratio"),
    "wrong_total": (lambda g, p: p["metrics"].update(total_bytes=385), "total_bytes"),
    "wrong_alignment_echo": (lambda g, p: p["arenas"]["parameters"].update(alignment=64), "alignment"),
    "extra_slot": (
        lambda g, p: (p["tensors"]["y"].update(slot=2, offset=256),
                      p["arenas"]["activations"].update(size=384, slots=3)),
        "max_live"),
    "persistent_order": (lambda g, p: _second_parameter(g, p, swapped=True), "id order"),
}


def _second_parameter(g, p, swapped):
    """Add parameter "a" (id order before "w"); consistent except, when
    ``swapped``, "a" and "w" exchange slots (k-th in id order must be slot k)."""
    g["tensors"].append({"id": "a", "shape": [8], "dtype": "float32", "role": "parameter"})
    sa, sw = (1, 0) if swapped else (0, 1)
    p["tensors"]["a"] = {"arena": "parameters", "offset": 128 * sa, "size": 32, "slot": sa,
                         "birth": 0, "death": 2}
    p["tensors"]["w"].update(offset=128 * sw, slot=sw)
    p["arenas"]["parameters"].update(size=256, slots=2, lower_bound=64)
    m = p["metrics"]
    for key, value in (("peak_logical_slots", 2), ("peak_physical_bytes", 256), ("lower_bound", 64), ("peak_live_bytes", 64),
                       ("max_live", 2), ("storage_tensors", 2)):
        m[key]["parameters"] = value
    m["total_bytes"] = 512
    m["total_lower_bound"] = 128


def test_second_parameter_in_id_order_passes():
    g, p = _mut(lambda g, p: _second_parameter(g, p, swapped=False))
    assert check_plan(g, p, "inference")


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_checker_catches(name):
    mutate, pattern = CORRUPTIONS[name]
    g, p = _mut(mutate)
    with pytest.raises(AssertionError, match=pattern):
        check_plan(g, p, p["mode"])


def test_checker_catches_config_mismatch():
    with pytest.raises(AssertionError, match="alignment"):
        check_plan(GRAPH, PLAN, "inference", alignment=64)
    with pytest.raises(AssertionError, match="arenas"):
        check_plan(GRAPH, PLAN, "inference", arenas={"scratch": {}})


def test_checker_catches_wrong_mode():
    # forward mode: no saved tensors here, so the plan is the same except `mode`
    p = _plan()
    with pytest.raises(AssertionError):
        check_plan(GRAPH, p, "forward")
    p["mode"] = "forward"
    assert check_plan(GRAPH, p, "forward")


# ---------------------------------------------------------------------------
# mutations of real plans that the documented rules always detect
# ---------------------------------------------------------------------------
def _planner():
    try:
        from emel.memory import reference
        return reference.plan
    except ImportError:
        pass
    import emel.memory as mm
    if hasattr(mm, "plan_json"):
        return mm.plan_json
    return None


def _mutations(g, p):
    """name -> function(plan) for every mutation applicable to plan ``p``."""
    T = p["tensors"]
    storage = sorted(t for t, e in T.items() if "view_of" not in e)
    views = sorted(t for t, e in T.items() if "view_of" in e)
    muts = {}
    if storage:
        muts["death+1"] = lambda q, t: q["tensors"][t].update(death=q["tensors"][t]["death"] + 1)
        muts["birth+1"] = lambda q, t: q["tensors"][t].update(birth=q["tensors"][t]["birth"] + 1)
        muts["size+1"] = lambda q, t: q["tensors"][t].update(size=q["tensors"][t]["size"] + 1)
        muts["offset+align"] = lambda q, t: q["tensors"][t].update(
            offset=q["tensors"][t]["offset"] + q["arenas"][q["tensors"][t]["arena"]]["alignment"])
        muts["drop"] = lambda q, t: q["tensors"].pop(t)
        muts["slots+1"] = lambda q, t: q["arenas"][q["tensors"][t]["arena"]].update(
            slots=q["arenas"][q["tensors"][t]["arena"]]["slots"] + 1)
        muts["arena_size+align"] = lambda q, t: q["arenas"][q["tensors"][t]["arena"]].update(
            size=q["arenas"][q["tensors"][t]["arena"]]["size"] + q["arenas"][q["tensors"][t]["arena"]]["alignment"])
        muts["max_live+1"] = lambda q, t: q["metrics"]["max_live"].update(
            {q["tensors"][t]["arena"]: q["metrics"]["max_live"][q["tensors"][t]["arena"]] + 1})
        muts["lower_bound+1"] = lambda q, t: q["arenas"][q["tensors"][t]["arena"]].update(
            lower_bound=q["arenas"][q["tensors"][t]["arena"]]["lower_bound"] + 1)
    if views:
        muts["view_offset+1"] = lambda q, t: q["tensors"][t].update(offset=q["tensors"][t]["offset"] + 1)
        muts["view_of=self"] = lambda q, t: q["tensors"][t].update(view_of=t)
    return muts, storage, views


@given(graphgen.graphs(max_nodes=40), st.sampled_from(graphgen.MODES), st.data())
def test_checker_rejects_mutated_plans(g, mode, data):
    plan = _planner()
    if plan is None:
        pytest.skip("no planner available yet")
    p = plan(copy.deepcopy(g), strategy="tmmu", mode=mode)
    check_plan(g, p, mode)
    muts, storage, views = _mutations(g, p)
    name = data.draw(st.sampled_from(sorted(muts)), label="mutation")
    pool = views if name.startswith("view") else storage
    tid = data.draw(st.sampled_from(pool), label="tensor")
    q = copy.deepcopy(p)
    muts[name](q, tid)
    with pytest.raises(AssertionError):
        check_plan(g, q, mode)


@given(graphgen.graphs(max_nodes=40), st.sampled_from(graphgen.MODES), st.data())
def test_checker_rejects_forced_overlap(g, mode, data):
    """Move a storage tensor onto another one live at the same time."""
    plan = _planner()
    if plan is None:
        pytest.skip("no planner available yet")
    p = plan(copy.deepcopy(g), strategy="tmmu", mode=mode)
    T = p["tensors"]
    pairs = []
    storage = sorted(t for t, e in T.items() if "view_of" not in e and e["size"] > 0)
    for i, a in enumerate(storage):
        for b in storage[i + 1:]:
            ea, eb = T[a], T[b]
            if (ea["arena"] == eb["arena"] and ea["slot"] != eb["slot"]
                    and ea["birth"] <= eb["death"] and eb["birth"] <= ea["death"]):
                pairs.append((a, b))
    if not pairs:
        return
    a, b = data.draw(st.sampled_from(pairs[:200]), label="pair")
    q = copy.deepcopy(p)
    q["tensors"][a].update(slot=T[b]["slot"], offset=T[b]["offset"])
    with pytest.raises(AssertionError):
        check_plan(g, q, mode)
