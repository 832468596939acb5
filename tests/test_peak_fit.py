"""Plan.peak() / emel-plan --why, and memory_curve() / max_fit() / emel-fit."""

import json

import pytest

import emel.memory as mm
from emel.memory import cli, fit
from emel.memory.fit import max_fit, memory_curve, parse_bytes



def chain():
    """x -> big -> small -> y, with a parameter: the peak is where big is made."""
    g = mm.Graph(name="chain")
    g.tensor("x", [25], role="input")                        # 100 B
    g.tensor("w", [10], role="parameter", module="fc")       # 40 B
    g.tensor("big", [250], module="fc")                      # 1000 B
    g.tensor("small", [5], module="act")                     # 20 B
    g.tensor("y", [5], role="output")                        # 20 B
    g.node("fc", "linear", ["x", "w"], ["big"], module="fc")
    g.node("act", "relu", ["big"], ["small"], module="act")
    g.node("out", "copy", ["small"], ["y"])
    return g


def brute_peak(plan, arena=None):
    """(step, live bytes) from the plan document alone: the first step of the maximum."""
    doc = plan.to_dict()
    live = [0] * plan.steps
    for t in doc["tensors"].values():
        if "view_of" in t or (arena is not None and t["arena"] != arena):
            continue
        for s in range(t["birth"], t["death"] + 1):
            live[s] += t["size"]
    best = max(live)
    return live.index(best), best


def test_peak_names_step_node_module_and_top_tensors():
    plan = mm.plan(chain(), strategy="auto")
    report = plan.peak(top=2)
    assert (report.step, report.live_bytes) == brute_peak(plan)
    assert (report.node, report.op, report.module) == ("fc", "linear", "fc")
    assert [t.id for t in report.tensors] == ["big", "x"]
    big = report.tensors[0]
    assert (big.bytes, big.role, big.producer, big.module, big.category) == (
        1000, "activation", "fc", "fc", "temporaries")
    assert big.share == pytest.approx(1000 / report.live_bytes)
    assert report.tensors[1].producer is None           # an input has no producer
    assert sum(report.breakdown.values()) == report.live_bytes
    assert report.breakdown["parameters"] == 40 and report.breakdown["inputs"] == 100
    assert report.live_bytes <= report.planned_bytes == plan.total_bytes
    text = str(report)
    assert "step 0" in text and "big" in text and "in fc" in text
    assert "<b>Peak</b>" in plan._repr_html_()
    assert json.dumps(report.to_dict())                 # plain data


def test_peak_counts_an_inplace_pair_once():
    """Issue 31: b = relu_(a) takes a's bytes and dies at its own step; peak()
    counted both (200 B live in a 128-byte arena whose lower bound is 100)."""
    g = mm.Graph(name="inplace")
    g.tensor("a", [100], "uint8")
    g.tensor("b", [100], "uint8", can_inplace=True)
    g.node("relu_", "relu_", ["a"], ["b"])
    for strategy in ("tmmu", "greedy_by_size", "auto"):
        plan = mm.plan(g, strategy=strategy)
        act = plan.arenas["activations"]
        assert plan.tensors["b"].inplace_of == "a" and act.size == 128
        assert plan.peak().live_bytes == plan.peak(arena="activations").live_bytes == 100
        assert [t.id for t in plan.peak().tensors] == ["a"]


def test_peak_never_passes_the_arena_on_random_graphs():
    """Issue 31: the peak of every arena is its lower bound (so never above its
    size), and every arena together is below the total."""
    import graphgen
    for seed in range(120):
        doc = graphgen._Builder(graphgen._Rand(seed), 1 + seed % 12).build()
        for strategy in ("tmmu", "greedy_by_size"):
            try:
                plan = mm.plan(doc, strategy=strategy)
            except mm.PlanError:
                continue
            for a in plan.arenas.values():
                assert plan.peak(arena=a.name).live_bytes == a.lower_bound <= a.size, (seed, a.name)
            assert plan.peak().live_bytes <= plan.total_bytes


def test_peak_of_one_arena_and_bad_arguments():
    plan = mm.plan(chain())
    report = plan.peak(arena="activations")
    assert report.breakdown["parameters"] == 0
    assert (report.step, report.live_bytes) == brute_peak(plan, "activations")
    with pytest.raises(mm.PlanError, match="no such arena") as e:
        plan.peak(arena="nope")
    assert e.value.arena == "nope"
    with pytest.raises(mm.PlanError, match="top"):
        plan.peak(top=-1)


def test_peak_of_training_graph_splits_saved_activations_and_parameters(model_graph_path):
    plan = mm.plan(model_graph_path("llama-tiny-training"), mode="backward",
                   strategy="auto")
    report = plan.peak(top=5)
    assert (report.step, report.live_bytes) == brute_peak(plan)
    assert report.phase == "backward"
    assert report.breakdown["parameters"] > 0 and report.breakdown["saved_activations"] > 0
    assert sum(report.breakdown.values()) == report.live_bytes
    sizes = [t.bytes for t in report.tensors]
    assert sizes == sorted(sizes, reverse=True) and len(sizes) == 5


def test_module_field_round_trips_and_is_checked():
    g = chain()
    doc = g.to_dict()
    assert doc["tensors"][2]["module"] == "fc" and doc["nodes"][0]["module"] == "fc"
    assert mm.load_graph(doc).to_dict() == doc
    doc["tensors"][2]["module"] = 3
    with pytest.raises(mm.PlanError, match="'module' must be a string") as e:
        mm.load_graph(doc)
    assert e.value.tensor == "big"


def test_emel_plan_why(tmp_path, capsys):
    path = tmp_path / "g.json"
    path.write_text(chain().to_json())
    assert cli.main([str(path), "--why", "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "peak of chain" in out and "running: fc" in out and "top 1 live tensors" in out


# -- what fits ----------------------------------------------------------------
def symbolic_mlp(max_batch=64):
    """An MLP with a symbolic batch: activations grow with it, parameters do not."""
    b = {"sym": "batch", "min": 1, "max": max_batch}
    g = mm.Graph(name="mlp")
    g.tensor("x", [b, 64], role="input")
    g.tensor("w1", [64, 256], role="parameter")
    g.tensor("h", [b, 256])
    g.tensor("w2", [256, 64], role="parameter")
    g.tensor("y", [b, 64], role="output")
    g.node("fc1", "matmul", ["x", "w1"], ["h"])
    g.node("fc2", "matmul", ["h", "w2"], ["y"])
    return g


def test_memory_curve_plans_each_value():
    rows = memory_curve(symbolic_mlp(), "batch", [1, 8, 100], strategy="auto")
    assert [r["value"] for r in rows] == [1, 8, 100]       # 100: above the envelope, allowed
    for r in rows:
        direct = mm.plan(fit._at(symbolic_mlp().to_dict(), "batch", r["value"]), strategy="auto")
        assert r["bytes"] == direct.total_bytes and r["lower_bound"] <= r["bytes"]
    assert rows[0]["bytes"] < rows[1]["bytes"] < rows[2]["bytes"]


def test_max_fit_is_proven_by_two_plans_and_matches_brute_force():
    g = symbolic_mlp()
    curve = {r["value"]: r["bytes"] for r in memory_curve(g, "batch", range(1, 65))}
    budget = (curve[20] + curve[21]) // 2 + 1
    answer = max_fit(g, budget, "batch")
    assert answer.value == max(v for v, n in curve.items() if n <= budget)
    assert answer.plan.total_bytes <= budget < answer.next_plan.total_bytes
    assert answer.next_value == answer.value + 1
    assert len(answer.tried) < 12                            # bisection, not a scan
    assert "largest batch that fits" in str(answer)
    everything = max_fit(g, "1GiB", "batch")
    assert (everything.value, everything.next_value) == (64, None)
    nothing = max_fit(g, 10, "batch")
    assert nothing.value is None and nothing.next_value == 1 and nothing.next_bytes > 10


def test_max_fit_does_not_assume_monotone_plans():
    # A need that dips: value 6 needs less than value 5. Whatever the search
    # visits, the answer's plan fits and the next value's plan does not.
    need = {v: 1000 * v for v in range(1, 11)}
    need[6] = 2500

    def graph_at(value):
        g = mm.Graph(name=f"dip-{value}")
        g.tensor("x", [need[value]], "uint8", role="input")
        g.tensor("y", [1], "uint8", role="output")
        g.node("n", "op", ["x"], ["y"])
        return g

    answer = max_fit(graph_at, 4000, "n", lo=1, hi=10, alignment=1)
    assert answer.bytes <= 4000 < answer.next_bytes
    assert answer.next_value == answer.value + 1
    with pytest.raises(mm.PlanError, match="lo= and hi="):
        max_fit(graph_at, 4000, "n")


def test_fit_refuses_unknown_dims_and_budgets():
    with pytest.raises(mm.PlanError, match="'seq' is not a symbolic dimension.*batch"):
        max_fit(symbolic_mlp(), 10**6, "seq")
    with pytest.raises(ValueError, match="24GiB"):
        parse_bytes("lots")
    assert parse_bytes("24GiB") == 24 * 2**30 and parse_bytes("1.5 GB") == 1_500_000_000
    assert parse_bytes(4096) == 4096


def _bytes_graph(n):
    """A 1-byte input and an n-byte output: a plan of n + 1 bytes at alignment 1."""
    g = mm.Graph(name=f"bytes-{n}")
    g.tensor("x", [1], "uint8", role="input")
    g.tensor("y", [n], "uint8", role="output")
    g.node("make", "expand", ["x"], ["y"])
    return g


def test_max_fit_text_budget_is_exact():
    """Issue 31: "9007199254741119" went through float() and became ...120, and
    max_fit answered with a plan one byte over the budget asked."""
    budget = 9007199254741119
    assert parse_bytes(str(budget)) == budget and parse_bytes("1" * 400) == int("1" * 400)
    assert parse_bytes("0.5KiB") == 512 and parse_bytes("1.0000000000000000001 B") == 1
    for given in (budget, str(budget), f" {budget} B "):
        answer = max_fit(_bytes_graph, given, "n", lo=budget - 8, hi=budget + 8, alignment=1)
        assert answer.budget == budget and answer.bytes == budget < answer.next_bytes
    for bad in ("1e3", "-1", ".5", "1" * 1200, "5 XB"):
        with pytest.raises(ValueError, match="looks like 24GiB"):
            parse_bytes(bad)


def test_max_fit_400_digit_budget_and_emel_fit_bad_budget(tmp_path, capsys):
    """Issue 31: a 400-digit budget raised OverflowError (docs: ValueError) and
    emel-fit printed its traceback and exited 1; a budget it cannot read is a
    bad argument: exit 2, one line."""
    huge = "9" * 400
    answer = max_fit(_bytes_graph, huge, "n", lo=1, hi=4, alignment=1)
    assert answer.value == 4 and answer.budget == int(huge) and answer.bytes == 5
    path = tmp_path / "mlp.json"
    path.write_text(symbolic_mlp().to_json())
    assert fit.main([str(path), "--budget", huge, "--dim", "batch"]) == 0
    capsys.readouterr()
    for bad in ("1" * 2000, "1e999", "lots"):
        with pytest.raises(SystemExit) as e:
            fit.main([str(path), "--budget", bad, "--dim", "batch"])
        err = capsys.readouterr().err
        assert e.value.code == 2 and "Traceback" not in err
        assert "a byte budget looks like" in err.splitlines()[-1]


def test_emel_fit_json_graph(tmp_path, capsys):
    path = tmp_path / "mlp.json"
    path.write_text(symbolic_mlp().to_json())
    out_json = tmp_path / "fit.json"
    assert fit.main([str(path), "--budget", "200KiB", "--dim", "batch", "--curve", "1,64",
                     "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    doc = json.loads(out_json.read_text())
    assert f"largest batch that fits in 200.0 KiB = 204,800 B: {doc['value']}" in out
    assert doc["bytes"] <= 200 * 1024 < doc["next_bytes"]
    assert [r["value"] for r in doc["curve"]] == [1, 64]
    assert fit.main([str(path), "--budget", "10", "--dim", "batch"]) == 1
    assert "nothing fits" in capsys.readouterr().out
    assert fit.main([str(path), "--budget", "1MiB", "--dim", "seq"]) == 1
    assert "not a symbolic dimension" in capsys.readouterr().err


def test_emel_fit_onnx_batch(tmp_path, capsys):
    onnx = pytest.importorskip("onnx")
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.zeros((64, 128), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 128])], [w])
    path = tmp_path / "tiny.onnx"
    onnx.save(helper.make_model(graph), str(path))
    budget = 64 * 1024
    assert fit.main([str(path), "--budget", str(budget), "--dim", "batch", "--max", "512"]) == 0
    out = capsys.readouterr().out
    value = int(out.split(": ")[1].split(" ")[0])
    make = fit.onnx_at(str(path), "batch")
    assert mm.plan(make(value), strategy="auto").total_bytes <= budget
    assert mm.plan(make(value + 1), strategy="auto").total_bytes > budget


def test_emel_fit_searches_one_of_several_symbolic_dimensions(tmp_path, capsys):
    """x[B,3,H,W]: --input-shape x=B,3,8,8 fixes H and W and leaves B to the search;
    the messages on the way there say what to write."""
    onnx = pytest.importorskip("onnx")
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.zeros((4, 3, 3, 3), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 3, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 4, "H", "W"])], [w])
    path = str(tmp_path / "bhw.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    args = [path, "--budget", "64KiB", "--dim", "B", "--max", "64"]
    assert fit.main(args) == 1
    assert "--input-shape x=B,3,D,D" in capsys.readouterr().err
    assert fit.main(args + ["--input-shape", "x=1,3,8,8"]) == 1
    assert "'x' is fixed there: write B where it goes" in capsys.readouterr().err
    assert fit.main(args + ["--input-shape", "x=B,3,8,8"]) == 0
    value = int(capsys.readouterr().out.split(": ")[1].split(" ")[0])
    make = fit.onnx_at(path, "B", {"x": ["B", 3, 8, 8]})
    assert {t["id"]: t["shape"] for t in make(value).tensors}["x"] == [value, 3, 8, 8]
    assert mm.plan(make(value), strategy="auto").total_bytes <= 64 * 1024 \
        < mm.plan(make(value + 1), strategy="auto").total_bytes


def test_input_shape_beside_a_torch_factory_is_refused(capsys):
    """--torch FUNCTION(value) makes its own inputs: an --input-shape beside it would be
    ignored, so both commands refuse it (exit 2) and say why."""
    from emel.memory import import_cli
    for main in (lambda a: fit.main(a + ["--budget", "1MiB", "--dim", "batch"]), import_cli.main):
        with pytest.raises(SystemExit) as e:
            main(["--torch", "zoo:make", "--input-shape", "x=1,3"])
        assert e.value.code == 2 and "--input-shape applies to ONNX models only" in capsys.readouterr().err


def test_emel_fit_traces_a_torch_factory_by_path(tmp_path, capsys):
    """emel-fit --torch FILE.py:FUNCTION: FUNCTION(batch) -> (model, inputs) on
    meta, traced at each value; the answer is backed by the two plans, checked
    here by planning the traced model again; progress goes to stderr."""
    torch = pytest.importorskip("torch")
    zoo = tmp_path / "zoo.py"
    zoo.write_text(
        "import torch\n"
        "def make(batch):\n"
        "    with torch.device('meta'):\n"
        "        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),\n"
        "                                    torch.nn.Linear(256, 64))\n"
        "    return model, (torch.randn(batch, 64, device='meta'),)\n")
    out = tmp_path / "fit.json"
    assert fit.main(["--torch", f"{zoo}:make", "--budget", "1MiB", "--dim", "batch", "--training",
                     "--optimizer", "adam", "--max", "1024", "--json", str(out)]) == 0
    answer = json.loads(out.read_text())
    err = capsys.readouterr().err
    assert f"batch={answer['value']}:" in err and "(fits)" in err and "(over)" in err

    def need(batch):
        with torch.device("meta"):
            model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))
        g = mm.from_torch(model, torch.randn(batch, 64, device="meta"), training=True, optimizer="adam")
        return mm.plan(g, mode="backward").total_bytes
    assert need(answer["value"]) <= 2**20 < need(answer["value"] + 1)


def test_emel_fit_on_a_traced_json_points_to_torch(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    g = mm.from_torch(torch.nn.Linear(8, 8), torch.randn(2, 8))
    path = tmp_path / "linear.json"
    path.write_text(g.to_json())
    assert fit.main([str(path), "--budget", "1MiB", "--dim", "batch"]) == 1
    assert "emel-fit --torch MODULE:FUNCTION" in capsys.readouterr().err
def test_peak_of_tensors_near_2_64_bytes_is_exact():
    """Found by the new `peak` fuzz surface (issue 31): sizes went through
    int64, so a 2^63 + 5-byte tensor wrapped and peak() reported 882,679 B
    in an arena whose lower bound is above 2^63."""
    import graphgen
    plan = mm.plan(graphgen.past_int64_doc(), alignment=1)
    act = plan.arenas["activations"]
    assert act.lower_bound == 2**63 + 5 + 2**62
    assert plan.peak(arena="activations").live_bytes == act.lower_bound <= act.size
    assert plan.peak().tensors[0].id == "big" and plan.peak().tensors[0].bytes == 2**63 + 5


def test_a_storage_saved_through_a_view_is_a_saved_activation():
    """The flag sits on the view (a training import saves `detach(h)`), the
    bytes are the base's: peak() files them under saved activations."""
    g = mm.Graph(name="saved-view")
    g.tensor("x", [256], role="input")
    g.tensor("w", [256], role="parameter")
    g.tensor("h", [256])                                          # the storage
    g.tensor("hd", [256], view_of="h", saved_for_backward=True)   # detach(h), kept for backward
    g.tensor("y", [256], role="output")
    g.tensor("gw", [256], role="gradient")
    g.node("fwd", "mul", ["x", "w"], ["h"], phase="forward")
    g.node("detach", "detach", ["h"], ["hd"], phase="forward")
    g.node("loss", "sum", ["h"], ["y"], phase="forward")
    g.node("bwd", "mul_backward", ["y", "hd"], ["gw"], phase="backward")
    report = mm.plan(g, mode="backward").peak(top=10)
    assert {t.id: t.category for t in report.tensors}["h"] == "saved_activations"
    assert report.breakdown["saved_activations"] == 1024 and report.breakdown["temporaries"] == 0
