"""remat(): recompute saved activations so the placed arena fits a budget."""

import json
from pathlib import Path

import pytest

import emel.memory as mm
from emel.memory import reference
from emel.memory.cost_model import flops_or_bytes, graph_costs
from emel.memory.remat import candidates, rewrite

from repo_data import child_env, graph_path

RESNET = graph_path("resnet18-training")
MB = 1 << 20


def chain(layers=4, width=1 << 18):
    """A training step of ``layers`` layers: forward h_i = relu(mm(h_{i-1}, w_i)),
    the pre-activations saved; backward reads them in reverse."""
    g = mm.Graph(name="chain")
    g.tensor("x", [64, 64], role="input")
    prev = "x"
    for i in range(layers):
        g.tensor(f"w{i}", [64, 64], role="parameter")
        g.tensor(f"z{i}", [width], saved_for_backward=True)
        g.tensor(f"h{i}", [64, 64])
        g.node(f"mm{i}", "mm", [prev, f"w{i}"], [f"z{i}"], phase="forward")
        g.node(f"relu{i}", "relu", [f"z{i}"], [f"h{i}"], phase="forward")
        prev = f"h{i}"
    g.tensor("loss", [1], role="output")
    g.node("loss", "sum", [prev], ["loss"], phase="forward")
    grad = "loss"
    for i in reversed(range(layers)):
        g.tensor(f"g{i}", [64, 64])
        g.tensor(f"gw{i}", [64, 64], role="gradient")
        g.node(f"back{i}", "relu_mm_backward", [grad, f"z{i}", f"w{i}"], [f"g{i}", f"gw{i}"],
               phase="backward")
        grad = f"g{i}"
    return g


def single(units):
    """The one-group units by node (candidates() also lists longer replays)."""
    out = {}
    for u in units:
        out.setdefault(u.node, u)
    return out


def arena(p):
    return p.arenas["activations"].size


def test_no_recompute_when_the_graph_already_fits():
    g = chain()
    before = arena(mm.plan(g, mode="backward", strategy="auto"))
    h, p, report = mm.remat(g, before)
    assert h is g and report.recomputed == [] and report.cost == 0
    assert report.arena_after == report.arena_before == before


def test_recompute_fits_the_placed_arena_in_the_budget():
    g = chain()
    before = arena(mm.plan(g, mode="backward", strategy="auto"))
    budget = before * 6 // 10
    h, p, report = mm.remat(g, budget)
    assert arena(p) <= budget < before == report.arena_before
    assert report.arena_after == arena(p) and report.recomputed
    assert set(report.recompute_nodes.values()) <= {n["id"] for n in g.nodes}
    # the plan is the rewritten graph's own auto plan, self-checked and executable
    assert p.plan_hash == mm.plan(h, mode="backward", strategy="auto").plan_hash
    p.verify()
    mm.verify_execution(p, p.allocate())
    # recomputed tensors are no longer read by backward nodes
    for n in h.nodes:
        if n.get("phase") == "backward" and n["id"] not in report.recompute_nodes:
            assert not set(n["inputs"]) & set(report.recomputed)
    # cost is the cost model's cost of the replayed nodes
    costs = graph_costs(g)
    assert report.cost == sum(costs[m] for m in report.recompute_nodes.values())


def test_remat_is_deterministic_and_prefers_cheap_recompute():
    g = chain()
    before = arena(mm.plan(g, mode="backward", strategy="auto"))
    a = mm.remat(g, before - 1)
    b = mm.remat(mm.Graph.from_dict(g.to_dict()), before - 1)
    assert a.graph.to_json() == b.graph.to_json() and a.plan.plan_hash == b.plan.plan_hash
    # with a cost making layer 3 expensive, another layer is recomputed instead
    expensive = mm.remat(g, before - 1, cost=lambda n, t: 10**9 if n["id"] == "mm3" else 1)
    assert "mm3" not in expensive.report.recompute_nodes.values()
    assert expensive.report.cost < 10**9


def test_rewritten_graph_is_e0_with_the_reference():
    g = chain()
    units = single(candidates(g))
    with pytest.raises(ValueError, match="feed each other"):
        rewrite(g, [units["mm0"], units["mm1"]])  # mm1's replay reads z0, which mm0 recomputes
    h = rewrite(g, [units["mm0"], units["mm2"]])
    doc = json.loads(h.to_json())
    for mode in ("backward", "forward"):
        assert mm.plan(doc, strategy="tmmu", mode=mode).to_dict() == reference.plan(json.loads(h.to_json()), mode=mode)


def test_unreachable_budget_names_the_smallest_arena():
    g = chain()
    with pytest.raises(mm.PlanError) as e:
        mm.remat(g, 1024)
    err = e.value
    assert err.code == "ARENA_TOO_SMALL" and err.arena == "activations"
    assert "smallest placed arena reached is" in err.message
    smallest = int(err.message.split("reached is ")[1].split()[0])
    # that arena is real: a budget of exactly that size fits
    assert arena(mm.remat(g, smallest).plan) <= smallest


def test_bad_input():
    g = chain()
    with pytest.raises(mm.PlanError) as e:
        mm.remat(g, -1)
    assert e.value.code == "INVALID_IR_SHAPES"
    inference = mm.Graph.from_dict(g.to_dict())
    inference.nodes = [n for n in inference.nodes if n.get("phase") != "backward"]
    with pytest.raises(mm.PlanError, match="training graph"):
        mm.remat(inference, 1)
    with pytest.raises(ValueError, match="cost"):
        mm.remat(g, 1, cost="seconds")
    broken = mm.Graph.from_dict(g.to_dict())
    broken.nodes[0]["inputs"].append("nope")
    with pytest.raises(mm.PlanError) as e:
        mm.remat(broken, 1)
    assert e.value.code == "INVALID_IR_SHAPES" and e.value.node == "mm0"


def test_random_and_stateful_ops_and_hazards_are_not_recomputed():
    g = chain()
    g.nodes[0]["op"] = "native_dropout"
    g.nodes[2]["op"] = "native_batch_norm"
    assert {u.node for u in candidates(g)} == {"mm2", "mm3"}
    assert {u.nodes for u in candidates(g)} == {  # alone, or mm3's replay joined with mm2's
        ("relu1", "mm2"), ("relu2", "mm3"), ("relu1", "mm2", "relu2", "mm3")}
    # a kept input overwritten in place later would be replayed with other contents
    # (mm3's replay runs relu2 on the kept z2, which "clobber" overwrites after relu2)
    h = chain()
    h.tensor("z2v", [1 << 18], view_of="z2")
    h.nodes.insert(6, {"id": "clobber", "op": "relu_", "inputs": ["z2"], "outputs": ["z2v"],
                       "phase": "forward"})
    units = single(candidates(h))
    assert "mm3" not in units
    assert units["mm2"].nodes == ("relu1", "mm2", "clobber")  # the overwrite is replayed too
    assert units["mm1"].nodes == ("relu0", "mm1")     # h0 is not kept: relu0 is replayed too


def test_cost_model():
    t = {"a": {"id": "a", "shape": [8, 16], "dtype": "float32", "role": "input"},
         "b": {"id": "b", "shape": [16, 4], "dtype": "float32", "role": "parameter"},
         "bias": {"id": "bias", "shape": [4], "dtype": "float32", "role": "parameter"},
         "y": {"id": "y", "shape": [8, 4], "dtype": "float32", "role": "activation"},
         "x": {"id": "x", "shape": [1, 3, 8, 8], "dtype": "float32", "role": "input"},
         "w": {"id": "w", "shape": [5, 3, 3, 3], "dtype": "float32", "role": "parameter"},
         "c": {"id": "c", "shape": [1, 5, 6, 6], "dtype": "float32", "role": "activation"}}
    node = lambda op, i, o: {"id": "n", "op": op, "inputs": i, "outputs": o}  # noqa: E731
    assert flops_or_bytes(node("mm", ["a", "b"], ["y"]), t) == 2 * 8 * 4 * 16
    assert flops_or_bytes(node("addmm", ["bias", "a", "b"], ["y"]), t) == 2 * 8 * 4 * 16 + 32
    assert flops_or_bytes(node("convolution", ["x", "w"], ["c"]), t) == 2 * 180 * 27
    assert flops_or_bytes(node("relu", ["y"], ["y"]), t) == 2 * 128
    assert flops_or_bytes(node("view", ["y"], ["y"]), t) == 0


def test_resnet18_training_halves_its_placed_arena():
    g = mm.load_graph(RESNET)
    before = arena(mm.plan(g, mode="backward", strategy="auto", arena_layout="separate"))
    h, p, report = mm.remat(g, before // 2, arena_layout="separate")
    assert arena(p) <= before // 2
    mm.verify_execution(p, p.allocate())
    doc = json.loads(h.to_json())
    assert mm.plan(doc, strategy="tmmu", mode="backward").to_dict() == reference.plan(doc, mode="backward")


def test_remat_under_the_pooled_default_bounds_activations_and_gradients_together():
    """By default gradients share the activations arena: remat's budget bounds
    both, and its bound (LiveBytes) pools them as the plan does."""
    g = mm.load_graph(RESNET)
    pooled = mm.plan(g, mode="backward", strategy="auto")
    assert "gradients" not in pooled.arenas
    before = arena(pooled)
    assert before > arena(mm.plan(g, mode="backward", strategy="auto", arena_layout="separate"))
    target = before * 3 // 4
    h, p, report = mm.remat(g, target)
    assert arena(p) <= target and "gradients" not in p.arenas
    mm.verify_execution(p, p.allocate())


def fused_backward():
    """Two saved pre-activations read by one backward node, after a big
    backward temporary: recomputing z0 alone leaves z1 at the peak, and z1's
    replay (relu0, mm1) reads z0, so only the joined replay frees both."""
    g = mm.Graph(name="fused")
    g.tensor("x", [64, 64], role="input")
    for i in range(2):
        g.tensor(f"w{i}", [64, 64], role="parameter")
        g.tensor(f"z{i}", [1 << 18], saved_for_backward=True)
        g.tensor(f"h{i}", [64, 64])
    g.tensor("loss", [1], role="output")
    g.tensor("big", [1 << 19])
    g.tensor("small", [64])
    g.tensor("gw", [64, 64], role="gradient")
    g.node("mm0", "mm", ["x", "w0"], ["z0"], phase="forward")
    g.node("relu0", "relu", ["z0"], ["h0"], phase="forward")
    g.node("mm1", "mm", ["h0", "w1"], ["z1"], phase="forward")
    g.node("relu1", "relu", ["z1"], ["h1"], phase="forward")
    g.node("loss", "sum", ["h1"], ["loss"], phase="forward")
    g.node("spread", "expand", ["loss"], ["big"], phase="backward")
    g.node("reduce", "sum", ["big"], ["small"], phase="backward")
    g.node("back", "fused_backward", ["small", "z0", "z1"], ["gw"], phase="backward")
    return g


def test_the_most_bytes_first_pass_frees_what_the_cheapest_first_cannot(monkeypatch):
    import sys
    remat_module = sys.modules["emel.memory.remat"]
    g = fused_backward()
    budget = 5 * MB // 2
    h, p, report = mm.remat(g, budget)
    assert arena(p) <= budget
    assert set(report.recomputed) == {"z0", "z1"}
    monkeypatch.setattr(remat_module, "_PASSES", remat_module._PASSES[:1])
    with pytest.raises(mm.PlanError) as e:
        mm.remat(g, budget)
    assert e.value.code == "ARENA_TOO_SMALL"


def test_same_answer_under_any_hash_seed():
    """No set or dict iteration order leaks into the choice (PYTHONHASHSEED)."""
    import subprocess
    import sys
    code = ("import emel.memory as mm;"
            "from test_remat import chain, fused_backward; from test_reorder import fan;"
            "a = mm.remat(chain(), 2526489); b = mm.remat(fused_backward(), 5 * 2**20 // 2);"
            "print(a.plan.plan_hash, b.plan.plan_hash, mm.reorder(fan()).execution_order)")
    root = Path(__file__).resolve().parents[1]
    env = child_env()
    outs = {subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                           check=True, env={**env, "PYTHONHASHSEED": seed}).stdout
            for seed in ("1", "2")}
    assert len(outs) == 1
