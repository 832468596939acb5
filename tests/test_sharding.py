"""Sharding (docs/dynamic-shapes-and-sharding.md): shard_graph, the uneven-split
rule, every refusal with its code and id, plan(rank=, world_size=, shard_spec=)
in the core and the reference (E0), and tensor-parallel Llama graphs planned
rank by rank."""

import copy
import json
import random

import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

import emel.memory as mm
import graphgen
from emel.memory import reference, sharding
from emel.memory.sharding import shard_graph, shard_sizes, tensor_parallel_spec
from invariants import plan_diff

from repo_data import graph_path


def T(tid, shape, dtype="float32", role="activation", **fields):
    t = {"id": tid, "shape": list(shape), "dtype": dtype, "role": role}
    if "base" in fields:
        t["view_of"] = {"base": fields.pop("base"), "byte_offset": fields.pop("byte_offset", 0)}
    t.update(fields)
    return t


def small_doc():
    """x[10,3] @ w[3,10] -> h[10,10]; hv: a full-span view of h; q: a q4_0 weight."""
    return {
        "format": "emel.graph/1", "name": "small",
        "tensors": [
            T("x", [10, 3], role="input"),
            T("w", [3, 10], role="parameter"),
            T("q", [8, 64], "q4_0", role="parameter", nbytes=288),   # 8 rows x 36 bytes
            T("h", [10, 10]),
            T("hv", [100], base="h"),
            T("trim", [10, 9], base="h", byte_offset=4, nbytes=392),  # 4 bytes off each end
            T("y", [10, 10], role="output"),
        ],
        "nodes": [
            {"id": "mm", "op": "mm", "inputs": ["x", "w", "q"], "outputs": ["h"]},
            {"id": "flat", "op": "view", "inputs": ["h"], "outputs": ["hv", "trim"]},
            {"id": "relu", "op": "relu", "inputs": ["hv", "trim"], "outputs": ["y"]},
        ],
    }


def tensor(doc, tid):
    return next(t for t in doc["tensors"] if t["id"] == tid)


def both_plans(doc, **kwargs):
    """The core's and the reference's plan of doc; they must be equal (E0)."""
    core = mm.plan(copy.deepcopy(doc), **{"strategy": "tmmu", **kwargs}).to_dict()
    ref = reference.plan(copy.deepcopy(doc), **kwargs)
    assert core == ref, plan_diff(core, ref)
    return core


def expect(doc, code, tensor_id=None, **kwargs):
    """Both planners refuse doc with `code`, naming `tensor_id`."""
    for planner in (mm.plan, reference.plan):
        with pytest.raises(mm.PlanError) as info:
            planner(copy.deepcopy(doc), **kwargs)
        assert info.value.code == code, str(info.value)
        assert info.value.tensor == tensor_id, str(info.value)
    return info.value


# ---------------------------------------------------------------------------
# the split rule
# ---------------------------------------------------------------------------
def test_shard_sizes_are_numpy_array_split():
    for n in range(0, 40):
        for w in range(1, 9):
            sizes = shard_sizes(n, w)
            assert sizes == [len(part) for part in np.array_split(np.arange(n), w)]
            assert sum(sizes) == n
            starts = [sharding.shard_start(n, r, w) for r in range(w)]
            assert starts == [int(part[0]) if len(part) else starts[r - 1] + sizes[r - 1]
                              for r, part in enumerate(np.array_split(np.arange(n), w))]
            assert [sharding.shard_extent(n, r, w) for r in range(w)] == sizes


def test_uneven_split_sizes_every_rank_exactly():
    doc = small_doc()
    spec = {"x": 0, "h": 0, "q": 0}
    expected_rows = {"x": [3, 3, 2, 2], "h": [3, 3, 2, 2], "q": [2, 2, 2, 2]}
    for rank in range(4):
        out = shard_graph(doc, rank, 4, spec)
        assert tensor(out, "x")["shape"] == [expected_rows["x"][rank], 3]
        assert tensor(out, "h")["shape"] == [expected_rows["h"][rank], 10]
        assert tensor(out, "q") == dict(tensor(doc, "q"), shape=[2, 64], nbytes=72)
        plan = both_plans(doc, rank=rank, world_size=4, shard_spec=spec)
        rows = expected_rows["h"][rank]
        assert plan["tensors"]["x"]["size"] == rows * 3 * 4
        assert plan["tensors"]["h"]["size"] == rows * 40
        assert plan["tensors"]["q"]["size"] == 72
        # the full-span view covers the whole share; the trimmed view keeps its margins
        assert plan["tensors"]["hv"]["size"] == rows * 40
        assert plan["tensors"]["trim"]["size"] == rows * 40 - 8
        assert plan["tensors"]["trim"]["offset"] == plan["tensors"]["h"]["offset"] + 4
        assert plan["tensors"]["w"]["size"] == 120       # not listed: whole
    assert doc == small_doc()                            # the input is not modified


def test_nbytes_scales_exactly_or_is_refused():
    doc = small_doc()
    # q4_0 [8, 64], 288 bytes, split on axis 1 over 3 ranks: 22, 21, 21 columns
    assert tensor(shard_graph(doc, 0, 3, {"q": 1}), "q")["nbytes"] == 288 * 22 // 64  # 99
    err = expect(doc, "INVALID_IR_SHAPES", "q", rank=1, world_size=3, shard_spec={"q": 1})
    assert "does not split exactly" in err.message


def test_zero_size_shards_are_allowed():
    doc = small_doc()
    spec = {"w": 0}                                     # 3 rows over 4 ranks: 1, 1, 1, 0
    sizes = [both_plans(doc, rank=r, world_size=4, shard_spec=spec)["tensors"]["w"]["size"]
             for r in range(4)]
    assert sizes == [40, 40, 40, 0]


def test_world_size_one_is_the_unsharded_plan():
    doc = small_doc()
    whole = both_plans(doc)
    one = both_plans(doc, rank=0, world_size=1, shard_spec={"x": 0, "h": 1, "q": 0})
    # Same placement; only the shard spec's hash (and so the plan hash) differs.
    assert {**one, "hashes": None} == {**whole, "hashes": None}
    assert one["hashes"]["shard_spec_hash"] != whole["hashes"]["shard_spec_hash"]
    assert one["hashes"]["ir_hash"] == whole["hashes"]["ir_hash"]
    assert shard_graph(doc, 0, 1, None) is doc
    assert shard_graph(doc, 0, 3, {}) is doc


def test_a_view_that_does_not_fit_the_share_is_refused():
    doc = small_doc()
    doc["tensors"].append(T("half", [50], base="h", byte_offset=200))   # rows 5..9 of h
    doc["nodes"][2]["inputs"].append("half")
    err = expect(doc, "INVALID_IR_SHAPES", "half", rank=0, world_size=2, shard_spec={"h": 0})
    assert "do not fit" in err.message


def test_a_view_of_a_view_keeps_its_margins():
    doc = small_doc()
    doc["tensors"].append(T("inner", [10, 8], base="trim", byte_offset=4, nbytes=384))
    doc["nodes"][2]["inputs"].append("inner")
    plan = both_plans(doc, rank=1, world_size=2, shard_spec={"h": 0})
    # h: 200 bytes on each rank; trim: offset 4, end margin 4 -> 192; inner: root
    # offset 8, end margin 8 -> 184
    assert plan["tensors"]["trim"]["size"] == 192
    assert plan["tensors"]["inner"]["size"] == 184
    assert plan["tensors"]["inner"]["offset"] == plan["tensors"]["h"]["offset"] + 8


# ---------------------------------------------------------------------------
# refusals: code and id, from the core and the reference
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("spec, tensor_id, words", [
    ({"nope": 0}, "nope", "unknown tensor"),
    ({"hv": 0}, "hv", "is a view"),
    ({"x": 2}, "x", "outside its shape"),
    ({"x": -1}, "x", "integer >= 0"),
    ({"x": True}, "x", "integer >= 0"),
    ({"x": 0.0}, "x", "integer >= 0"),
    ({"x": "0"}, "x", "integer >= 0"),
])
def test_bad_spec_entries_name_the_tensor(spec, tensor_id, words):
    err = expect(small_doc(), "INVALID_IR_SHAPES", tensor_id, rank=0, world_size=2, shard_spec=spec)
    assert words in err.message


def test_a_scalar_has_no_axis():
    doc = small_doc()
    doc["tensors"].append(T("s", [], role="input"))
    doc["nodes"][0]["inputs"].append("s")
    expect(doc, "INVALID_IR_SHAPES", "s", rank=0, world_size=2, shard_spec={"s": 0})


def test_a_symbolic_dimension_cannot_be_sharded_by_shard_graph():
    doc = small_doc()
    tensor(doc, "x")["shape"] = [{"sym": "batch", "max": 10}, 3]
    with pytest.raises(mm.PlanError) as info:
        shard_graph(doc, 0, 2, {"x": 0})
    assert (info.value.code, info.value.tensor) == ("INVALID_IR_SHAPES", "x")
    # plan() resolves the envelope first: the maximum is sharded
    plan = both_plans(doc, rank=0, world_size=2, shard_spec={"x": 0})
    assert plan["tensors"]["x"]["size"] == 5 * 3 * 4


@pytest.mark.parametrize("rank, world_size, words", [
    (0, 0, "world_size"), (0, -1, "world_size"), (0, True, "world_size"), (0, 2.0, "world_size"),
    (-1, 2, "rank"), (2, 2, "rank"), (True, 2, "rank"), (None, 2, "rank"),
])
def test_bad_rank_or_world_size(rank, world_size, words):
    err = expect(small_doc(), "INVALID_IR_SHAPES", None, rank=rank, world_size=world_size)
    assert words in err.message


@pytest.mark.parametrize("spec", [["x"], "x", {1: 0}, {"": 0}])
def test_bad_spec_types(spec):
    expect(small_doc(), "INVALID_IR_SHAPES", None, rank=0, world_size=2, shard_spec=spec)


# ---------------------------------------------------------------------------
# E0 on random sharded graphs
# ---------------------------------------------------------------------------
@st.composite
def sharded_cases(draw):
    """A generated graph, a random shard spec over its storage tensors, a rank."""
    doc = draw(graphgen.graphs(max_nodes=40))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    world_size = rng.randint(1, 5)
    spec = {}
    for t in doc["tensors"]:
        # a stated nbytes rarely splits exactly: list such tensors less often
        chance = 0.05 if t.get("nbytes") is not None else 0.4
        if t.get("view_of") is None and t["shape"] and rng.random() < chance:
            spec[t["id"]] = rng.randrange(len(t["shape"]))
    return doc, rng.randrange(world_size), world_size, spec, draw(graphgen.plan_kwargs())


@given(sharded_cases())
def test_core_equals_reference_on_sharded_graphs(case):
    doc, rank, world_size, spec, kwargs = case
    note(f"rank={rank} world_size={world_size} spec={spec} kwargs={kwargs}")
    outcomes = []
    for planner in (lambda d: mm.plan(d, **{"strategy": "tmmu", **kwargs}, rank=rank, world_size=world_size,
                                      shard_spec=spec).to_dict(),
                    lambda d: reference.plan(d, **kwargs, rank=rank, world_size=world_size,
                                             shard_spec=spec)):
        try:
            outcomes.append(planner(copy.deepcopy(doc)))
        except mm.PlanError as e:
            outcomes.append((e.code, e.tensor, e.node, e.arena))
    assert outcomes[0] == outcomes[1], (plan_diff(*outcomes) if isinstance(outcomes[0], dict)
                                        else outcomes)
    if isinstance(outcomes[0], dict):
        sharded = shard_graph(doc, rank, world_size, spec)
        for t in sharded["tensors"]:
            if t["id"] in spec and t.get("nbytes") is None and t["dtype"] in sharding.ELEMENT_SIZES:
                assert outcomes[0]["tensors"][t["id"]]["size"] == graphgen.tensor_size(t)


# ---------------------------------------------------------------------------
# tensor-parallel Llama
# ---------------------------------------------------------------------------
def _load(name):
    return json.loads(graph_path(name).read_text())


@pytest.mark.parametrize("name, mode", [("llama-tiny-inference", "inference"),
                                        ("llama-tiny-training", "backward")])
@pytest.mark.parametrize("world_size", [2, 4])
def test_tensor_parallel_llama_ranks(name, mode, world_size):
    doc = _load(name)
    spec = tensor_parallel_spec(doc, world_size)
    whole = mm.plan(doc, strategy="tmmu", mode=mode)
    params = {tid: p.size for tid, p in whole.tensors.items()
              if p.view_of is None and p.arena == "parameters"}
    replicated = sum(size for tid, size in params.items() if tid not in spec)
    total = sum(params.values())
    alignment = whole.arenas["parameters"].alignment
    shard_sum = {tid: 0 for tid in spec}
    for rank in range(world_size):
        plan = mm.plan(doc, strategy="tmmu", mode=mode, rank=rank, world_size=world_size, shard_spec=spec)
        assert plan.to_dict() == reference.plan(doc, mode=mode, rank=rank, world_size=world_size,
                                                shard_spec=spec)
        arena = plan.arenas["parameters"].size
        # the sharded parameters are total/w exactly when w divides them (it
        # does here); the replicated ones (norms, RoPE tables) add their bytes
        # minus their 1/w, and every parameter may round up to the alignment
        assert abs(arena - total / world_size) <= replicated + alignment * len(params)
        assert arena < total / world_size * 1.1
        for tid in spec:
            shard_sum[tid] += plan.tensors[tid].size
    # the ranks' shares add up to the whole tensor, byte for byte
    assert shard_sum == {tid: whole.tensors[tid].size for tid in spec}


def test_tensor_parallel_spec_on_llama():
    doc = _load("llama-tiny-inference")
    spec = tensor_parallel_spec(doc, 2)
    for layer in range(4):
        for proj in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                     "mlp.gate_proj", "mlp.up_proj"):
            assert spec[f"layers.{layer}.{proj}.weight"] == 0
        for proj in ("self_attn.o_proj", "mlp.down_proj"):
            assert spec[f"layers.{layer}.{proj}.weight"] == 1
        assert f"layers.{layer}.input_layernorm.weight" not in spec
    assert spec["embed_tokens.weight"] == 0 and spec["lm_head.weight"] == 0
    assert "cos_cached" not in spec and "norm.weight" not in spec
    # activations of layer 0: q's output is split on its features, attention on
    # its last axis; the row-parallel o_proj and the embedding lookup make whole outputs
    assert spec["mm"] == 1 and spec["_softmax"] == 3 and spec["mul_8"] == 2
    assert "mm_3" not in spec and "embedding" not in spec and "add_4" not in spec
    assert all(tensor(doc, tid).get("view_of") is None for tid in spec)
    # patterns, not ids: no pattern, no spec; a tensor may match one kind only
    assert tensor_parallel_spec(doc, 2, column=(), row=(), vocab=()) == {}
    only_q = tensor_parallel_spec(doc, 2, column=("*q_proj.weight",), row=(), vocab=(),
                                  activations=False)
    assert sorted(only_q) == [f"layers.{k}.self_attn.q_proj.weight" for k in range(4)]
    with pytest.raises(mm.PlanError) as info:
        tensor_parallel_spec(doc, 2, column=("lm_head.*",), row=("lm_head.*",))
    assert info.value.tensor == "lm_head.weight"


def test_arguments_are_checked_before_the_document():
    doc = small_doc()
    doc["tensors"][0]["dtype"] = ""                    # a document defect at tensor 'x'
    err = expect(doc, "INVALID_IR_SHAPES", None, rank=5, world_size=2, shard_spec={"x": 0})
    assert "rank" in err.message
    expect(doc, "INVALID_IR_SHAPES", "x", rank=1, world_size=2, shard_spec={"x": 0})


def test_tensor_parallel_spec_takes_graphs_and_refuses_bad_ones():
    doc = small_doc()
    doc["tensors"][1]["id"] = "layer.q_proj.weight"            # w, [3, 10]
    doc["nodes"][0]["inputs"][1] = "layer.q_proj.weight"
    doc["tensors"][0]["shape"] = [{"sym": "batch", "max": 10}, 3]
    spec = tensor_parallel_spec(mm.load_graph(doc), 2)
    # the weight on axis 0 (extent 3). mm reads it: h [10, 10] has no axis of
    # extent 3, so it is split on its last axis of extent >= 2; relu reads h's
    # views: y is split where its extent equals h's split extent (10)
    assert spec == {"layer.q_proj.weight": 0, "h": 1, "y": 1}
    assert tensor_parallel_spec(doc, 2) == spec
    doc["nodes"][0]["inputs"].append("missing")
    with pytest.raises(mm.PlanError) as info:
        tensor_parallel_spec(doc, 2)
    assert (info.value.code, info.value.node) == ("INVALID_IR_SHAPES", "mm")
