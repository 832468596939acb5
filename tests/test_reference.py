"""Unit tests of the pure-Python reference planner (docs/algorithm.md).

Every expected number below is computed by hand in the comments next to it.
Sizes: float32 [256] = 1024 bytes; with the default arena alignment of 128 a
1024-byte tensor fills its slot exactly.
"""

import copy
import json

import pytest

from emel.memory import reference
from emel.memory.errors import PlanError

from repo_data import GRAPH_FILES as CORPUS


# ---------------------------------------------------------------------------
# builders
# ---------------------------------------------------------------------------
def T(tid, shape=(256,), dtype="float32", role="activation", **fields):
    t = {"id": tid, "shape": list(shape), "dtype": dtype, "role": role}
    if "base" in fields:
        t["view_of"] = {"base": fields.pop("base"), "byte_offset": fields.pop("byte_offset", 0)}
    t.update(fields)
    return t


def N(nid, inputs, outputs, op="op", **fields):
    return dict({"id": nid, "op": op, "inputs": list(inputs), "outputs": list(outputs)}, **fields)


def G(tensors, nodes, **fields):
    return dict({"format": "emel.graph/1", "name": "test", "tensors": tensors, "nodes": nodes}, **fields)


def chain(n, inplace=False, size=(256,)):
    """fill -> a0 -> a1 -> ... -> a{n-1}: node k produces a{k} from a{k-1}."""
    tensors = [T(f"a{k}", size, can_inplace=inplace and k > 0) for k in range(n)]
    nodes = [N("n0", [], ["a0"])] + [N(f"n{k}", [f"a{k - 1}"], [f"a{k}"]) for k in range(1, n)]
    return G(tensors, nodes)


def error(document, code, **kw):
    with pytest.raises(PlanError) as info:
        reference.plan(document, **kw)
    assert info.value.code == code, info.value
    return info.value


def storage(p, tid):
    return p["tensors"][tid]


# ---------------------------------------------------------------------------
# slots
# ---------------------------------------------------------------------------
def test_inplace_chain_uses_one_slot():
    p = reference.plan(chain(4, inplace=True))
    act = p["arenas"]["activations"]
    assert act["slots"] == 1
    assert act["size"] == 1024
    # a0 [0,1], a1 [1,2], a2 [2,3], a3 [3,3]; each a{k} takes a{k-1} in place.
    for k in range(4):
        e = storage(p, f"a{k}")
        assert (e["slot"], e["offset"], e["birth"], e["death"]) == (0, 0, k, min(k + 1, 3))
        if k:
            assert e["inplace_of"] == f"a{k - 1}"
        else:
            assert "inplace_of" not in e
    m = p["metrics"]
    assert m["max_live"] == {"activations": 1}            # each pair counted once
    assert m["peak_live_bytes"] == {"activations": 2048}  # two tensors live at steps 1..3
    assert m["lower_bound"] == {"activations": 1024}      # ... sharing their bytes
    assert m["memory_reuse_ratio"] == {"activations": 1.0 - 1.0 / 4.0}
    # A = 1024 * (2 + 2 + 2 + 1) = B (every size fills its slot) -> 0.0
    assert m["internal_fragmentation_ratio"] == {"activations": 0.0}


def test_plain_chain_uses_two_slots():
    p = reference.plan(chain(4))
    assert p["arenas"]["activations"]["slots"] == 2
    assert p["arenas"]["activations"]["size"] == 2048
    # a0 slot 0; a1 slot 1; a2 reuses a0's slot (a0 died at 1 < 2); a3 reuses a1's.
    assert [storage(p, f"a{k}")["slot"] for k in range(4)] == [0, 1, 0, 1]
    assert [storage(p, f"a{k}")["offset"] for k in range(4)] == [0, 1024, 0, 1024]
    assert not any("inplace_of" in e for e in p["tensors"].values())
    assert p["metrics"]["max_live"] == {"activations": 2}


def test_odd_sizes_give_a_fragmentation_ratio():
    # uint8 [1000]: 1000 bytes in 1024-byte slots; a0 [0,1] a1 [1,2] a2 [2,2]
    g = chain(3, size=(1000,))
    for t in g["tensors"]:
        t["dtype"] = "uint8"
    p = reference.plan(g)
    used = 1000 * (2 + 2 + 1)
    reserved = 1024 * (2 + 2 + 1)
    assert p["metrics"]["internal_fragmentation_ratio"]["activations"] == 1.0 - float(used) / float(reserved)
    assert p["metrics"]["memory_reuse_ratio"]["activations"] == 1.0 - 2.0 / 3.0
    assert p["metrics"]["lower_bound"]["activations"] == 2000


def residual(inplace):
    # x -> a -> b ; y = add(x, b)
    tensors = [T("x", role="input"), T("a"), T("b", can_inplace=inplace), T("y", role="output", can_inplace=inplace)]
    nodes = [N("n0", ["x"], ["a"]), N("n1", ["a"], ["b"]), N("n2", ["x", "b"], ["y"], op="add")]
    return G(tensors, nodes)


def test_residual_block_uses_the_optimal_slot_count():
    # x [0,2] a [0,1] b [1,2] y [2,2]: 3 live at steps 1 and 2 -> 3 slots.
    # sweep: birth 0: a, x (equal sizes, id order) -> slots 0, 1; b -> slot 2;
    # y: a died at 1 < 2 -> slot 0.
    p = reference.plan(residual(False))
    assert p["arenas"]["activations"]["slots"] == 3
    assert p["metrics"]["max_live"]["activations"] == 3
    assert [storage(p, t)["slot"] for t in "axby"] == [0, 1, 2, 0]
    assert storage(p, "y")["death"] == 2


def test_residual_block_with_inplace_uses_two_slots():
    # b takes a (a dies at 1); y takes b (b dies at 2); x is an input: never a victim.
    p = reference.plan(residual(True))
    assert p["arenas"]["activations"]["slots"] == 2
    assert p["metrics"]["max_live"]["activations"] == 2
    assert storage(p, "b")["inplace_of"] == "a"
    assert storage(p, "y")["inplace_of"] == "b"
    assert [storage(p, t)["slot"] for t in "axby"] == [0, 1, 0, 0]


def test_inplace_takes_the_largest_victim_and_needs_enough_size():
    # n1 reads p (2048 B), q (1024 B), r (4096 B, but also live later); out 1024 B can_inplace.
    tensors = [T("p", (512,)), T("q"), T("r", (1024,)), T("out", can_inplace=True), T("z", role="output")]
    nodes = [N("n0", [], ["p", "q", "r"]), N("n1", ["q", "p", "r"], ["out"]), N("n2", ["r", "out"], ["z"])]
    p = reference.plan(G(tensors, nodes))
    assert storage(p, "out")["inplace_of"] == "p"
    # a taker larger than every dying input takes nothing
    tensors[3] = T("out", (1024,), can_inplace=True)
    p = reference.plan(G(tensors, nodes))
    assert "inplace_of" not in storage(p, "out")


def test_inplace_victim_with_a_live_view_is_refused():
    # n1 reads a and a view of a: a has another live alias at n1.
    tensors = [T("a"), T("av", (64,), base="a", byte_offset=0), T("b", can_inplace=True)]
    nodes = [N("n0", [], ["a"]), N("n1", ["a", "av"], ["b"])]
    p = reference.plan(G(tensors, nodes))
    assert "inplace_of" not in storage(p, "b")
    nodes[1] = N("n1", ["a"], ["b"])
    assert storage(reference.plan(G(tensors, nodes)), "b")["inplace_of"] == "a"


# ---------------------------------------------------------------------------
# layout
# ---------------------------------------------------------------------------
def odd_sizes_graph(r_alignment=None):
    extra = {} if r_alignment is None else {"alignment": r_alignment}
    tensors = [T("p", (3,), "uint8"), T("q", (1000003,), "uint8"), T("r", (1,), "uint8", **extra),
               T("out", (5,), "uint8", role="output")]
    nodes = [N("n0", [], ["p", "q", "r"]), N("n1", ["p", "q", "r"], ["out"])]
    return G(tensors, nodes)


def test_exact_offsets_with_alignment_128_and_odd_sizes():
    # birth 0 sorted by size: q (1000003 -> 1000064), p (3 -> 128), r (1 -> 128);
    # out (birth 1; p q r die at 1, not before) gets a 4th slot.
    p = reference.plan(odd_sizes_graph())
    assert storage(p, "q")["offset"] == 0
    assert storage(p, "p")["offset"] == 1000064
    assert storage(p, "r")["offset"] == 1000192
    assert storage(p, "out")["offset"] == 1000320
    assert p["arenas"]["activations"]["size"] == 1000448
    assert storage(p, "q")["size"] == 1000003                 # sizes are not rounded
    assert p["arenas"]["activations"]["lower_bound"] == 1000003 + 3 + 1 + 5


def test_tensor_alignment_raises_its_slot_alignment():
    # r has alignment 1024: its slot starts at align_up(1000192, 1024) = 1000448
    # and is 1024 bytes; out follows at 1001472; arena size 1001600.
    p = reference.plan(odd_sizes_graph(r_alignment=1024))
    assert storage(p, "r")["offset"] == 1000448
    assert storage(p, "out")["offset"] == 1001472
    assert p["arenas"]["activations"]["size"] == 1001600


def test_alignment_argument_and_arena_alignment():
    # alignment=1: no padding at all; q 0, p 1000003, r 1000006, out 1000007, size 1000012
    p = reference.plan(odd_sizes_graph(), alignment=1)
    assert [storage(p, t)["offset"] for t in ("q", "p", "r", "out")] == [0, 1000003, 1000006, 1000007]
    assert p["arenas"]["activations"]["size"] == 1000012
    assert p["arenas"]["activations"]["alignment"] == 1
    # arena setting wins over alignment=: 4096 -> q 0 (1003520), p 1003520, r 1007616, out 1011712
    p = reference.plan(odd_sizes_graph(), alignment=1, arenas={"activations": {"alignment_bytes": 4096}})
    assert [storage(p, t)["offset"] for t in ("q", "p", "r", "out")] == [0, 1003520, 1007616, 1011712]
    assert p["arenas"]["activations"]["size"] == 1015808


def test_parameters_are_sequential_in_id_order():
    # id order is by code point: "b" < "w10" < "w2"
    tensors = [T("w2", (100,), "uint8", role="parameter"), T("w10", (1000,), "uint8", role="parameter"),
               T("b", (1,), "uint8", role="parameter"), T("x", role="input"), T("y", role="output")]
    nodes = [N("n0", ["x", "w2", "w10", "b"], ["y"]), N("n1", ["y"], [])]
    p = reference.plan(G(tensors, nodes))
    par = p["arenas"]["parameters"]
    assert par["persistent"] is True and p["arenas"]["activations"]["persistent"] is False
    assert [(storage(p, t)["slot"], storage(p, t)["offset"]) for t in ("b", "w10", "w2")] == \
        [(0, 0), (1, 128), (2, 1152)]
    assert par["size"] == 1280 and par["slots"] == 3
    assert all((storage(p, t)["birth"], storage(p, t)["death"]) == (0, 1) for t in ("b", "w10", "w2"))
    assert p["metrics"]["memory_reuse_ratio"]["parameters"] == 0.0


def test_views_offsets_roots_and_lifetimes():
    # a_in [0,0] base [0,2] (kept alive by w at step 2) c [1,1] y [2,2]
    # birth 0: a_in, base (equal sizes, id order) -> slots 0, 1; c and y reuse slot 0.
    tensors = [T("a_in", role="input"), T("base"), T("v", (128,), base="base", byte_offset=256),
               T("w", (32,), base="v", byte_offset=128), T("c"), T("y", (32,), role="output")]
    nodes = [N("n0", ["a_in"], ["base"]), N("n1", ["base"], ["c"]), N("n2", ["w"], ["y"])]
    p = reference.plan(G(tensors, nodes))
    assert storage(p, "base")["offset"] == 1024
    assert (storage(p, "base")["birth"], storage(p, "base")["death"]) == (0, 2)
    assert p["tensors"]["v"] == {"arena": "activations", "offset": 1024 + 256, "size": 512, "view_of": "base"}
    assert p["tensors"]["w"] == {"arena": "activations", "offset": 1024 + 384, "size": 128, "view_of": "base"}
    assert storage(p, "c")["offset"] == 0 and storage(p, "y")["offset"] == 0


def test_view_nbytes_span_and_arena_of_root():
    # a broadcast view with its own span (nbytes) lives in its root's arena, whatever its role.
    tensors = [T("g", role="gradient"), T("gv", (1000,), role="activation", nbytes=64, base="g", byte_offset=960)]
    nodes = [N("n0", [], ["g"]), N("n1", ["gv"], [])]
    p = reference.plan(G(tensors, nodes))
    assert p["tensors"]["gv"] == {"arena": "gradients", "offset": 960, "size": 64, "view_of": "g"}
    assert set(p["arenas"]) == {"gradients"}


def test_outputs_live_to_the_end():
    # o1 listed in outputs, o2 the root of an output view, o3 role output; all die at last = 3.
    tensors = [T("o1"), T("o2"), T("o2v", (8,), role="output", base="o2"), T("o3", role="output"), T("t")]
    nodes = [N("n0", [], ["o1"]), N("n1", [], ["o2"]), N("n2", [], ["o3"]), N("n3", [], ["t"])]
    p = reference.plan(G(tensors, nodes, outputs=["o1"]))
    assert [storage(p, t)["death"] for t in ("o1", "o2", "o3", "t")] == [3, 3, 3, 3]
    assert [storage(p, t)["birth"] for t in ("o1", "o2", "o3", "t")] == [0, 1, 2, 3]
    p = reference.plan(G(tensors, nodes))  # without the list, o1 dies at its birth
    assert storage(p, "o1")["death"] == 0


# ---------------------------------------------------------------------------
# modes
# ---------------------------------------------------------------------------
def training_graph():
    # f0: x -> h, s (both saved); f1: s -> r (can_inplace); f2: r, h -> loss; b0: loss, h -> g
    tensors = [T("x", role="input"), T("h", saved_for_backward=True), T("s", saved_for_backward=True),
               T("r", can_inplace=True), T("loss", (1,), role="output"), T("g", role="gradient")]
    nodes = [N("f0", ["x"], ["h", "s"], phase="forward"), N("f1", ["s"], ["r"], phase="forward"),
             N("f2", ["r", "h"], ["loss"], phase="forward"), N("b0", ["loss", "h"], ["g"], phase="backward")]
    return G(tensors, nodes)


def lifetimes(p):
    return {t: (e["birth"], e["death"]) for t, e in p["tensors"].items()}


def test_modes_on_saved_tensors():
    common = {"x": (0, 0), "h": (0, 3), "r": (1, 2), "loss": (2, 3), "g": (3, 3)}
    inf = reference.plan(training_graph(), mode="inference")
    fwd = reference.plan(training_graph(), mode="forward")
    bwd = reference.plan(training_graph(), mode="backward")
    assert lifetimes(inf) == dict(common, s=(0, 1))
    assert lifetimes(bwd) == dict(common, s=(0, 1))
    assert lifetimes(fwd) == dict(common, s=(0, 3))       # saved: lives to the last step
    assert inf["mode"] == "inference" and fwd["mode"] == "forward" and bwd["mode"] == "backward"
    # inference: the flag is ignored, r takes s in place; forward/backward: never.
    assert storage(inf, "r")["inplace_of"] == "s"
    assert "inplace_of" not in storage(bwd, "r")
    assert "inplace_of" not in storage(fwd, "r")
    # slots (hand sweep): inference 3 (r shares s's slot), backward 3 (loss reuses s's slot),
    # forward 4 (nothing is released before step 3)
    slots = [p["arenas"]["activations"]["slots"] for p in (inf, bwd, fwd)]
    assert slots == [3, 3, 4]
    assert [p["metrics"]["max_live"]["activations"] for p in (inf, bwd, fwd)] == [3, 3, 4]
    assert inf["arenas"]["gradients"]["slots"] == 1


# ---------------------------------------------------------------------------
# must_not_alias, capacity, config
# ---------------------------------------------------------------------------
def test_must_not_alias_forces_distinct_slots():
    g = chain(3)
    g["tensors"][2]["must_not_alias"] = ["a0"]     # a2 would reuse a0's slot
    p = reference.plan(g)
    assert [storage(p, f"a{k}")["slot"] for k in range(3)] == [0, 1, 2]
    assert p["metrics"]["max_live"]["activations"] == 2
    g = chain(2, inplace=True)
    g["tensors"][0]["must_not_alias"] = ["a1"]     # the pair blocks in-place too
    p = reference.plan(g)
    assert "inplace_of" not in storage(p, "a1")
    assert storage(p, "a1")["slot"] == 1


def test_capacity_too_small_names_arena_and_holder():
    g = chain(3)                                   # slots 0 [0,1024) and 1 [1024,2048)
    e = error(g, "ARENA_TOO_SMALL", arenas={"activations": {"capacity_bytes": 2047}})
    assert e.arena == "activations" and e.tensor == "a1"
    p = reference.plan(g, arenas={"activations": {"capacity_bytes": 2048, "page_size": 65536}})
    assert p["arenas"]["activations"]["capacity_bytes"] == 2048
    assert p["arenas"]["activations"]["page_size"] == 65536


def test_config_only_arena_and_persistent_override():
    g = chain(3)
    p = reference.plan(g, arenas={"scratch": {}, "activations": {"persistent": True}})
    assert list(p["arenas"]) == ["activations", "scratch"]
    assert p["arenas"]["scratch"] == {"size": 0, "alignment": 128, "slots": 0, "lower_bound": 0,
                                      "page_size": 4096, "persistent": False}
    assert p["arenas"]["activations"]["slots"] == 3       # persistent: no reuse
    assert p["metrics"]["memory_reuse_ratio"]["scratch"] == 0.0
    assert p["metrics"]["internal_fragmentation_ratio"]["scratch"] == 0.0


def test_document_keys_exactly():
    g = residual(True)
    g["tensors"].append(T("yv", (4,), base="y", byte_offset=4))
    p = reference.plan(g, arenas={"activations": {"capacity_bytes": 10**6}})
    assert set(p) == {"format", "graph", "mode", "strategy", "steps", "arenas", "tensors", "metrics",
                      "hashes", "replay_token", "rank", "world_size"}   # the last four: determinism.md
    assert (p["format"], p["graph"], p["strategy"], p["steps"]) == ("emel.plan/1", "test", "tmmu", 3)
    assert set(p["tensors"]["a"]) == {"arena", "offset", "size", "slot", "birth", "death"}
    assert set(p["tensors"]["b"]) == {"arena", "offset", "size", "slot", "birth", "death", "inplace_of"}
    assert set(p["tensors"]["yv"]) == {"arena", "offset", "size", "view_of"}
    assert set(p["arenas"]["activations"]) == {"size", "alignment", "slots", "lower_bound", "page_size",
                                               "persistent", "capacity_bytes"}
    assert set(p["metrics"]) == {"peak_logical_slots", "peak_physical_bytes", "lower_bound",
                                 "peak_live_bytes", "max_live",
                                 "storage_tensors", "memory_reuse_ratio", "internal_fragmentation_ratio",
                                 "total_bytes", "total_lower_bound"}
    assert p["metrics"]["storage_tensors"] == {"activations": 4}
    assert p["metrics"]["total_bytes"] == 2048
    # x [0,2] a [0,1] b [1,2] y [2,2]: 3 x 1024 live at step 1, where b
    # takes a's bytes in place, so the bound counts 2 x 1024
    assert p["metrics"]["peak_live_bytes"] == {"activations": 3072}
    assert p["metrics"]["total_lower_bound"] == 2048
    json.dumps(p)                                          # plain JSON data


def test_plan_is_deterministic_and_does_not_touch_the_document():
    g = training_graph()
    before = copy.deepcopy(g)
    a = reference.plan(g, mode="backward")
    assert g == before
    assert json.dumps(a, sort_keys=True) == json.dumps(reference.plan(g, mode="backward"), sort_keys=True)


def test_empty_graph():
    p = reference.plan(G([], []))
    assert p["steps"] == 0 and p["arenas"] == {} and p["tensors"] == {}
    assert p["metrics"]["total_bytes"] == 0 and p["metrics"]["max_live"] == {}


def test_unknown_mode_or_strategy_is_a_value_error():
    with pytest.raises(ValueError):
        reference.plan(chain(2), mode="training")
    with pytest.raises(ValueError):
        reference.plan(chain(2), strategy="greedy")
    with pytest.raises(ValueError):
        reference.check_plan(chain(2), reference.plan(chain(2)), mode="train")


# ---------------------------------------------------------------------------
# failure codes (each with the id it names)
# ---------------------------------------------------------------------------
def test_invalid_unknown_ids():
    g = chain(3)
    g["nodes"][1]["inputs"] = ["nope"]
    e = error(g, "INVALID_IR_SHAPES")
    assert (e.node, e.tensor) == ("n1", "nope")
    g = chain(3)
    g["tensors"][1]["view_of"] = {"base": "ghost", "byte_offset": 0}
    assert error(g, "INVALID_IR_SHAPES").tensor == "a1"
    g = chain(3)
    g["tensors"][2]["must_not_alias"] = ["ghost"]
    assert error(g, "INVALID_IR_SHAPES").tensor == "a2"
    assert error(G(chain(2)["tensors"], chain(2)["nodes"], outputs=["zz"]), "INVALID_IR_SHAPES").tensor == "zz"
    g = chain(3)
    g["execution_order"] = ["n0", "n2"]
    assert error(g, "INVALID_IR_SHAPES").node == "n1"      # the first missing node
    g["execution_order"] = ["n0", "n1", "n1", "n2"]
    assert error(g, "INVALID_IR_SHAPES").node == "n1"


def test_invalid_duplicates():
    g = chain(3)
    g["tensors"].append(T("a1"))
    assert error(g, "INVALID_IR_SHAPES").tensor == "a1"
    g = chain(3)
    g["nodes"].append(N("n2", [], []))
    assert error(g, "INVALID_IR_SHAPES").node == "n2"
    g = chain(3)
    g["nodes"][2]["outputs"].append("a1")                  # a1 produced by n1 and n2
    e = error(g, "INVALID_IR_SHAPES")
    assert (e.tensor, e.node) == ("a1", "n2")


@pytest.mark.parametrize("field,value", [
    ("shape", [4, -1]), ("shape", [True, 4]), ("shape", [2.0]), ("shape", "4"), ("role", "weights"),
    ("dtype", ""), ("nbytes", -1), ("can_inplace", 1), ("arena", ""), ("alignment", 4.0),
])
def test_invalid_tensor_fields(field, value):
    g = chain(3)
    g["tensors"][1][field] = value
    assert error(g, "INVALID_IR_SHAPES").tensor == "a1"


def test_invalid_document_shape():
    error({"format": "emel.graph/2", "tensors": [], "nodes": []}, "INVALID_IR_SHAPES")
    error({"format": "emel.graph/1", "tensors": {}, "nodes": []}, "INVALID_IR_SHAPES")
    error([], "INVALID_IR_SHAPES")
    g = chain(2)
    g["nodes"][0]["phase"] = "sideways"
    assert error(g, "INVALID_IR_SHAPES").node == "n0"
    # null counts as absent; unknown keys are ignored
    g = chain(2)
    g["tensors"][0].update({"nbytes": None, "view_of": None, "comment": "x"})
    g["execution_order"] = None
    assert reference.plan(g)["arenas"]["activations"]["slots"] == 2


def test_invalid_sizes():
    g = chain(2)
    g["tensors"][1]["dtype"] = "q4_0"                      # unknown dtype, no nbytes
    assert error(g, "INVALID_IR_SHAPES").tensor == "a1"
    g["tensors"][1]["nbytes"] = 77                         # with nbytes it is fine
    assert storage(reference.plan(g), "a1")["size"] == 77
    g = chain(2)
    g["tensors"][1]["nbytes"] = 1000                       # float32 [256] is 1024 bytes
    assert error(g, "INVALID_IR_SHAPES").tensor == "a1"
    g["tensors"][1]["shape"] = [0, 2**63]                  # zero-size: 0 bytes, no overflow
    g["tensors"][1]["nbytes"] = 0
    assert storage(reference.plan(g), "a1")["size"] == 0


def test_invalid_views():
    tensors = [T("b"), T("v", (128,), base="b", byte_offset=513)]   # 513 + 512 > 1024
    e = error(G(tensors, [N("n0", [], ["b"])]), "INVALID_IR_SHAPES")
    assert e.tensor == "v"
    tensors[1]["view_of"]["byte_offset"] = 512                        # exactly fits
    assert reference.plan(G(tensors, [N("n0", [], ["b"])]))["tensors"]["v"]["offset"] == 512
    # a loop of views: v1 -> v2 -> v3 -> v2
    tensors = [T("v1", base="v2"), T("v2", base="v3"), T("v3", base="v2")]
    assert error(G(tensors, []), "INVALID_IR_SHAPES").tensor == "v1"
    tensors = [T("v", base="v")]
    assert error(G(tensors, []), "INVALID_IR_SHAPES").tensor == "v"
    # must_not_alias on one root with intersecting bytes can never be honoured
    tensors = [T("b"), T("lo", (64,), base="b"), T("hi", (64,), base="b", byte_offset=256, must_not_alias=["lo"])]
    assert reference.plan(G(tensors, []))["tensors"]["hi"]["offset"] == 256     # disjoint: fine
    tensors[2]["view_of"]["byte_offset"] = 255                         # [255, 511) meets [0, 256)
    assert error(G(tensors, []), "INVALID_IR_SHAPES").tensor == "hi"


def test_liveness_cycle_real_cycle():
    tensors = [T("a"), T("b")]
    nodes = [N("n0", ["b"], ["a"]), N("n1", ["a"], ["b"])]
    e = error(G(tensors, nodes), "LIVENESS_CYCLE")
    assert (e.node, e.tensor) == ("n0", "b")
    assert "has a cycle" in e.message
    # a node reading its own output is a cycle too
    e = error(G([T("a")], [N("n0", ["a"], ["a"])]), "LIVENESS_CYCLE")
    assert (e.node, e.tensor) == ("n0", "a") and "has a cycle" in e.message


def test_liveness_cycle_wrong_order():
    g = chain(3)
    g["execution_order"] = ["n1", "n0", "n2"]
    e = error(g, "LIVENESS_CYCLE")
    assert (e.node, e.tensor) == ("n1", "a0")
    assert "no cycle" in e.message and "execution_order" in e.message
    # through a view: n1 reads a view of a0 before n0 produces a0
    g = chain(2)
    g["tensors"].append(T("a0v", (16,), base="a0"))
    g["nodes"][1]["inputs"] = ["a0v"]
    g["nodes"].reverse()
    e = error(g, "LIVENESS_CYCLE")
    assert (e.node, e.tensor) == ("n1", "a0v") and "no cycle" in e.message


def test_allocation_overflow():
    g = chain(2)
    g["tensors"][1]["shape"] = [2**62, 2**62]              # phase C: product too large
    assert error(g, "ALLOCATION_OVERFLOW").tensor == "a1"
    g["tensors"][1]["shape"] = [1, 2**64]                  # phase A: the dimension itself
    assert error(g, "ALLOCATION_OVERFLOW").tensor == "a1"
    g["tensors"][1]["shape"] = [2**64 - 1]                 # fits as a dim; x 4 bytes does not
    assert error(g, "ALLOCATION_OVERFLOW").tensor == "a1"
    g["tensors"][1]["dtype"] = "uint8"                     # 2^64 - 1 bytes fit; rounded up to 128 they do not
    assert error(g, "ALLOCATION_OVERFLOW").tensor == "a1"
    g["tensors"][1]["shape"] = [2**64 - 128]               # its slot fits, but starts at 1024 (after a0's)
    e = error(g, "ALLOCATION_OVERFLOW")
    assert (e.arena, e.tensor) == ("activations", "a1")


def test_alignment_violation():
    g = chain(2)
    g["tensors"][1]["alignment"] = 3
    assert error(g, "ALIGNMENT_VIOLATION").tensor == "a1"
    e = error(chain(2), "ALIGNMENT_VIOLATION", arenas={"activations": {"alignment_bytes": 96}})
    assert e.arena == "activations"
    error(chain(2), "ALIGNMENT_VIOLATION", alignment=0)
    # a view whose own alignment does not divide its root offset
    tensors = [T("b"), T("v", (8,), base="b", byte_offset=96, alignment=64)]
    assert error(G(tensors, []), "ALIGNMENT_VIOLATION").tensor == "v"


def test_bad_arena_config():
    assert error(chain(2), "INVALID_IR_SHAPES", arenas={"activations": {"colour": 1}}).arena == "activations"
    assert error(chain(2), "INVALID_IR_SHAPES", arenas={"activations": {"capacity_bytes": -1}}).arena \
        == "activations"
    error(chain(2), "INVALID_IR_SHAPES", arenas={"activations": {"persistent": "yes"}})


# ---------------------------------------------------------------------------
# the self-check
# ---------------------------------------------------------------------------
def test_check_plan_accepts_the_plan_and_finds_a_collision():
    g = chain(3)
    p = reference.plan(g)
    reference.check_plan(g, p)
    bad = copy.deepcopy(p)
    bad["tensors"]["a1"]["offset"] = 0                     # a0 [0,1] and a1 [1,2] now share bytes at step 1
    with pytest.raises(PlanError) as info:
        reference.check_plan(g, bad)
    assert info.value.code == "ADDRESS_COLLISION"
    assert info.value.tensor == "a0" and "'a1'" in info.value.message
    # an in-place pair sharing bytes is fine only when recorded as one
    gi = chain(3, inplace=True)
    pi = reference.plan(gi)
    reference.check_plan(gi, pi)
    del pi["tensors"]["a1"]["inplace_of"]
    with pytest.raises(PlanError) as info:
        reference.check_plan(gi, pi)
    assert info.value.code == "ADDRESS_COLLISION" and info.value.tensor == "a0"


def test_check_plan_alignment_and_bounds():
    g = chain(3)
    p = reference.plan(g)
    bad = copy.deepcopy(p)
    bad["tensors"]["a1"]["offset"] = 1000
    with pytest.raises(PlanError) as info:
        reference.check_plan(g, bad)
    assert (info.value.code, info.value.tensor) == ("ALIGNMENT_VIOLATION", "a1")
    bad = copy.deepcopy(p)
    bad["arenas"]["activations"]["size"] = 1024           # a1 ends at 2048
    with pytest.raises(PlanError) as info:
        reference.check_plan(g, bad)
    assert (info.value.code, info.value.tensor) == ("ADDRESS_COLLISION", "a1")


def test_check_plan_uses_the_mode():
    # the forward-mode deaths are longer: an inference plan fails a forward check
    g = training_graph()
    p = reference.plan(g, mode="inference")
    reference.check_plan(g, p, mode="inference")
    with pytest.raises(PlanError) as info:
        reference.check_plan(g, p, mode="forward")
    assert info.value.code == "ADDRESS_COLLISION"


def test_check_plan_must_not_alias():
    g = chain(3)
    p = reference.plan(g)                                  # a0 and a2 share slot 0
    g["tensors"][2]["must_not_alias"] = ["a0"]
    with pytest.raises(PlanError) as info:
        reference.check_plan(g, p)
    assert (info.value.code, info.value.tensor) == ("ADDRESS_COLLISION", "a2")


# ---------------------------------------------------------------------------
# depth: no recursion anywhere
# ---------------------------------------------------------------------------
def test_deep_view_chain():
    depth = 100_000
    tensors = [T("r", (4,), "uint8")] + [T(f"v{k}", (4,), "uint8", base="r" if k == 0 else f"v{k - 1}")
                                         for k in range(depth)]
    tensors[-1]["alignment"] = 256                       # raises the root's alignment
    nodes = [N("n0", [], ["r"]), N("n1", [f"v{depth - 1}"], [])]
    p = reference.plan(G(tensors, nodes))
    assert p["tensors"][f"v{depth - 1}"] == {"arena": "activations", "offset": 0, "size": 4, "view_of": "r"}
    assert storage(p, "r")["death"] == 1
    assert p["arenas"]["activations"]["size"] == 256
    # and the loop check on a deep loop
    tensors[0] = T("r", (4,), "uint8", base=f"v{depth - 1}")
    assert error(G(tensors, []), "INVALID_IR_SHAPES").tensor == "r"


def test_deep_node_chain():
    n = 100_000
    p = reference.plan(chain(n, inplace=True, size=(1,)))
    assert p["steps"] == n
    assert p["arenas"]["activations"]["slots"] == 1
    assert storage(p, f"a{n - 1}")["inplace_of"] == f"a{n - 2}"
    g = chain(n, size=(1,))
    g["execution_order"] = [f"n{k}" for k in range(n - 1)][::-1] + [f"n{n - 1}"]
    e = error(g, "LIVENESS_CYCLE")
    assert e.node == f"n{n - 2}" and "no cycle" in e.message


# ---------------------------------------------------------------------------
# the model graphs (data/graphs)
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_model_graphs_plan_in_every_mode(path):
    document = json.loads(path.read_text())
    for mode in reference.MODES:
        p = reference.plan(document, mode=mode)
        assert len(p["tensors"]) == len(document["tensors"])
        for name, arena in p["arenas"].items():
            if not arena["persistent"]:
                assert arena["slots"] == p["metrics"]["max_live"][name], (path.stem, mode, name)
        assert p["metrics"]["total_bytes"] == sum(a["size"] for a in p["arenas"].values())
        reference.check_plan(document, p, mode=mode)


def test_arena_config_accepts_any_mapping_like_the_api():
    """arenas= may be any Mapping (read-only views included), in the reference as in the core."""
    from types import MappingProxyType

    import emel.memory as mm
    doc = chain(4)
    arenas = MappingProxyType({"activations": MappingProxyType({"alignment_bytes": 64,
                                                                "capacity_bytes": 1 << 20})})
    as_dict = {"activations": {"alignment_bytes": 64, "capacity_bytes": 1 << 20}}
    got = reference.plan(doc, arenas=arenas)
    assert got == reference.plan(doc, arenas=as_dict)
    assert got["arenas"]["activations"]["alignment"] == 64
    assert got == mm.plan(copy.deepcopy(doc), strategy="tmmu", arenas=arenas).to_dict()
