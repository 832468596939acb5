"""Dynamic shapes (docs/dynamic-shapes-and-sharding.md): symbolic dimensions
in the graph format, envelopes and their hash, planning at the envelope's
maximum in the core and the reference (E0), and PlanSession's replan policies,
trace records and cache."""

import copy
import hashlib
import random

import cbor2
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

import emel.memory as mm
import graphgen
from emel.memory import reference, shapes
from emel.memory.shapes import DynamicPlanner, ShapeEnvelope
from invariants import plan_diff

SEQ = {"sym": "seq", "min": 1, "max": 4096}


def dyn_doc(seq=SEQ):
    """x[seq, 512] @ w -> h[seq, 512] -(view)-> hv[seq, 8, 64] -> y[seq, 512]."""
    return {
        "format": "emel.graph/1", "name": "dyn",
        "tensors": [
            {"id": "w", "shape": [512, 512], "dtype": "float32", "role": "parameter"},
            {"id": "x", "shape": [dict(seq), 512], "dtype": "float32", "role": "input"},
            {"id": "h", "shape": [dict(seq), 512], "dtype": "float32", "role": "activation"},
            {"id": "hv", "shape": [dict(seq), 8, 64], "dtype": "float32", "role": "activation",
             "view_of": {"base": "h", "byte_offset": 0}},
            {"id": "y", "shape": [dict(seq), 512], "dtype": "float32", "role": "output"},
        ],
        "nodes": [
            {"id": "mm", "op": "mm", "inputs": ["x", "w"], "outputs": ["h"]},
            {"id": "view", "op": "view", "inputs": ["h"], "outputs": ["hv"]},
            {"id": "relu", "op": "relu", "inputs": ["hv"], "outputs": ["y"]},
        ],
        "safepoints": ["relu"],
    }


def concrete_doc(seq):
    """dyn_doc with every symbolic dimension written as `seq`."""
    doc = dyn_doc()
    for t in doc["tensors"]:
        t["shape"] = [seq if isinstance(d, dict) else d for d in t["shape"]]
    del doc["safepoints"]
    return doc


def tensor(doc, tid):
    return next(t for t in doc["tensors"] if t["id"] == tid)


def expect(doc, code, tensor_id=None):
    """load_graph, the core and the reference refuse doc with `code` naming `tensor_id`."""
    for planner in (mm.load_graph, mm.plan, reference.plan):
        with pytest.raises(mm.PlanError) as info:
            planner(copy.deepcopy(doc))
        assert info.value.code == code, str(info.value)
        assert info.value.tensor == tensor_id, str(info.value)
    return info.value


# ---------------------------------------------------------------------------
# the format
# ---------------------------------------------------------------------------
def test_symbolic_graph_plans_at_the_envelope_maximum():
    core = mm.plan(dyn_doc(), strategy="tmmu").to_dict()
    ref = reference.plan(dyn_doc())
    assert core == ref, plan_diff(core, ref)
    whole = mm.plan(concrete_doc(4096), strategy="tmmu").to_dict()
    assert core == whole, plan_diff(core, whole)
    assert core["tensors"]["h"]["size"] == 4096 * 512 * 4


def test_load_graph_keeps_symbols_and_knows_its_envelope():
    g = mm.load_graph(dyn_doc())
    assert g.shape_envelope == {"seq": (1, 4096)}
    assert g.safepoints == ["relu"]
    assert g.to_dict()["tensors"][1]["shape"] == [SEQ, 512]
    assert mm.load_graph(g.to_dict()).to_dict() == g.to_dict()
    assert mm.load_graph(concrete_doc(8)).shape_envelope == {}
    # min defaults to 0; a null counts as absent
    doc = dyn_doc({"sym": "seq", "max": 64, "min": None})
    assert mm.load_graph(doc).shape_envelope == {"seq": (0, 64)}


def test_graph_builder_takes_symbolic_dims():
    g = mm.Graph(name="built")
    g.tensor("x", [{"sym": "b", "max": 8}, 16], role="input")
    g.tensor("y", [{"sym": "b", "max": 8}, 16], role="output")
    g.node("copy", "copy", ["x"], ["y"])
    assert g.shape_envelope == {"b": (0, 8)}
    assert mm.plan(g, strategy="tmmu").tensors["y"].size == 8 * 16 * 4
    with pytest.raises(mm.PlanError) as info:
        g.tensor("z", [{"sym": "b", "max": 9}], role="input")
    assert (info.value.code, info.value.tensor) == ("INVALID_IR_SHAPES", "z")
    with pytest.raises(mm.PlanError) as info:
        g.tensor("q", [{"sym": "b", "max": 8}], "q4_0", role="input", nbytes=18)
    assert (info.value.code, info.value.tensor) == ("INVALID_IR_SHAPES", "q")
    g.tensors[1]["shape"][0]["max"] = 9                 # edited by hand: caught when planned
    with pytest.raises(mm.PlanError) as info:
        mm.plan(g, strategy="tmmu")
    assert (info.value.code, info.value.tensor) == ("INVALID_IR_SHAPES", "y")


@pytest.mark.parametrize("dim, code, words", [
    ({"max": 4}, "INVALID_IR_SHAPES", "'sym'"),
    ({"sym": "", "max": 4}, "INVALID_IR_SHAPES", "'sym'"),
    ({"sym": 3, "max": 4}, "INVALID_IR_SHAPES", "'sym'"),
    ({"sym": "seq"}, "INVALID_IR_SHAPES", "no 'max'"),
    ({"sym": "seq", "max": -1}, "INVALID_IR_SHAPES", "integer >= 0"),
    ({"sym": "seq", "max": True}, "INVALID_IR_SHAPES", "integer >= 0"),
    ({"sym": "seq", "max": 4.0}, "INVALID_IR_SHAPES", "integer >= 0"),
    ({"sym": "seq", "max": 2**64}, "ALLOCATION_OVERFLOW", "64 bits"),
    ({"sym": "seq", "max": 4, "min": 5}, "INVALID_IR_SHAPES", "min 5 > max 4"),
    ({"sym": "seq", "max": 4, "min": -1}, "INVALID_IR_SHAPES", "integer >= 0"),
    ({"sym": "seq", "max": 4, "step": 2}, "INVALID_IR_SHAPES", "unknown key 'step'"),
])
def test_malformed_symbolic_dims_name_the_tensor(dim, code, words):
    doc = concrete_doc(4)
    tensor(doc, "h")["shape"] = [dim, 512]
    err = expect(doc, code, "h")
    assert words in err.message


def test_a_symbol_has_one_envelope():
    doc = dyn_doc()
    tensor(doc, "y")["shape"][0] = {"sym": "seq", "min": 1, "max": 2048}
    err = expect(doc, "INVALID_IR_SHAPES", "y")       # the second declaration is named
    assert "[1, 2048] here but [1, 4096] at tensor 'x'" in err.message


def test_a_symbolic_tensor_may_not_state_nbytes():
    doc = dyn_doc()
    tensor(doc, "hv")["nbytes"] = 4096 * 512 * 4
    expect(doc, "INVALID_IR_SHAPES", "hv")


def test_symbolic_errors_come_first():
    """The core path and the reference check symbolic dims before the rest of
    the document, so a document with two defects gets one answer."""
    doc = dyn_doc()
    doc["tensors"][0]["dtype"] = ""                     # a phase A defect at tensor 'w'
    tensor(doc, "y")["shape"][0] = {"sym": "seq", "max": 1}
    expect(doc, "INVALID_IR_SHAPES", "y")


# ---------------------------------------------------------------------------
# envelopes
# ---------------------------------------------------------------------------
def test_envelope_hash_is_sha256_of_the_documented_cbor():
    env = ShapeEnvelope({"seq": (1, 4096), "batch": (0, 8)})
    assert list(env) == ["batch", "seq"]
    structure = ["emel.shape_envelope/1", [["batch", 0, 8], ["seq", 1, 4096]]]
    assert env.canonical() == structure
    assert env.hash == hashlib.sha256(cbor2.dumps(structure, canonical=True)).hexdigest()
    assert env.hash == ShapeEnvelope({"batch": (0, 8), "seq": (1, 4096)}).hash
    assert env.hash != ShapeEnvelope({"seq": (1, 4097), "batch": (0, 8)}).hash
    assert env.hash != ShapeEnvelope({"seq": (0, 4096), "batch": (0, 8)}).hash
    assert ShapeEnvelope().hash == hashlib.sha256(
        cbor2.dumps(["emel.shape_envelope/1", []], canonical=True)).hexdigest()


def test_envelope_widening():
    env = ShapeEnvelope({"seq": (16, 4096), "batch": (1, 8)})
    assert env.widened({"seq": 5000}) == {"seq": (16, 5000), "batch": (1, 8)}
    assert env.widened({"seq": 5000}, growth="pow2") == {"seq": (16, 8192), "batch": (1, 8)}
    assert env.widened({"seq": 3, "batch": 9}) == {"seq": (3, 4096), "batch": (1, 9)}
    assert env.widened({"seq": 100}) == env
    assert env.violations({"seq": 4097, "batch": 0}) == [("batch", 0, 1, 8), ("seq", 4097, 16, 4096)]
    assert env.contains({"seq": 16, "batch": 8})


def test_resolve_is_pure():
    doc = dyn_doc()
    assert shapes.resolve(doc)["tensors"][1]["shape"] == [4096, 512]
    assert shapes.resolve(doc, ShapeEnvelope({"seq": (1, 10)}))["tensors"][1]["shape"] == [10, 512]
    assert doc == dyn_doc()
    flat = concrete_doc(3)
    assert shapes.resolve(flat) is flat
    with pytest.raises(mm.PlanError):
        shapes.resolve(doc, ShapeEnvelope({"other": (0, 1)}))


# ---------------------------------------------------------------------------
# E0 on random graphs with symbolic dims
# ---------------------------------------------------------------------------
@st.composite
def symbolic_graphs(draw):
    """A generated graph (tests/graphgen.py, unchanged) where some concrete
    dimensions of tensors without nbytes become symbols whose maximum is the
    dimension: one symbol per distinct value, so declarations agree."""
    doc = draw(graphgen.graphs(max_nodes=40))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    symbolic = copy.deepcopy(doc)
    for t in symbolic["tensors"]:
        if t.get("nbytes") is None and rng.random() < 0.5:
            t["shape"] = [{"sym": f"d{d}", "max": d, "min": d // 2} if rng.random() < 0.5 else d
                          for d in t["shape"]]
    return doc, symbolic


@given(symbolic_graphs(), graphgen.plan_kwargs())
def test_core_equals_reference_on_symbolic_graphs(docs, kwargs):
    doc, symbolic = docs
    note(f"kwargs={kwargs}")
    core = mm.plan(copy.deepcopy(symbolic), **{"strategy": "tmmu", **kwargs}).to_dict()
    ref = reference.plan(copy.deepcopy(symbolic), **kwargs)
    assert core == ref, plan_diff(core, ref)
    plain = mm.plan(copy.deepcopy(doc), **{"strategy": "tmmu", **kwargs}).to_dict()     # the maximum is the original
    assert core == plain, plan_diff(core, plain)
    expected = {d["sym"]: (d["min"], d["max"]) for t in symbolic["tensors"] for d in t["shape"]
                if isinstance(d, dict)}
    assert mm.load_graph(symbolic).shape_envelope == expected


# ---------------------------------------------------------------------------
# sessions
# ---------------------------------------------------------------------------
def test_inside_the_envelope_the_plan_stays():
    for policy in shapes.REPLAN_POLICIES:
        session = shapes.session(dyn_doc(), replan_policy=policy)
        base = session.plan
        assert session.check({"seq": 1}) is base
        assert session.check({"seq": 4096}, node="mm") is base
        assert session.check({}) is base
        assert session.trace == []


def test_abort_raises_outside_the_envelope():
    session = shapes.session(dyn_doc(), replan_policy="ABORT")
    for value in (4097, 0):
        with pytest.raises(mm.PlanError) as info:
            session.check({"seq": value}, node="relu")       # a safepoint changes nothing
        err = info.value
        assert (err.code, err.tensor, err.node) == ("SHAPE_ENVELOPE_EXCEEDED", "x", "relu")
        assert f"'seq' = {value} is outside its envelope [1, 4096]" in err.message
    assert "SHAPE_ENVELOPE_EXCEEDED" in mm.FAILURE_CODES
    assert session.trace == []


def test_replan_only_at_a_safepoint():
    session = shapes.session(dyn_doc(), replan_policy="REPLAN_AT_SAFEPOINT")
    for node in ("mm", None):
        with pytest.raises(mm.PlanError) as info:
            session.check({"seq": 5000}, node=node)
        assert (info.value.code, info.value.tensor, info.value.node) == (
            "SHAPE_ENVELOPE_EXCEEDED", "x", node)
        assert "safepoints: 'relu'" in info.value.message
    assert session.trace == [] and session.envelope == {"seq": (1, 4096)}


def test_replan_at_a_safepoint_records_old_and_new_hashes():
    planner = DynamicPlanner(dyn_doc(), replan_policy="REPLAN_AT_SAFEPOINT", strategy="tmmu")
    session = planner.session()
    old = session.plan
    new = session.check({"seq": 5000}, node="relu")
    assert new.to_dict() == mm.plan(concrete_doc(5000), strategy="tmmu").to_dict()
    assert session.envelope == {"seq": (1, 5000)}
    key = [ShapeEnvelope({"seq": (1, 5000)}).hash, "inference", planner.arena_config_hash]
    assert session.trace == [{
        "record": "replan", "node": "relu",
        "old_plan_hash": old.plan_hash, "new_plan_hash": new.plan_hash,
        "replan_key": key, "shape_envelope": {"seq": {"min": 1, "max": 5000}},
        "cache_hit": False}]
    assert old.plan_hash != new.plan_hash
    # inside the widened envelope now: no new record
    assert session.check({"seq": 4500}, node="relu") is new
    assert len(session.trace) == 1 and (planner.hits, planner.misses) == (0, 1)
    # a second replan starts from the first one's plan
    newer = session.check({"seq": 6000}, node="relu")
    assert session.trace[1]["old_plan_hash"] == new.plan_hash
    assert session.trace[1]["new_plan_hash"] == newer.plan_hash
    assert session.trace[1]["shape_envelope"] == {"seq": {"min": 1, "max": 6000}}


def test_repeated_shapes_hit_the_cache():
    planner = DynamicPlanner(dyn_doc(), replan_policy="REPLAN_AT_SAFEPOINT", strategy="tmmu")
    first = planner.session()
    plan = first.check({"seq": 5000}, node="relu")
    second = planner.session()                         # a new run starts at the declared envelope
    assert second.plan is planner.base_plan
    assert second.check_shapes({"x": [5000, 512]}, node="relu") is plan
    assert second.trace[0]["cache_hit"] is True
    assert second.trace[0]["replan_key"] == first.trace[0]["replan_key"]
    assert (planner.hits, planner.misses) == (1, 1)
    assert len(planner.cache) == 2                     # the declared envelope's and 5000's


def test_pow2_growth_buckets_sizes():
    planner = DynamicPlanner(dyn_doc(), replan_policy="REPLAN_AT_SAFEPOINT", growth="pow2")
    plans = [planner.session().check({"seq": n}, node="relu") for n in (5000, 6000, 8192)]
    assert plans[0] is plans[1] is plans[2]
    assert plans[0].tensors["h"].size == 8192 * 512 * 4
    assert (planner.hits, planner.misses) == (2, 1)


def test_session_options_and_errors():
    doc = dyn_doc()
    del doc["safepoints"]
    planner = DynamicPlanner(doc, replan_policy="REPLAN_AT_SAFEPOINT", safepoints=["relu", "mm"])
    assert planner.safepoints == ("mm", "relu")        # node order
    with pytest.raises(mm.PlanError) as info:
        DynamicPlanner(doc, safepoints=["nope"])
    assert (info.value.code, info.value.node) == ("INVALID_IR_SHAPES", "nope")
    with pytest.raises(ValueError):
        DynamicPlanner(doc, replan_policy="RETRY")
    with pytest.raises(ValueError):
        DynamicPlanner(doc, growth="double")
    session = planner.session()
    for bad in ({"len": 3}, {"seq": -1}, {"seq": True}, {"seq": 2.5}, ["seq"]):
        with pytest.raises(mm.PlanError) as info:
            session.check(bad, node="relu")
        assert info.value.code == "INVALID_IR_SHAPES"
    with pytest.raises(mm.PlanError) as info:
        session.check({"seq": 2**64}, node="relu")
    assert info.value.code == "ALLOCATION_OVERFLOW"
    with pytest.raises(mm.PlanError) as info:
        session.check({"seq": 3}, node="nope")
    assert (info.value.code, info.value.node) == ("INVALID_IR_SHAPES", "nope")
    assert session.trace == []


@pytest.mark.parametrize("shapes_in, tensor_id, words", [
    ({"nope": [1, 512]}, "nope", "unknown tensor"),
    ({"x": [1, 512, 1]}, "x", "dimensions"),
    ({"x": [1, 256]}, "x", "fixed at 512"),
    ({"x": [4, 512], "y": [5, 512]}, "y", "'seq' is 5 here but 4 in tensor 'x'"),
    ({"x": [-1, 512]}, "x", "integer >= 0"),
])
def test_runtime_shapes_are_checked(shapes_in, tensor_id, words):
    session = shapes.session(dyn_doc())
    with pytest.raises(mm.PlanError) as info:
        session.check_shapes(shapes_in)
    assert (info.value.code, info.value.tensor) == ("INVALID_IR_SHAPES", tensor_id)
    assert words in info.value.message


def test_a_failed_replan_leaves_the_session_as_it_was():
    cap = {"activations": {"capacity_bytes": 2 * 4096 * 512 * 4}}  # x and h, then h and y
    session = shapes.session(dyn_doc(), replan_policy="REPLAN_AT_SAFEPOINT", arenas=cap)
    base = session.plan
    with pytest.raises(mm.PlanError) as info:
        session.check({"seq": 5000}, node="relu")
    assert (info.value.code, info.value.arena) == ("ARENA_TOO_SMALL", "activations")
    assert session.plan is base and session.trace == [] and session.envelope == {"seq": (1, 4096)}


def test_sessions_plan_sharded_graphs():
    planner = DynamicPlanner(dyn_doc(), replan_policy="REPLAN_AT_SAFEPOINT",
                             rank=1, world_size=2, shard_spec={"w": 1, "h": 1}, strategy="tmmu")
    assert planner.base_plan.tensors["h"].size == 4096 * 256 * 4
    assert planner.base_plan.tensors["hv"].size == 4096 * 256 * 4   # the view follows h
    plan = planner.session().check({"seq": 5000}, node="relu")
    assert plan.tensors["h"].size == 5000 * 256 * 4
    assert plan.to_dict() == reference.plan(dyn_doc({"sym": "seq", "max": 5000}), rank=1,
                                            world_size=2, shard_spec={"w": 1, "h": 1})
