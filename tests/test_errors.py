"""Bad input through the C++ core: every failure code, the id it names, and no crash."""

import copy
import json

import pytest

import emel.memory as mm
from emel.memory import reference


def base_doc():
    """x -> a -> b -> y, with a parameter and a view."""
    return {
        "format": "emel.graph/1",
        "name": "small",
        "tensors": [
            {"id": "x", "shape": [4, 4], "dtype": "float32", "role": "input"},
            {"id": "w", "shape": [4, 4], "dtype": "float32", "role": "parameter"},
            {"id": "a", "shape": [4, 4], "dtype": "float32", "role": "activation"},
            {"id": "av", "shape": [16], "dtype": "float32", "role": "activation",
             "view_of": {"base": "a", "byte_offset": 0}},
            {"id": "b", "shape": [4, 4], "dtype": "float32", "role": "activation",
             "can_inplace": True},
            {"id": "y", "shape": [4, 4], "dtype": "float32", "role": "output"},
        ],
        "nodes": [
            {"id": "mm", "op": "matmul", "inputs": ["x", "w"], "outputs": ["a"]},
            {"id": "flat", "op": "view", "inputs": ["a"], "outputs": ["av"]},
            {"id": "relu", "op": "relu", "inputs": ["av"], "outputs": ["b"]},
            {"id": "out", "op": "add", "inputs": ["b", "x"], "outputs": ["y"]},
        ],
    }


def tensor(doc, tid):
    return next(t for t in doc["tensors"] if t["id"] == tid)


def node(doc, nid):
    return next(n for n in doc["nodes"] if n["id"] == nid)


def expect(doc, code, tensor_id=None, node_id=None, **kwargs):
    """Both the core and the reference refuse doc with `code`, naming the ids."""
    for planner in (lambda d: mm.plan(d, **{"strategy": "tmmu", **kwargs}), lambda d: reference.plan(d, **kwargs)):
        with pytest.raises(mm.PlanError) as info:
            planner(copy.deepcopy(doc))
        err = info.value
        assert err.code == code, str(err)
        if tensor_id is not None:
            assert err.tensor == tensor_id, str(err)
        if node_id is not None:
            assert err.node == node_id, str(err)
        assert str(err).startswith(f"[{code}]")
    return err


def test_base_doc_is_valid():
    plan = mm.plan(base_doc(), strategy="tmmu")
    assert plan.tensors["av"].view_of == "a"
    assert plan.to_dict() == reference.plan(base_doc())


# -- INVALID_IR_SHAPES -------------------------------------------------------------

def test_unknown_input_names_tensor_and_node():
    doc = base_doc()
    node(doc, "out")["inputs"].append("ghost")
    err = expect(doc, "INVALID_IR_SHAPES", "ghost", "out")
    assert "ghost" in err.message and "out" in err.message


def test_unknown_output():
    doc = base_doc()
    node(doc, "mm")["outputs"].append("nowhere")
    expect(doc, "INVALID_IR_SHAPES", "nowhere", "mm")


def test_duplicate_tensor_id():
    doc = base_doc()
    doc["tensors"].append(dict(tensor(doc, "a")))
    expect(doc, "INVALID_IR_SHAPES", "a")


def test_duplicate_node_id():
    doc = base_doc()
    doc["nodes"].append({"id": "relu", "op": "relu", "inputs": ["y"], "outputs": []})
    expect(doc, "INVALID_IR_SHAPES", node_id="relu")


def test_tensor_produced_twice():
    doc = base_doc()
    node(doc, "out")["outputs"].append("a")
    expect(doc, "INVALID_IR_SHAPES", "a", "out")


@pytest.mark.parametrize("dim", [-1, 1.5, True, "4", None])
def test_bad_dimension(dim):
    doc = base_doc()
    tensor(doc, "b")["shape"] = [4, dim]
    expect(doc, "INVALID_IR_SHAPES", "b")


def test_unknown_dtype_needs_nbytes():
    doc = base_doc()
    tensor(doc, "b")["dtype"] = "q4_0"
    expect(doc, "INVALID_IR_SHAPES", "b")
    tensor(doc, "b")["nbytes"] = 64
    assert mm.plan(doc, strategy="tmmu").tensors["b"].size == 64


def test_nbytes_disagrees_with_shape():
    doc = base_doc()
    tensor(doc, "b")["nbytes"] = 63
    expect(doc, "INVALID_IR_SHAPES", "b")


def test_view_outside_base():
    doc = base_doc()
    tensor(doc, "av")["view_of"]["byte_offset"] = 4
    err = expect(doc, "INVALID_IR_SHAPES", "av")
    assert "64" in err.message  # says how large the base is


def test_view_of_view_outside_its_base():
    doc = base_doc()
    doc["tensors"].append({"id": "avv", "shape": [8], "dtype": "float32", "role": "activation",
                           "view_of": {"base": "av", "byte_offset": 40}})
    expect(doc, "INVALID_IR_SHAPES", "avv")


def test_view_cycle():
    doc = base_doc()
    doc["tensors"].append({"id": "p", "shape": [1], "dtype": "float32", "role": "activation",
                           "view_of": {"base": "q"}})
    doc["tensors"].append({"id": "q", "shape": [1], "dtype": "float32", "role": "activation",
                           "view_of": {"base": "p"}})
    expect(doc, "INVALID_IR_SHAPES", "p")


def test_view_of_unknown_base():
    doc = base_doc()
    tensor(doc, "av")["view_of"]["base"] = "nope"
    expect(doc, "INVALID_IR_SHAPES", "av")


def test_execution_order_problems():
    doc = base_doc()
    doc["execution_order"] = ["mm", "flat", "relu"]
    expect(doc, "INVALID_IR_SHAPES", node_id="out")
    doc["execution_order"] = ["mm", "flat", "relu", "out", "mm"]
    expect(doc, "INVALID_IR_SHAPES", node_id="mm")
    doc["execution_order"] = ["mm", "flat", "relu", "zap"]
    expect(doc, "INVALID_IR_SHAPES", node_id="zap")


@pytest.mark.parametrize("bad", [
    [], {"format": "emel.graph/2", "tensors": [], "nodes": []},
    {"format": "emel.graph/1", "tensors": {}, "nodes": []},
    {"format": "emel.graph/1", "tensors": [42], "nodes": []},
    {"format": "emel.graph/1", "tensors": [{"id": 7, "shape": [], "dtype": "bool", "role": "input"}],
     "nodes": []},
    {"format": "emel.graph/1", "tensors": [{"id": "t", "shape": [], "dtype": "bool", "role": "weird"}],
     "nodes": []},
    {"format": "emel.graph/1", "tensors": [], "nodes": [{"id": "n", "op": "x", "inputs": "abc"}]},
])
def test_wrong_document_types(bad):
    for reader in (mm.Graph.from_dict, reference.plan):
        with pytest.raises(mm.PlanError) as info:
            reader(bad)
        assert info.value.code == "INVALID_IR_SHAPES"


@pytest.mark.parametrize("text", ["{", '{"format": "emel.graph/1", "tensors": [,]}', "{" * 100000])
def test_malformed_json_text(text, tmp_path):
    with pytest.raises(mm.PlanError) as info:
        mm.load_graph(text)
    assert info.value.code == "INVALID_IR_SHAPES"
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(mm.PlanError) as info:
        mm.plan(str(path), strategy="tmmu")
    assert info.value.code == "INVALID_IR_SHAPES"
    assert "JSON" in info.value.message or "deeply" in info.value.message


# -- LIVENESS_CYCLE ------------------------------------------------------------------

def test_real_cycle():
    doc = base_doc()
    node(doc, "mm")["inputs"].append("b")  # mm reads b, which needs a, which mm makes
    err = expect(doc, "LIVENESS_CYCLE", "b", "mm")
    assert "cycle" in err.message


def test_order_reads_before_producer():
    doc = base_doc()
    doc["execution_order"] = ["mm", "relu", "flat", "out"]
    err = expect(doc, "LIVENESS_CYCLE", "av", "relu")
    assert "topological" in err.message and "no cycle" in err.message or "acyclic" in err.message


def test_node_reads_its_own_output():
    doc = base_doc()
    node(doc, "relu")["inputs"].append("b")
    expect(doc, "LIVENESS_CYCLE", "b", "relu")


# -- ALLOCATION_OVERFLOW -------------------------------------------------------------

@pytest.mark.parametrize("shape", [[2**62, 2**62], [2**63, 2], [2**64], [2**100, 0]])
def test_size_overflow(shape):
    doc = base_doc()
    tensor(doc, "b")["shape"] = shape
    expect(doc, "ALLOCATION_OVERFLOW", "b")


def test_huge_dimension_times_zero_is_not_an_overflow():
    doc = base_doc()
    tensor(doc, "b")["shape"] = [2**63, 0]
    assert mm.plan(doc, strategy="tmmu").tensors["b"].size == 0


def test_arena_offset_overflow():
    doc = base_doc()
    for tid in ("w", "x"):
        tensor(doc, tid)["dtype"] = "u8blob"
    tensor(doc, "w")["nbytes"] = 2**64 - 64
    tensor(doc, "x")["nbytes"] = 2**63
    tensor(doc, "x")["role"] = "parameter"
    expect(doc, "ALLOCATION_OVERFLOW")


def test_rounding_up_overflows():
    doc = base_doc()
    tensor(doc, "w")["dtype"] = "blob"
    tensor(doc, "w")["nbytes"] = 2**64 - 1
    expect(doc, "ALLOCATION_OVERFLOW", "w")


# -- ALIGNMENT_VIOLATION -------------------------------------------------------------

@pytest.mark.parametrize("align", [0, 3, 96, -8])
def test_tensor_alignment_not_power_of_two(align):
    doc = base_doc()
    tensor(doc, "b")["alignment"] = align
    expect(doc, "ALIGNMENT_VIOLATION", "b")


def test_arena_alignment_not_power_of_two():
    for planner in (mm.plan, reference.plan):
        with pytest.raises(mm.PlanError) as info:
            planner(base_doc(), arenas={"activations": {"alignment_bytes": 96}})
        assert info.value.code == "ALIGNMENT_VIOLATION"
        assert info.value.arena == "activations"
        with pytest.raises(mm.PlanError) as info:
            planner(base_doc(), alignment=48)
        assert info.value.code == "ALIGNMENT_VIOLATION"


def test_view_misaligned_for_its_own_alignment():
    doc = base_doc()
    tensor(doc, "av").update(shape=[8], alignment=16)
    tensor(doc, "av")["view_of"]["byte_offset"] = 8
    expect(doc, "ALIGNMENT_VIOLATION", "av")


# -- ARENA_TOO_SMALL -----------------------------------------------------------------

def test_arena_too_small_names_arena():
    plan = mm.plan(base_doc(), strategy="tmmu")
    need = plan.arenas["activations"].size
    assert mm.plan(base_doc(), strategy="tmmu", arenas={"activations": {"capacity_bytes": need}}).arenas[
        "activations"].capacity_bytes == need
    for planner in (mm.plan, reference.plan):
        with pytest.raises(mm.PlanError) as info:
            planner(base_doc(), arenas={"activations": {"capacity_bytes": need - 1}})
        assert info.value.code == "ARENA_TOO_SMALL"
        assert info.value.arena == "activations"
        assert str(need) in info.value.message


# -- ADDRESS_COLLISION: reachable only by corrupting a plan ----------------------------

def test_corrupted_plan_is_caught():
    plan = mm.plan(base_doc(), strategy="tmmu")
    plan.verify()  # the real plan passes
    ids = plan.tensor_ids
    # x (born 0, read at step 3) and b (born 2) are live together: put b on x.
    plan.offsets[ids.index("b")] = plan.offsets[ids.index("x")]
    with pytest.raises(mm.PlanError) as info:
        plan.verify()
    assert info.value.code == "ADDRESS_COLLISION"
    assert info.value.tensor in {"b", "x"}
    assert "'b'" in info.value.message and "'x'" in info.value.message


def test_corrupted_view_is_caught():
    plan = mm.plan(base_doc(), strategy="tmmu")
    plan.offsets[plan.tensor_ids.index("av")] += 128
    with pytest.raises(mm.PlanError) as info:
        plan.verify()
    assert info.value.code == "ADDRESS_COLLISION" and info.value.tensor == "av"


def test_corrupted_offset_misaligned_and_past_the_end():
    plan = mm.plan(base_doc(), strategy="tmmu")
    i = plan.tensor_ids.index("y")
    plan.offsets[i] += 4
    with pytest.raises(mm.PlanError) as info:
        plan.verify()
    assert info.value.code == "ALIGNMENT_VIOLATION" and info.value.tensor == "y"
    plan.offsets[i] = plan.arenas["activations"].size
    with pytest.raises(mm.PlanError) as info:
        plan.verify()
    assert info.value.code == "ADDRESS_COLLISION" and info.value.tensor == "y"


def test_reference_check_plan_catches_corruption():
    doc = base_doc()
    ref = reference.plan(doc)
    ref["tensors"]["a"]["offset"] = ref["tensors"]["x"]["offset"]
    with pytest.raises(mm.PlanError) as info:
        reference.check_plan(doc, ref)
    assert info.value.code == "ADDRESS_COLLISION"


# -- no crash on deep or huge input -------------------------------------------------

def test_million_deep_view_chain():
    n = 1_000_000
    tensors = [{"id": "base", "shape": [8], "dtype": "float32", "role": "input"}]
    tensors += [{"id": f"v{i}", "shape": [8], "dtype": "float32", "role": "activation",
                 "view_of": {"base": "base" if i == 0 else f"v{i - 1}", "byte_offset": 0}}
                for i in range(n)]
    doc = {"format": "emel.graph/1", "tensors": tensors,
           "nodes": [{"id": "use", "op": "sum", "inputs": [f"v{n - 1}"], "outputs": []}]}
    plan = mm.plan(doc, strategy="tmmu")
    last = plan.tensors[f"v{n - 1}"]
    assert last.view_of == "base" and last.offset == plan.tensors["base"].offset
    assert plan.tensors["base"].death == 0


def test_deep_node_chain_in_place():
    n = 200_000
    doc = {"format": "emel.graph/1",
           "tensors": [{"id": f"t{i}", "shape": [3], "dtype": "float32", "role": "activation",
                        "can_inplace": True} for i in range(n + 1)],
           "nodes": [{"id": f"n{i}", "op": "relu", "inputs": [f"t{i}"], "outputs": [f"t{i + 1}"]}
                     for i in range(n)]}
    plan = mm.plan(doc, strategy="tmmu")
    assert plan.arenas["activations"].slots == 1
    assert plan.tensors[f"t{n}"].inplace_of == f"t{n - 1}"
    assert plan.tensors[f"t{n}"].birth == n - 1


def test_error_is_picklable_and_a_value_error():
    import pickle
    err = mm.PlanError("LIVENESS_CYCLE", "msg", tensor="t", node="n")
    again = pickle.loads(pickle.dumps(err))
    assert isinstance(again, ValueError)
    assert (again.code, again.tensor, again.node) == ("LIVENESS_CYCLE", "t", "n")
    with pytest.raises(ValueError):
        mm.PlanError("NOT_A_CODE", "x")


def test_bad_mode_and_strategy_are_value_errors():
    with pytest.raises(ValueError, match="mode"):
        mm.plan(base_doc(), strategy="tmmu", mode="training")
    with pytest.raises(ValueError, match="strategy"):
        mm.plan(base_doc(), strategy="magic")
    with pytest.raises(mm.PlanError) as info:
        mm.plan(base_doc(), strategy="tmmu", arenas={"activations": {"capacity": 5}})
    assert info.value.code == "INVALID_IR_SHAPES"
    json.dumps(mm.plan_json(base_doc(), strategy="tmmu"))  # the JSON path returns plain JSON types


def _pickled(err):
    import pickle
    return pickle.loads(pickle.dumps(err))


def test_pickling_keeps_every_field():
    err = mm.PlanError("ALLOCATION_OVERFLOW", "too big", tensor="t", node="n", arena="activations")
    again = _pickled(err)
    assert type(again) is mm.PlanError
    assert (again.code, again.message, again.tensor, again.node, again.arena) == \
        ("ALLOCATION_OVERFLOW", "too big", "t", "n", "activations")
    assert str(again) == "[ALLOCATION_OVERFLOW] too big" and again.args == err.args
    assert (again.step, again.byte_offset, again.overwritten_by) == (None, None, None)


def test_pickling_keeps_the_engine_fields():
    # the fields verify_execution's clobber report sets (src/bindings/arenas.cpp)
    err = mm.PlanError("ADDRESS_COLLISION", "clobbered", tensor="victim", node="relu",
                       arena="activations")
    err.step, err.byte_offset, err.overwritten_by = 7, 0, "intruder"
    again = _pickled(err)
    assert (again.code, again.tensor, again.node, again.arena, again.step, again.byte_offset,
            again.overwritten_by) == ("ADDRESS_COLLISION", "victim", "relu", "activations", 7, 0,
                                      "intruder")


def test_an_engine_error_from_the_core_pickles():
    from emel.memory import examples
    with pytest.raises(mm.PlanError) as info:
        mm.Arenas(mm.plan(examples.load("resnet18-inference"), strategy="tmmu"), memory_bytes_budget=10)
    again = _pickled(info.value)
    assert (again.code, again.arena, again.message) == ("QUOTA_EXCEEDED", "activations",
                                                        info.value.message)
    assert (again.step, again.byte_offset, again.overwritten_by) == \
        (info.value.step, info.value.byte_offset, info.value.overwritten_by)


def test_a_checkpoint_error_pickles_with_its_reason():
    err = mm.CheckpointError("tampered", "digest mismatch")
    again = _pickled(err)
    assert type(again) is mm.CheckpointError
    assert (again.reason, again.code, again.message, str(again)) == \
        ("tampered", "INVALID_IR_SHAPES", err.message, str(err))
    assert again.message == "checkpoint refused (tampered): digest mismatch"
