"""The determinism contract (docs/determinism.md): the input hashes and the
plan hash agree between the C++ core and the reference; the IR hash ignores
what it should (key order, whitespace, list order, defaults, names, ops) and
nothing else; every change to the plan or its inputs changes the plan hash;
the replay token, rank, world size and shard spec are checked and hashed;
a third party recomputes the plan hash from ``plan.to_json()`` with the
script in the docs."""

import copy
import hashlib
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import emel
import emel.memory as mm
import graphgen
from emel.memory.presets import shuffled
from emel.memory import _core, cbor, determinism, examples, reference

# Subprocesses must import the same emel as this process (the installed
# wheel in CI, python/ in a development checkout).
PACKAGE_ROOT = str(Path(emel.__file__).resolve().parents[1])
ROOT = Path(__file__).resolve().parents[1]
HASH_KEYS = ("arena_config_hash", "execution_order_hash", "ir_hash", "plan_hash", "shard_spec_hash")


def docs_recompute_plan_hash():
    """The third-party script of docs/determinism.md §9, executed as written."""
    text = (ROOT / "docs" / "determinism.md").read_text()
    section = text[text.index("## 9."):]
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace = {}
    exec(compile(block, "docs/determinism.md §9", "exec"), namespace)
    return namespace["recompute_plan_hash"]


RECOMPUTE = docs_recompute_plan_hash()


@st.composite
def determinism_kwargs(draw, doc):
    world_size = draw(st.integers(1, 8))
    kw = {"rank": draw(st.integers(0, world_size - 1)), "world_size": world_size}
    if draw(st.booleans()):
        kw["replay_token"] = draw(st.binary(min_size=32, max_size=32))
    # Shardable: storage tensors with a shape and no stated nbytes; the axis
    # is mostly inside the shape (a plan), sometimes not (both refuse alike).
    shaped = [t for t in doc["tensors"] if "view_of" not in t and t.get("shape")
              and t.get("nbytes") is None]
    if shaped and draw(st.booleans()):
        picked = draw(st.lists(st.sampled_from(shaped), max_size=4, unique_by=lambda t: t["id"]))
        kw["shard_spec"] = {t["id"]: draw(st.integers(0, len(t["shape"]) - 1) | st.integers(0, 2**64 - 1))
                            for t in picked}
    return kw


def _graph_and_all_kwargs():
    return graphgen.graph_and_kwargs(max_nodes=10).flatmap(
        lambda gk: st.tuples(st.just(gk[0]), st.just(gk[1]), determinism_kwargs(gk[0])))


@given(_graph_and_all_kwargs())
def test_core_and_reference_hashes_agree(case):
    doc, kw, det = case
    try:
        core = mm.plan(copy.deepcopy(doc), **{"strategy": "tmmu", **kw}, **det)
    except mm.PlanError as e:  # a shard spec that does not fit: the reference agrees
        with pytest.raises(mm.PlanError) as ref_error:
            reference.plan(doc, **kw, **det)
        assert (ref_error.value.code, ref_error.value.tensor) == (e.code, e.tensor)
        return
    ref = reference.plan(doc, **kw, **det)
    d = core.to_dict()
    assert d["hashes"] == ref["hashes"] and sorted(d["hashes"]) == list(HASH_KEYS)
    assert (d["replay_token"], d["rank"], d["world_size"]) == (ref["replay_token"], ref["rank"],
                                                               ref["world_size"])
    assert core.plan_hash == determinism.plan_hash_of_document(ref) == RECOMPUTE(core.to_json())
    assert core.replay_token == det.get("replay_token", determinism.default_replay_token(
        bytes.fromhex(core.hashes["ir_hash"]), core.mode))
    assert core.hashes["shard_spec_hash"] == hashlib.sha256(
        cbor.dumps(det.get("shard_spec", {}))).hexdigest()


@given(graphgen.graphs(max_nodes=10), st.randoms(use_true_random=False))
def test_ir_hash_ignores_order_and_layout(doc, rng):
    base = mm.plan(copy.deepcopy(doc), strategy="tmmu")
    other = shuffled(doc, rng)
    text = json.dumps(other, indent=rng.choice([None, 1, 4]))
    again = mm.plan(text, strategy="tmmu")
    assert again.hashes["ir_hash"] == base.hashes["ir_hash"]
    assert reference.plan(other)["hashes"]["ir_hash"] == base.hashes["ir_hash"]
    # the placement does not depend on the document's order either
    assert again.to_dict()["tensors"] == base.to_dict()["tensors"]
    assert again.plan_hash == base.plan_hash


def _small():
    g = mm.Graph(name="small")
    g.tensor("x", [4, 8], role="input")
    g.tensor("w", [8, 8], role="parameter")
    g.tensor("h", [4, 8], can_inplace=True)
    g.tensor("hv", [16], view_of="h")
    g.tensor("y", [4, 8], role="output")
    g.node("mm", "matmul", ["x", "w"], ["h"])
    g.node("view", "view", ["h"], ["hv"])
    g.node("relu", "relu", ["hv"], ["y"])
    return g.to_dict()


def _ir(doc):
    return mm.plan(doc, strategy="tmmu").hashes["ir_hash"]


@pytest.mark.parametrize("edit", [
    lambda d: d.update(name="renamed", source="elsewhere"),
    lambda d: d["nodes"][0].update(op="gemm"),
    lambda d: d["tensors"][0].update(nbytes=128),           # agrees with shape x float32
    lambda d: d["tensors"][2].update(alignment=1, saved_for_backward=False, can_inplace=True),
    lambda d: d["tensors"][0].update(unknown_key=3),
    lambda d: d.update(execution_order=["mm", "view", "relu"]),   # the order it had anyway
    lambda d: d.update(outputs=["y", "y"]),                   # y is an output by role already... listed
], ids=["name", "op", "nbytes", "defaults", "unknown", "same-order", "outputs-dup"])
def test_ir_hash_unchanged_by(edit):
    doc = _small()
    expected = _ir(doc)
    edit(doc)
    if "outputs" in doc:   # listing outputs is part of the IR; duplicates are not
        expected = _ir(dict(_small(), outputs=["y"]))
    assert _ir(doc) == expected


@pytest.mark.parametrize("edit", [
    lambda d: d["tensors"][0].update(shape=[8, 4]),
    lambda d: d["tensors"][0].update(dtype="int32"),
    lambda d: d["tensors"][2].update(can_inplace=False),
    lambda d: d["tensors"][2].update(saved_for_backward=True),
    lambda d: d["tensors"][2].update(alignment=64),
    lambda d: d["tensors"][2].update(arena="scratch"),
    lambda d: d["tensors"][4].update(role="activation"),
    lambda d: d["tensors"][3]["view_of"].update(byte_offset=4),
    lambda d: d["tensors"][0].update(must_not_alias=["h"]),
    lambda d: d["nodes"][0].update(phase="forward"),
    lambda d: d["nodes"][0].update(inputs=["w", "x"]),
    lambda d: d.update(outputs=["h"]),
], ids=["shape", "dtype", "can_inplace", "saved", "alignment", "arena", "role", "byte_offset",
        "must_not_alias", "phase", "input-order", "outputs"])
def test_ir_hash_changed_by(edit):
    doc = _small()
    before = _ir(doc)
    edit(doc)
    assert _ir(doc) != before
    assert reference.plan(doc)["hashes"]["ir_hash"] == _ir(doc)


def test_ir_hash_entry_point_and_from_arrays():
    np = pytest.importorskip("numpy")
    g = examples.load("llama-tiny-inference")
    assert _core.ir_hash(g._core_input()) == mm.plan(g, strategy="tmmu").hashes["ir_hash"]
    arrays = mm.Graph.from_arrays(np.array([64, 32, 16], dtype=np.uint64),
                                  (np.array([0, 1, 2]), np.array([0, 1])),
                                  (np.array([0, 1, 2]), np.array([1, 2])), outputs=[2])
    core = mm.plan(arrays, strategy="tmmu").to_dict()
    assert core["hashes"] == reference.plan(arrays.to_dict())["hashes"]


@st.composite
def plan_mutations(draw):
    doc = draw(graphgen.graphs(max_nodes=10))
    plan = mm.plan(doc, strategy="tmmu", mode=draw(st.sampled_from(mm.MODES))).to_dict()
    edited = copy.deepcopy(plan)
    tid = draw(st.sampled_from(sorted(edited["tensors"])))
    t = edited["tensors"][tid]
    storage = "view_of" not in t
    name = draw(st.sampled_from(sorted(edited["arenas"])))
    arena = edited["arenas"][name]
    kinds = ["offset", "size", "arena", "mode", "rank", "world_size", "alignment", "page_size",
             "persistent", "capacity", "arena_size", "token", "ir", "order", "shard"]
    if storage:
        kinds += ["slot", "birth", "death", "inplace_of"]
    else:
        kinds += ["view_of"]
    kind = draw(st.sampled_from(kinds))
    bump = draw(st.integers(1, 2**20))
    if kind in ("offset", "size"):
        t[kind] += bump
    elif kind == "arena":
        t["arena"] += "x"
    elif kind == "mode":
        edited["mode"] = draw(st.sampled_from([m for m in mm.MODES if m != plan["mode"]]))
    elif kind == "rank":
        edited["world_size"] = 8
        edited["rank"] = draw(st.integers(1, 7))
    elif kind == "world_size":
        edited["world_size"] += bump
    elif kind == "alignment":
        arena["alignment"] *= 2
    elif kind == "page_size":
        arena["page_size"] += bump
    elif kind == "persistent":
        arena["persistent"] = not arena["persistent"]
    elif kind == "capacity":
        arena["capacity_bytes"] = arena.get("capacity_bytes", 2**40) + bump
    elif kind == "arena_size":
        arena["size"] += bump
    elif kind == "token":
        edited["replay_token"] = draw(st.binary(min_size=32, max_size=32)).hex()
    elif kind in ("ir", "order", "shard"):
        key = {"ir": "ir_hash", "order": "execution_order_hash", "shard": "shard_spec_hash"}[kind]
        edited["hashes"][key] = draw(st.binary(min_size=32, max_size=32)).hex()
    elif kind == "slot":
        t["slot"] = None if t.get("slot") is not None and draw(st.booleans()) else (t.get("slot") or 0) + bump
    elif kind in ("birth", "death"):
        t[kind] += bump
    elif kind == "inplace_of":
        t["inplace_of"] = tid if t.get("inplace_of") != tid else tid + "x"
    elif kind == "view_of":
        t["view_of"] += "x"
    return plan, edited, kind


@given(plan_mutations())
def test_any_change_changes_the_plan_hash(case):
    plan, edited, kind = case
    assert determinism.plan_hash_of_document(plan) == plan["hashes"]["plan_hash"]
    if edited == plan:   # a draw that happened to change nothing (e.g. same token)
        return
    assert determinism.plan_hash_of_document(edited) != plan["hashes"]["plan_hash"], kind
    if kind in ("alignment", "page_size", "persistent", "capacity"):
        with pytest.raises(AssertionError):  # the docs script checks the recorded config hash
            RECOMPUTE(json.dumps(edited))
    else:
        assert RECOMPUTE(json.dumps(edited)) != plan["hashes"]["plan_hash"]


def test_replanning_with_other_inputs_changes_the_hash():
    g = examples.load("llama-tiny-inference")
    base = mm.plan(g, strategy="tmmu")
    variants = [mm.plan(g, strategy="tmmu", mode="forward"), mm.plan(g, strategy="tmmu", rank=1, world_size=2),
                mm.plan(g, strategy="tmmu", world_size=2), mm.plan(g, strategy="tmmu", alignment=64),
                mm.plan(g, strategy="tmmu", arenas={"activations": {"page_size": 8192}}),
                mm.plan(g, strategy="tmmu", shard_spec={"embed_tokens.weight": 0}),
                mm.plan(g, strategy="tmmu", replay_token=bytes(32))]
    hashes = {base.plan_hash} | {v.plan_hash for v in variants}
    assert len(hashes) == len(variants) + 1
    # inputs that do not move tensors leave the placement alone
    for v in variants[1:3] + variants[4:]:
        assert v.to_dict()["tensors"] == base.to_dict()["tensors"]


def test_replay_token_default_and_custom():
    g = examples.load("resnet18-inference")
    p = mm.plan(g, strategy="tmmu", mode="forward")
    ir = bytes.fromhex(p.hashes["ir_hash"])
    assert p.replay_token == hashlib.sha256(cbor.dumps([ir, "forward"])).digest()
    assert len(p.replay_token) == 32
    token = bytes(range(32))
    q = mm.plan(g, strategy="tmmu", mode="forward", replay_token=token)
    assert q.replay_token == token and q.to_dict()["replay_token"] == token.hex()
    assert q.plan_hash != p.plan_hash
    assert mm.plan(g, strategy="tmmu", mode="forward", replay_token=p.replay_token).plan_hash == p.plan_hash
    assert q.to_dict()["tensors"] == p.to_dict()["tensors"]


@pytest.mark.parametrize("kwargs,code,message", [
    ({"replay_token": bytes(31)}, "INVALID_IR_SHAPES", "exactly 32 bytes, got 31"),
    ({"replay_token": bytes(33)}, "INVALID_IR_SHAPES", "exactly 32 bytes, got 33"),
    ({"replay_token": "00" * 32}, "INVALID_IR_SHAPES", "32 bytes or None, got str"),
    ({"world_size": 0}, "INVALID_IR_SHAPES", "world_size must be an integer >= 1"),
    ({"world_size": True}, "INVALID_IR_SHAPES", "world_size"),
    ({"world_size": 2**64}, "ALLOCATION_OVERFLOW", "does not fit in 64 bits"),
    ({"rank": 2, "world_size": 2}, "INVALID_IR_SHAPES", r"rank must be an integer in \[0, world_size\)"),
    ({"rank": -1}, "INVALID_IR_SHAPES", "rank"),
    ({"shard_spec": {"x": -1}}, "INVALID_IR_SHAPES", "shard_spec\\['x'\\]"),
    ({"shard_spec": {"x": 2**64}}, "ALLOCATION_OVERFLOW", "shard_spec"),
    ({"shard_spec": {"": 0}}, "INVALID_IR_SHAPES", "shard_spec keys"),
    ({"shard_spec": [("x", 0)]}, "INVALID_IR_SHAPES", "shard_spec must map"),
])
def test_bad_determinism_arguments(kwargs, code, message):
    doc = _small()
    for planner in (mm.plan, reference.plan):
        with pytest.raises(mm.PlanError, match=message) as info:
            planner(copy.deepcopy(doc), **kwargs)
        assert info.value.code == code
        if "shard_spec" in kwargs and isinstance(kwargs["shard_spec"], dict) and "x" in kwargs["shard_spec"]:
            assert info.value.tensor == "x"


def test_checked_after_the_other_arguments():
    with pytest.raises(mm.PlanError, match="alignment"):
        mm.plan(_small(), strategy="tmmu", alignment=3, replay_token=b"short")
    with pytest.raises(mm.PlanError, match="replay_token"):
        mm.plan({"format": "bad"}, strategy="tmmu", replay_token=b"short")


def test_hashes_are_the_same_in_a_fresh_process():
    code = ("import json, emel.memory as mm; from emel.memory import examples, reference;"
            "g = examples.load('llama-tiny-inference');"
            "print(json.dumps([mm.plan(g, mode='backward', strategy='tmmu').hashes, "
            "reference.plan(g.to_dict(), mode='backward')['hashes']]))")
    env = dict(os.environ, PYTHONHASHSEED=str(random.randrange(1, 2**31)),
               PYTHONPATH=PACKAGE_ROOT)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout
    core, ref = json.loads(out)
    here = mm.plan(examples.load("llama-tiny-inference"), strategy="tmmu", mode="backward").hashes
    assert core == ref == here


@pytest.mark.parametrize("strategy", ["tmmu", "greedy_by_size", "best_fit", "auto"])
def test_docs_script_on_every_strategy(strategy):
    p = mm.plan(examples.load("resnet18-inference"), strategy=strategy, rank=1, world_size=3,
                shard_spec={"x": 0})
    assert RECOMPUTE(p.to_json()) == p.plan_hash == determinism.plan_hash_of_document(p.to_dict())
