"""from_onnx, emel-plan on .onnx files and emel-import: small models built with onnx.helper."""

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import emel.memory as mm  # noqa: E402
from emel.memory import cli, import_cli  # noqa: E402
from mutate import substitute_bytes  # noqa: E402  (fuzz/, on pytest's pythonpath)

B, D, H = 4, 16, 32


def mlp_model(batch=B, out_type=None):
    """x[B,D] -> MatMul W1 -> Add b1 -> Relu -> Reshape [B,2,H/2] -> Flatten -> MatMul W2 -> y."""
    inits = [numpy_helper.from_array(np.zeros((D, H), np.float32), "W1"),
             numpy_helper.from_array(np.zeros((H,), np.float32), "b1"),
             numpy_helper.from_array(np.array([-1, 2, H // 2], np.int64), "shape"),
             numpy_helper.from_array(np.zeros((H, D), np.float32), "W2")]
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"], name="fc1"),
             helper.make_node("Add", ["h", "b1"], ["hb"], name="bias"),
             helper.make_node("Relu", ["hb"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "shape"], ["r3"], name="reshape"),
             helper.make_node("Flatten", ["r3"], ["r2"], name="flatten", axis=1),
             helper.make_node("MatMul", ["r2", "W2"], ["y"], name="fc2")]
    graph = helper.make_graph(nodes, "mlp",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, D])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_type)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_roles_views_bytes_and_lower_bound():
    g = mm.from_onnx(mlp_model())
    by_id = {t["id"]: t for t in g.tensors}
    assert len(g.tensors) == 4 + 1 + 6 and len(g.nodes) == 6
    assert {t["id"] for t in g.tensors if t["role"] == "parameter"} == {"W1", "b1", "shape", "W2"}
    assert by_id["x"]["role"] == "input" and by_id["y"]["role"] == "output" and g.outputs == ["y"]
    assert by_id["y"]["shape"] == [B, D]
    # Reshape and Flatten alias their data input; Add and Relu may run in place.
    assert by_id["r3"]["view_of"] == {"base": "r", "byte_offset": 0} and by_id["r3"]["shape"] == [B, 2, H // 2]
    assert by_id["r2"]["view_of"] == {"base": "r3", "byte_offset": 0} and by_id["r2"]["nbytes"] == B * H * 4
    assert by_id["hb"].get("can_inplace") and by_id["r"].get("can_inplace")
    assert not by_id["h"].get("can_inplace")            # MatMul is not elementwise
    plan = mm.plan(g)
    assert plan.arenas["parameters"].lower_bound == (D * H + H + H * D) * 4 + 3 * 8
    # Live together at the most: h and hb (the bias add), each B x H floats.
    assert plan.arenas["activations"].peak_live_bytes == 2 * B * H * 4
    assert plan.tensors["r2"].offset == plan.tensors["r"].offset


def test_identity_of_a_graph_input_returned_as_output_is_a_copy():
    nodes = [helper.make_node("Identity", ["x"], ["same"], name="id"),
             helper.make_node("Squeeze", ["x"], ["sq"], name="squeeze"),
             helper.make_node("Unsqueeze", ["sq", "axes"], ["back"], name="unsqueeze")]
    graph = helper.make_graph(
        nodes, "passthrough", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 8])],
        [helper.make_tensor_value_info("same", TensorProto.FLOAT16, None),
         helper.make_tensor_value_info("back", TensorProto.FLOAT16, None)],
        [numpy_helper.from_array(np.array([0], np.int64), "axes")])
    g = mm.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    by_id = {t["id"]: t for t in g.tensors}
    assert "view_of" not in by_id["same"]                  # handed back: the runtime copies
    assert by_id["sq"]["view_of"] == {"base": "x", "byte_offset": 0} and by_id["sq"]["shape"] == [8]
    assert by_id["back"]["view_of"]["base"] == "sq" and by_id["back"]["dtype"] == "float16"


def test_symbolic_input_named_and_fixed_with_input_shapes():
    model = mlp_model(batch="N")
    with pytest.raises(mm.PlanError) as e:
        mm.from_onnx(model)
    assert e.value.code == "INVALID_IR_SHAPES" and e.value.tensor == "x" and "'N'" in str(e.value)
    g = mm.from_onnx(model, input_shapes={"x": [B, D]})
    assert mm.plan(g).arenas["activations"].peak_live_bytes == 2 * B * H * 4
    with pytest.raises(mm.PlanError) as e:
        mm.from_onnx(model, input_shapes={"z": [1]})
    assert e.value.tensor == "z"


def test_first_unknown_shape_is_named():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Mystery", ["a"], ["b"], name="mystery", domain="custom"),
             helper.make_node("Relu", ["b"], ["c"], name="relu2")]
    graph = helper.make_graph(nodes, "opaque", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("custom", 1)])
    with pytest.raises(mm.PlanError) as e:
        mm.from_onnx(model)
    assert (e.value.code, e.value.tensor, e.value.node) == ("INVALID_IR_SHAPES", "b", "mystery")


def test_inputs_that_disagree_are_shown_where_a_shape_is_unknown():
    """A skip connection's Concat at input shapes the model cannot take (15x15 with
    14x14): its output has no shape, and the message shows what the Concat read."""
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["z"], ["b"]),
             helper.make_node("Concat", ["a", "b"], ["c"], axis=1, name="skip"), helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "unet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, "H", "H"]),
                                              helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, "h", "h"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert mm.from_onnx(model, input_shapes={"x": [1, 4, 8, 8], "z": [1, 4, 8, 8]}).tensors
    with pytest.raises(mm.PlanError, match=r"reads 'a' \[1, 4, 15, 15\], 'b' \[1, 4, 14, 14\]") as e:
        mm.from_onnx(model, input_shapes={"x": [1, 4, 15, 15], "z": [1, 4, 14, 14]})
    assert (e.value.tensor, e.value.node) == ("c", "skip")


def test_paths_and_bytes_load(tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_model(), str(path))
    from_path = mm.from_onnx(str(path)).to_dict()
    assert from_path == mm.from_onnx(path.read_bytes()).to_dict()
    assert from_path["name"] == "mlp"


def test_emel_plan_reads_onnx_and_plots(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_model(batch="N"), str(path))
    png = tmp_path / "plan.png"
    assert cli.main([str(path), "--input-shape", f"x={B},{D}", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("mlp: mode inference") and f"plot written to {png}" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert cli.main([str(path)]) == 1                      # symbolic batch without a shape
    assert "'x'" in capsys.readouterr().err


def test_emel_import_writes_the_graph(tmp_path, capsys):
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_model(), str(path))
    out = tmp_path / "mlp.json"
    assert import_cli.main([str(path), "-o", str(out)]) == 0
    assert "11 tensors, 6 nodes" in capsys.readouterr().out
    written = mm.load_graph(str(out))
    assert written.to_dict() == mm.from_onnx(str(path)).to_dict()
    assert json.loads(out.read_text())["format"] == "emel.graph/1"


def test_a_value_written_twice_is_refused():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="first"),
             helper.make_node("Relu", ["x"], ["a"], name="again")]
    graph = helper.make_graph(nodes, "twice", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2])])
    with pytest.raises(mm.PlanError) as e:
        mm.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert (e.value.tensor, e.value.node) == ("a", "again")


def test_a_reshape_to_another_element_count_is_named_at_import():
    """A traced export fixes a Reshape's target at the traced sizes: at other input
    shapes it no longer fits, which is said at import, naming the Reshape."""
    target = numpy_helper.from_array(np.array([10, 8], np.int64), "target")
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Reshape", ["r", "target"], ["v"], name="fixed"),
             helper.make_node("Relu", ["v"], ["y"])]
    graph = helper.make_graph(nodes, "traced", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [target])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    fits = {t["id"]: t for t in mm.from_onnx(model, input_shapes={"x": [10, 8]}).tensors}
    assert fits["v"]["view_of"]["base"] == "r"                          # at the traced sizes: a view
    with pytest.raises(mm.PlanError, match=r"\(56 elements\) into 'v' of shape \[10, 8\] \(80 elements\)") as e:
        mm.from_onnx(model, input_shapes={"x": [7, 8]})
    assert (e.value.code, e.value.tensor, e.value.node) == ("INVALID_IR_SHAPES", "v", "fixed")


@pytest.mark.filterwarnings("ignore")
def test_exported_models_agree_with_from_torch():
    """A model exported to ONNX and the same model traced by from_torch peak at the same bytes."""
    torch = pytest.importorskip("torch")
    import io

    from test_torch_importer import ConvBlock, TinyTransformer

    torch.manual_seed(0)
    for model, x in ((ConvBlock().eval(), torch.randn(2, 3, 16, 16)),
                     (TinyTransformer().eval(), torch.randint(0, 64, (2, 12)))):
        buffer = io.BytesIO()
        torch.onnx.export(model, (x,), buffer, dynamo=False, opset_version=17)
        from_onnx = mm.plan(mm.from_onnx(buffer.getvalue()), strategy="auto")
        from_torch = mm.plan(mm.from_torch(model, (x,)), strategy="auto")
        assert (from_onnx.arenas["activations"].peak_live_bytes
                == from_torch.arenas["activations"].peak_live_bytes)
        from_onnx.verify()      # (the Relu runs in place: below the bound is fine)


def test_graphs_are_named_after_their_file(tmp_path):
    """Exporters name every graph alike (torch: main_graph): the file says which model it is."""
    model = mlp_model()
    model.graph.name = "main_graph"
    path = tmp_path / "resnet_block.onnx"
    onnx.save(model, str(path))
    assert mm.from_onnx(str(path)).name == "resnet_block"
    assert mm.from_onnx(path).name == "resnet_block"
    assert mm.from_onnx(path.read_bytes()).name == "main_graph"      # no file: the graph's own
    assert mm.from_onnx(str(path), name="mine").name == "mine"


def test_emel_trace_and_emel_sweep_read_dynamic_onnx(tmp_path, capsys):
    from emel.memory import sweep, trace_cli
    onnx.save(mlp_model(batch="N"), str(tmp_path / "mlp.onnx"))
    trace = tmp_path / "t.jsonl"
    assert trace_cli.main(["record", str(tmp_path / "mlp.onnx"), "-o", str(trace)]) == 2   # N unfixed
    assert "N" in capsys.readouterr().err
    onnx.save(mlp_model(), str(tmp_path / "fixed.onnx"))
    assert trace_cli.main(["record", str(tmp_path / "fixed.onnx"), "-o", str(trace)]) == 0
    assert trace_cli.main(["verify", str(tmp_path / "fixed.onnx"), str(trace)]) == 0
    assert "OK" in capsys.readouterr().out
    assert sweep.main([str(tmp_path), "--strategies", "auto", "-j", "1", "--no-progress",
                       "--input-shape", f"x={B},{D}"]) == 0
    out = capsys.readouterr().out
    assert "mlp.onnx" in out and "fixed.onnx" in out and "INVALID_IR_SHAPES" not in out


def test_damaged_model_bytes_are_a_plan_error():
    """A name that is not UTF-8 comes back from protobuf as bytes (ONNX is proto2): it raised
    TypeError deep in the import. Seeded byte edits: a graph or a PlanError, nothing else."""
    import random
    data = mlp_model().SerializeToString()
    assert data.count(b"fc1") == 1
    with pytest.raises(mm.PlanError, match=r"a node name that is not UTF-8 text \(b'f\\xff1'\).*re-export"):
        mm.from_onnx(data.replace(b"fc1", b"f\xff1"))
    rng = random.Random(5)
    outcomes = {"imported": 0, "refused": 0}
    for _ in range(500):
        try:
            mm.plan(mm.from_onnx(substitute_bytes(rng, data, 4)))
            outcomes["imported"] += 1
        except mm.PlanError:
            outcomes["refused"] += 1
    assert outcomes["imported"] > 0 and outcomes["refused"] > 0, outcomes
