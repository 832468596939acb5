"""Checkpoint / restore (docs/determinism.md §7): the identical plan comes
back; tampered bytes, re-digested edits, truncated files and other graphs are
refused with a CheckpointError naming the reason."""

import copy
import hashlib
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

import emel.memory as mm
import graphgen
from emel.memory import cbor, examples

GRAPH = examples.load("llama-tiny-inference")
PLAN = mm.plan(GRAPH, mode="forward", arenas={"activations": {"page_size": 8192}},
               rank=1, world_size=4, shard_spec={"embed_tokens.weight": 1})
DATA = PLAN.checkpoint()


def _refused(data, graph=GRAPH):
    with pytest.raises(mm.CheckpointError) as info:
        mm.restore(data, graph)
    assert info.value.code == "INVALID_IR_SHAPES" and isinstance(info.value, mm.PlanError)
    return info.value


def _redigest(doc):
    """Re-encode an edited checkpoint map with a digest that matches it."""
    body = {k: v for k, v in doc.items() if k != "digest"}
    body["digest"] = hashlib.sha256(cbor.dumps(body)).digest()
    return cbor.dumps(body)


def test_round_trip_gives_the_identical_plan():
    again = mm.restore(DATA, GRAPH)
    assert again.to_dict() == PLAN.to_dict()
    assert again.plan_hash == PLAN.plan_hash and again.replay_token == PLAN.replay_token
    assert (again.rank, again.world_size) == (1, 4)
    assert again.checkpoint() == DATA            # canonical: the same bytes again
    assert mm.restore(DATA, GRAPH.to_json()).plan_hash == PLAN.plan_hash


def test_layout():
    doc = cbor.loads(DATA)
    assert sorted(doc) == ["digest", "format", "options", "plan", "plan_hash"]
    assert doc["format"] == "emel.checkpoint/1"
    assert doc["plan"] == PLAN.to_dict() and doc["plan_hash"] == bytes.fromhex(PLAN.plan_hash)
    assert doc["options"]["arenas"] == {"activations": {"page_size": 8192}}
    assert doc["digest"] == hashlib.sha256(cbor.dumps({k: v for k, v in doc.items()
                                                      if k != "digest"})).digest()


@given(st.integers(0, len(DATA) - 1), st.integers(1, 255))
def test_any_flipped_byte_is_refused(position, flip):
    data = bytearray(DATA)
    data[position] ^= flip
    assert _refused(bytes(data)).reason in ("corrupt", "tampered")


@pytest.mark.parametrize("cut", [0, 1, 100, len(DATA) // 2, len(DATA) - 1])
def test_truncated_is_corrupt(cut):
    err = _refused(DATA[:cut])
    assert err.reason == "corrupt" and "truncated" in str(err)


def test_trailing_bytes_and_wrong_layouts_are_corrupt():
    assert _refused(DATA + b"\x00").reason == "corrupt"
    assert _refused(cbor.dumps({"format": "emel.checkpoint/1"})).reason == "corrupt"
    assert _refused(b"not cbor at all").reason == "corrupt"
    doc = cbor.loads(DATA)
    doc["format"] = "emel.checkpoint/0"
    assert _refused(_redigest(doc)).reason == "corrupt"


@pytest.mark.parametrize("edit", [
    lambda p: p["tensors"]["embed_tokens.weight"].update(offset=4096),
    lambda p: p["tensors"]["embed_tokens.weight"].update(birth=1),
    lambda p: p.update(rank=2),
    lambda p: p["arenas"]["activations"].update(alignment=256),
    lambda p: p["hashes"].update(ir_hash="00" * 32),
], ids=["offset", "lifetime", "rank", "arena-config", "ir_hash"])
def test_edits_with_a_fixed_digest_are_tampered(edit):
    doc = cbor.loads(DATA)
    edit(doc["plan"])
    err = _refused(_redigest(doc))
    assert err.reason == "tampered" and "plan hash" in str(err)


def test_a_consistent_forgery_still_has_to_match_a_fresh_plan():
    # Edit an offset AND recompute every hash: the checkpoint is self-consistent,
    # but planning the graph again does not give it.
    from emel.memory.determinism import plan_hash_of_document
    doc = cbor.loads(DATA)
    plan = doc["plan"]
    plan["tensors"]["embed_tokens.weight"]["offset"] += 128
    plan["hashes"]["plan_hash"] = plan_hash_of_document(plan)
    doc["plan_hash"] = bytes.fromhex(plan["hashes"]["plan_hash"])
    assert _refused(_redigest(doc)).reason == "plan_differs"
    doc = cbor.loads(DATA)
    doc["options"]["mode"] = "inference"     # options disagree with the plan's mode
    assert _refused(_redigest(doc)).reason == "plan_differs"


def test_another_graph_is_refused():
    err = _refused(DATA, examples.load("resnet18-inference"))
    assert err.reason == "other_graph" and PLAN.hashes["ir_hash"] in str(err)
    edited = GRAPH.to_dict()
    edited["tensors"][0]["shape"] = [d + 1 for d in edited["tensors"][0]["shape"]]
    assert _refused(DATA, edited).reason == "other_graph"
    renamed = GRAPH.to_dict()
    renamed["name"] = "same graph, another name"   # not part of the IR
    assert mm.restore(DATA, renamed).plan_hash == PLAN.plan_hash


def test_error_pickles():
    err = _refused(DATA[:10])
    again = pickle.loads(pickle.dumps(err))
    assert isinstance(again, mm.CheckpointError) and again.reason == "corrupt"


@given(graphgen.graph_and_kwargs(max_nodes=10),
       st.sampled_from(["tmmu", "greedy_by_size", "best_fit", "auto"]),
       st.sampled_from([None, "pooled", "separate"]), st.sampled_from(["given", "optimize"]))
def test_restore_any_plan(case, strategy, arena_layout, order):
    # The layout and the order are recorded: a plan made with a layout other than its
    # strategy's default, or in an optimized order, restores from the document it was
    # planned from (both were refused as plan_differs before they were recorded).
    doc, kw = case
    try:
        plan = mm.plan(copy.deepcopy(doc), strategy=strategy, arena_layout=arena_layout, order=order, **kw)
    except mm.PlanError as e:  # phases interleaved in the given order: no order to optimize from
        assert order == "optimize" and "phase-respecting order" in str(e), e
        return
    assert mm.restore(plan.checkpoint(), doc).to_dict() == plan.to_dict()


def test_separate_layout_under_auto_restores():
    graph = examples.load("llama-tiny-training")
    plan = mm.plan(graph, mode="backward", arena_layout="separate")
    assert "gradients" in plan.arenas and plan.options["arena_layout"] == "separate"
    assert mm.restore(plan.checkpoint(), examples.load("llama-tiny-training")).plan_hash == plan.plan_hash


def test_checkpoints_without_layout_and_order_still_restore():
    # Written before arena_layout and order were recorded: the default layout, the given order.
    doc = cbor.loads(DATA)
    for key in ("arena_layout", "order"):
        del doc["options"][key]
    assert mm.restore(_redigest(doc), GRAPH).plan_hash == PLAN.plan_hash
    doc["options"]["order"] = "given"  # one of the two alone is no layout
    assert _refused(_redigest(doc)).reason == "corrupt"
