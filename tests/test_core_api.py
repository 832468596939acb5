"""The Python API over the C++ core: the spec's test vectors, exact layouts, the builder."""

import json

import numpy as np
import pytest

import emel.memory as mm
from emel.memory import reference


def chain(n, can_inplace, size=(64, 64)):
    g = mm.Graph(name=f"chain{n}")
    g.tensor("t0", size, role="input")
    for i in range(n):
        g.tensor(f"t{i + 1}", size, can_inplace=can_inplace)
        g.node(f"op{i}", "relu", inputs=[f"t{i}"], outputs=[f"t{i + 1}"])
    return g


def same_as_reference(g, **kw):
    plan = mm.plan(g, **{"strategy": "tmmu", **kw})
    assert plan.to_dict() == reference.plan(g.to_dict(), **kw)
    return plan


# -- spec test vectors (VII.B) ---------------------------------------------------------

def test_inplace_chain_uses_one_slot():
    g = chain(12, can_inplace=True)
    g.tensors[0]["role"] = "activation"  # an input-role tensor is never overwritten
    plan = same_as_reference(g)
    assert plan.arenas["activations"].slots == 1
    assert {plan.tensors[f"t{i}"].offset for i in range(13)} == {0}
    assert plan.tensors["t5"].inplace_of == "t4"


def test_inplace_chain_never_overwrites_the_graph_input():
    plan = same_as_reference(chain(12, can_inplace=True))
    assert plan.arenas["activations"].slots == 2
    assert plan.tensors["t1"].inplace_of is None
    assert plan.tensors["t2"].inplace_of == "t1"


def test_ordinary_chain_uses_two_slots():
    plan = same_as_reference(chain(12, can_inplace=False))
    act = plan.arenas["activations"]
    assert act.slots == 2
    assert act.size == 2 * 64 * 64 * 4
    assert [plan.tensors[f"t{i}"].slot for i in range(6)] == [0, 1, 0, 1, 0, 1]


def residual_blocks(blocks):
    """x -> [a = f(x); b = g(a); x' = add(x, b)] * blocks: at most 3 tensors live."""
    g = mm.Graph(name="resnet-ish")
    g.tensor("x0", [1, 64, 8, 8])
    for k in range(blocks):
        x, a, b, y = f"x{k}", f"a{k}", f"b{k}", f"x{k + 1}"
        g.tensor(a, [1, 64, 8, 8])
        g.tensor(b, [1, 64, 8, 8])
        g.tensor(y, [1, 64, 8, 8])
        g.node(f"conv{k}a", "conv2d", [x], [a])
        g.node(f"conv{k}b", "conv2d", [a], [b])
        g.node(f"add{k}", "add", [x, b], [y])
    return g


def test_residual_blocks_colour_optimally():
    plan = same_as_reference(residual_blocks(6))
    act = plan.arenas["activations"]
    # at an add, x, b and the new x are live together; never more
    assert act.slots == 3 == plan.metrics["max_live"]["activations"]
    assert act.size == 3 * 64 * 8 * 8 * 4
    assert act.lower_bound == 3 * 64 * 8 * 8 * 4


def test_exact_offsets_with_alignment_and_odd_sizes():
    g = mm.Graph()
    g.tensor("in", [3], "uint8", role="input")
    g.tensor("big", [1000], "uint8")
    g.tensor("odd", [5], "uint8", alignment=256)
    g.tensor("out", [7], "uint8", role="output")
    g.node("a", "op", ["in"], ["big", "odd"])
    g.node("b", "op", ["big", "odd"], ["out"])
    plan = same_as_reference(g)
    t = plan.tensors
    # all born at step 0, by size descending: big, odd, in -> slots 0, 1, 2
    assert (t["big"].slot, t["odd"].slot, t["in"].slot) == (0, 1, 2)
    assert t["big"].offset == 0              # slot 0: 1000 B rounded to 1024
    assert t["odd"].offset == 1024           # slot 1: 256-aligned, 5 B rounded to 256
    assert t["in"].offset == 1280            # slot 2: 3 B rounded to 128
    assert t["out"].slot == 2 and t["out"].offset == 1280   # in died at step 0
    assert plan.arenas["activations"].size == 1408
    assert plan.arenas["activations"].lower_bound == 1012


def test_views_share_their_root_and_keep_it_alive():
    g = mm.Graph()
    g.tensor("x", [16], role="input")
    g.tensor("a", [16])
    g.tensor("av", [8], view_of="a", byte_offset=32)
    g.tensor("avv", [2], view_of="av", byte_offset=8)
    g.tensor("b", [16])
    g.tensor("c", [16], role="output")
    g.node("n0", "op", ["x"], ["a"])
    g.node("n1", "slice", ["a"], ["av"])
    g.node("n2", "op", ["x"], ["b"])
    g.node("n3", "slice", ["av"], ["avv"])
    g.node("n4", "op", ["avv", "b"], ["c"])
    plan = same_as_reference(g)
    t = plan.tensors
    assert t["av"].view_of == "a" and t["avv"].view_of == "a"
    assert t["avv"].offset == t["a"].offset + 40
    assert t["a"].death == 4               # kept alive by its view's last read
    assert t["av"].slot is None and t["avv"].size == 8


def test_outputs_live_to_the_end_and_params_are_sequential():
    g = mm.Graph()
    g.tensor("x", [4], role="input")
    g.tensor("wb", [3], role="parameter")
    g.tensor("wa", [5], role="parameter")
    g.tensor("h", [4])
    g.tensor("z", [4])
    g.node("n0", "op", ["x", "wa", "wb"], ["h"])
    g.node("n1", "op", ["h"], ["z"])
    g.outputs.append("h")
    plan = same_as_reference(g)
    assert plan.tensors["h"].death == 1
    params = plan.arenas["parameters"]
    assert params.persistent and params.slots == 2
    assert plan.tensors["wa"].offset == 0 and plan.tensors["wb"].offset == 128  # id order
    assert plan.tensors["wa"].birth == 0 and plan.tensors["wb"].death == 1


def saved_graph():
    g = mm.Graph()
    g.tensor("x", [8], role="input")
    g.tensor("h", [8], saved_for_backward=True)
    g.tensor("r", [8], can_inplace=True)
    g.tensor("loss", [1], role="output")
    g.tensor("gh", [8], role="gradient", can_inplace=True)
    g.node("f0", "op", ["x"], ["h"], phase="forward")
    g.node("f1", "relu", ["h"], ["r"], phase="forward")
    g.node("f2", "sum", ["r"], ["loss"], phase="forward")
    g.node("b0", "grad", ["loss", "h"], ["gh"], phase="backward")
    return g


def test_modes_change_deaths_and_inplace():
    g = saved_graph()
    inf = same_as_reference(g, mode="inference")
    fwd = same_as_reference(g, mode="forward")
    bwd = same_as_reference(g, mode="backward")
    assert inf.tensors["h"].death == 3 and bwd.tensors["h"].death == 3
    assert fwd.tensors["h"].death == 3  # saved: to the last step
    # h is read again at b0, so it never dies at f1: no in-place in any mode
    assert inf.tensors["r"].inplace_of is None
    # without the backward read, inference may reuse h in place but training may not
    g.nodes[3]["inputs"] = ["loss"]
    assert mm.plan(g, strategy="tmmu", mode="inference").tensors["r"].inplace_of == "h"
    assert mm.plan(g, strategy="tmmu", mode="backward").tensors["r"].inplace_of is None
    fwd = same_as_reference(g, mode="forward")
    assert fwd.tensors["r"].inplace_of is None and fwd.tensors["h"].death == 3
    assert same_as_reference(g, mode="backward").tensors["h"].death == 1


def test_must_not_alias_forces_distinct_storage():
    g = chain(4, can_inplace=False)
    free = mm.plan(g, strategy="tmmu")
    assert free.tensors["t3"].offset == free.tensors["t1"].offset
    g.tensors[3]["must_not_alias"] = ["t1"]
    plan = same_as_reference(g)
    assert plan.tensors["t3"].offset != plan.tensors["t1"].offset
    assert plan.arenas["activations"].slots == 3


def test_arena_override_and_config():
    g = chain(3, can_inplace=False)
    g.tensors[2]["arena"] = "scratch"
    plan = same_as_reference(g, arenas={"scratch": {"alignment_bytes": 4096, "page_size": 65536},
                                        "gradients": {}}, alignment=64)
    assert plan.tensors["t2"].arena == "scratch"
    assert plan.arenas["scratch"].alignment == 4096 and plan.arenas["scratch"].page_size == 65536
    assert plan.arenas["activations"].alignment == 64
    assert plan.arenas["gradients"].size == 0  # configured, empty


# -- API ------------------------------------------------------------------------------

def test_load_graph_accepts_paths_dicts_and_text(tmp_path):
    g = residual_blocks(2)
    doc = g.to_dict()
    path = tmp_path / "g.json"
    path.write_text(g.to_json(indent=1))
    for source in (doc, str(path), path, json.dumps(doc), g):
        assert mm.load_graph(source).to_dict() == doc
    with pytest.raises(TypeError):
        mm.load_graph(42)


def test_graph_round_trip_keeps_every_field():
    doc = {"format": "emel.graph/1", "name": "rt", "source": "test",
           "tensors": [{"id": "q", "shape": [4096, 32], "dtype": "q4_0", "nbytes": 73728,
                        "role": "parameter", "arena": "weights", "alignment": 64},
                       {"id": "v", "shape": [8], "dtype": "q4_0", "nbytes": 64, "role": "activation",
                        "view_of": {"base": "q", "byte_offset": 128}, "saved_for_backward": True,
                        "must_not_alias": ["q2"], "can_inplace": True},
                       {"id": "q2", "shape": [2], "dtype": "int8", "role": "output"}],
           "nodes": [{"id": "n", "op": "deq", "inputs": ["v"], "outputs": ["q2"], "phase": "forward"}],
           "execution_order": ["n"], "outputs": ["q2"]}
    assert mm.load_graph(doc).to_dict() == doc
    assert json.loads(mm.load_graph(doc).to_json()) == doc


def test_plan_object_views_and_document():
    plan = mm.plan(residual_blocks(2), strategy="tmmu")
    doc = plan.to_dict()
    assert doc["format"] == "emel.plan/1" and doc["strategy"] == "tmmu"
    assert doc["graph"] == "resnet-ish" and doc["steps"] == 6
    assert plan.to_json() == json.dumps(doc, sort_keys=True)
    assert mm.plan_json(residual_blocks(2).to_dict(), strategy="tmmu") == doc
    assert set(doc["tensors"]) == set(plan.tensors) == set(plan.tensor_ids)
    assert isinstance(plan.offsets, np.ndarray) and plan.offsets.dtype == np.uint64
    assert plan.metrics["allocation_time_ns"] > 0
    assert "allocation_time_ns" not in doc["metrics"]
    assert plan.metrics["total_bytes"] == plan.total_bytes == sum(
        a.size for a in plan.arenas.values())
    text = repr(plan)
    assert "resnet-ish" in text and "activations=" in text
    page = plan._repr_html_()
    assert "<table>" in page and "activations" in page and "lower bound" in page


def test_plan_is_deterministic():
    g = residual_blocks(4)
    assert len({mm.plan(g, strategy="tmmu").to_json() for _ in range(5)}) == 1


def test_builder_checks_entries_as_they_are_added():
    g = mm.Graph()
    with pytest.raises(mm.PlanError) as info:
        g.tensor("x", [-1])
    assert info.value.code == "INVALID_IR_SHAPES" and info.value.tensor == "x"
    with pytest.raises(mm.PlanError) as info:
        g.tensor("y", [2], alignment=12)
    assert info.value.code == "ALIGNMENT_VIOLATION"
    with pytest.raises(mm.PlanError):
        g.node("n", "op", inputs=["a"], phase="sideways")
    g.tensor("a", [2])
    g.node("n", "op", inputs=["a", "missing"])
    with pytest.raises(mm.PlanError) as info:
        g.validate()
    assert info.value.tensor == "missing" and info.value.node == "n"


def test_empty_graph_and_tensor_only_graph():
    g = mm.Graph(name="empty")
    plan = same_as_reference(g)
    assert plan.total_bytes == 0 and plan.steps == 0 and plan.to_dict()["arenas"] == {}
    g.tensor("lonely", [3], role="output")
    plan = same_as_reference(g)
    assert plan.tensors["lonely"].birth == plan.tensors["lonely"].death == 0
    assert plan.arenas["activations"].size == 128


def test_inplace_over_an_unproduced_tensor_at_step_zero():
    """Regression (found by the property tests): victim and taker are both born
    at step 0 and the taker comes first in the document; the self-check must
    still see the victim before the taker."""
    g = mm.Graph()
    g.tensor("t3", [1], "uint8", can_inplace=True)   # the taker, listed first
    g.tensor("t2", [1], "uint8")                      # never produced: born at 0
    g.node("n0", "relu", ["t2"], ["t3"])
    plan = same_as_reference(g, alignment=1)
    assert plan.tensors["t3"].inplace_of == "t2"
    assert plan.tensors["t3"].offset == plan.tensors["t2"].offset
    plan.verify()
    for strategy in ("greedy_by_size", "best_fit", "auto", "optimal"):
        assert mm.plan(g, strategy=strategy).tensors["t3"].inplace_of == "t2"
    # With the ids swapped the taker sorts first, before its victim is placed:
    # no in-place (docs/algorithm.md §4), and the plan is still valid.
    g2 = mm.Graph()
    g2.tensor("a", [1], "uint8", can_inplace=True)
    g2.tensor("b", [1], "uint8")
    g2.node("n0", "relu", ["b"], ["a"])
    plan2 = same_as_reference(g2, alignment=1)
    assert plan2.tensors["a"].inplace_of is None
    assert plan2.arenas["activations"].slots == 2
