"""Importers on real model families, built here (no downloads): keyword inputs,
meta models with caches, data-dependent ops, module paths, ONNX shape
arithmetic, external data, and one-line errors on the command line."""

import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
onnx = pytest.importorskip("onnx")
import numpy as np  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import emel.memory as mm  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
PYTHON_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(mm.__file__))))


def run_cli(module, *args, cwd=None):
    env = dict(os.environ, PYTHONPATH=PYTHON_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=120)


# -- PyTorch ------------------------------------------------------------------
class Gated(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 16)

    def forward(self, x, mask=None, scale=1.0):
        y = self.proj(x) * scale
        return y if mask is None else y * mask


def test_keyword_inputs_as_dict_or_kwargs():
    x, mask = torch.randn(4, 16), torch.ones(4, 16)
    by_dict = mm.from_torch(Gated(), {"x": x, "mask": mask})
    by_kwargs = mm.from_torch(Gated(), (x,), kwargs={"mask": mask, "scale": 2.0})
    positional = mm.from_torch(Gated(), (x, mask))
    for g in (by_dict, by_kwargs, positional):
        inputs = sorted(t["id"] for t in g.tensors if t["role"] == "input")
        assert inputs == ["mask", "x"]
        assert mm.plan(g, strategy="auto").total_bytes > 0
    with pytest.raises(TypeError, match="kwargs must be a dict"):
        mm.from_torch(Gated(), (x,), kwargs=[mask])


class Router(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = nn.Sequential(nn.Linear(8, 8), Select())

    def forward(self, x):
        return self.gate(x)


class Select(nn.Module):
    def forward(self, y):
        return y[y > 0]


def test_data_dependent_op_is_a_plan_error_naming_op_and_module():
    with pytest.raises(mm.PlanError) as e:
        mm.from_torch(Router(), torch.randn(4, 8))
    message = str(e.value)
    assert e.value.code == "INVALID_IR_SHAPES"
    assert "aten.index" in message and "'gate.1'" in message and "Bound the size" in message


class Item(nn.Module):
    def forward(self, x):
        return x[: int(x.sum().item() > 0) + 1]     # a guard on a value while tracing


def test_guard_on_a_value_is_a_plan_error():
    with pytest.raises(mm.PlanError, match="data-dependent|depends on tensor values"):
        mm.from_torch(Item(), torch.randn(4, 8))


tf = None


def transformers():
    global tf
    if tf is None:
        tf = pytest.importorskip("transformers")
    return tf


def tiny_llama(device="cpu", use_cache=True):
    t = transformers()
    cfg = t.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                        use_cache=use_cache)
    with torch.device(device):
        return t.LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("use_cache", [True, False])
def test_hf_llama_meta_and_real_with_or_without_cache(device, use_cache):
    torch.manual_seed(0)
    model = tiny_llama(device, use_cache)
    ids = torch.randint(0, 96, (2, 8), device=device)
    g = mm.from_torch(model, {"input_ids": ids})
    # The logits, and with a cache its 2 x layers key/value tensors, are outputs.
    assert len(g.outputs) == (1 + 2 * 2 if use_cache else 1)
    by_id = {t["id"]: t for t in g.tensors}
    assert by_id["model.layers.1.mlp.up_proj.weight"]["module"] == "model.layers.1.mlp.up_proj"
    modules = {t.get("module") for t in g.tensors}
    assert "model.layers.0.mlp.up_proj" in modules and "model.layers.1.self_attn" in modules
    plan = mm.plan(g, strategy="auto").verify()
    assert plan.arenas["activations"].size <= plan.arenas["activations"].lower_bound  # in place
    if device == "cpu" and use_cache:
        mm.verify_execution(plan, plan.allocate())


def test_hf_llama_training_peak_names_modules():
    g = mm.from_torch(tiny_llama(use_cache=False), torch.randint(0, 96, (2, 8)), training=True)
    plan = mm.plan(g, mode="backward", strategy="auto")
    report = plan.peak()
    assert report.breakdown["saved_activations"] > 0 and report.breakdown["parameters"] > 0
    assert report.phase in ("forward", "backward")
    assert any(t.module and t.module.startswith("model.") for t in report.tensors)


def test_hf_gpt2_bert_t5_import_and_plan():
    t = transformers()
    ids = torch.randint(0, 96, (2, 8))
    models = [
        (t.GPT2LMHeadModel(t.GPT2Config(vocab_size=96, n_embd=32, n_layer=2, n_head=2,
                                        n_positions=32)), {"input_ids": ids}),
        (t.BertModel(t.BertConfig(vocab_size=96, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=64)),
         {"input_ids": ids, "attention_mask": torch.ones_like(ids)}),
        (t.T5ForConditionalGeneration(t.T5Config(vocab_size=96, d_model=32, d_kv=8, d_ff=64,
                                                 num_layers=2, num_heads=2)),
         {"input_ids": ids, "decoder_input_ids": ids[:, :4]}),
    ]
    for model, inputs in models:
        g = mm.from_torch(model.eval(), inputs)
        assert {"input_ids"} <= {x["id"] for x in g.tensors if x["role"] == "input"}
        plan = mm.plan(g, strategy="auto")
        report = plan.peak(arena="activations")
        assert report.module is None or isinstance(report.module, str)
        assert report.live_bytes <= plan.arenas["activations"].size


class ResBlock(nn.Module):
    """The shape of a torchvision ResNet basic block (torchvision itself has no CPU
    build that imports against the pinned torch here)."""

    def __init__(self, c):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + x)


def test_resnet_like_training_modules_and_execution():
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), ResBlock(8), ResBlock(8),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
    g = mm.from_torch(model, torch.randn(2, 3, 16, 16), training=True)
    modules = {t.get("module") for t in g.tensors}
    assert {"1.conv1", "1.bn2", "2.conv2", "5"} <= modules
    by_id = {t["id"]: t for t in g.tensors}
    for t in g.tensors:   # every gradient, and the storage under it, names its parameter's module
        if t["role"] == "gradient":
            root = by_id[t["view_of"]["base"]] if "view_of" in t else t
            assert t.get("module") and root.get("module")
    plan = mm.plan(g, mode="backward", strategy="auto")
    mm.verify_execution(plan, plan.allocate())


# -- ONNX ---------------------------------------------------------------------
def shape_arithmetic_model():
    """x[batch, seq] + a position range built from Shape(x): Range of a computed size,
    as a dynamic-batch Llama export builds its position ids."""
    one = numpy_helper.from_array(np.array(1, np.int64), "one")
    zero = numpy_helper.from_array(np.array(0, np.int64), "zero")
    idx = numpy_helper.from_array(np.array(1, np.int64), "idx")
    w = numpy_helper.from_array(np.zeros((16, 32), np.float32), "layers.0.proj.weight")
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="/shape/Shape"),
        helper.make_node("Gather", ["shape", "idx"], ["seq"], name="/shape/Gather"),
        helper.make_node("Range", ["zero", "seq", "one"], ["pos"], name="/pos/Range"),
        helper.make_node("Cast", ["pos"], ["posf"], to=TensorProto.FLOAT, name="/pos/Cast"),
        helper.make_node("Unsqueeze", ["posf", "zero1"], ["pos2"], name="/pos/Unsqueeze"),
        helper.make_node("Add", ["x", "pos2"], ["h"], name="/add/Add"),
        helper.make_node("Unsqueeze", ["h", "two"], ["h3"], name="/layers.0/Unsqueeze"),
        helper.make_node("MatMul", ["h3", "wt"], ["y"], name="/layers.0/proj/MatMul"),
    ]
    inits = [one, zero, idx, w, numpy_helper.from_array(np.array([0], np.int64), "zero1"),
             numpy_helper.from_array(np.array([2], np.int64), "two"),
             numpy_helper.from_array(np.zeros((1, 32), np.float32), "wt")]
    graph = helper.make_graph(
        nodes, "posenc", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 32])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_onnx_fixed_shapes_flow_through_range():
    g = mm.from_onnx(shape_arithmetic_model(), input_shapes={"x": [3, 16]})
    by_id = {t["id"]: t for t in g.tensors}
    assert by_id["pos"]["shape"] == [16] and by_id["h"]["shape"] == [3, 16]
    assert by_id["y"]["shape"] == [3, 16, 32]
    assert by_id["y"]["module"] == "layers.0.proj"            # from the node name
    assert by_id["layers.0.proj.weight"]["module"] == "layers.0.proj"
    assert mm.plan(g, strategy="auto").total_bytes > 0


def test_onnx_wrong_rank_is_refused_naming_both_ranks(tmp_path):
    with pytest.raises(mm.PlanError, match=r"input_shapes gives input 'x' rank 1 .* rank 2") as e:
        mm.from_onnx(shape_arithmetic_model(), input_shapes={"x": [16]})
    assert e.value.tensor == "x"
    path = tmp_path / "m.onnx"
    onnx.save(shape_arithmetic_model(), str(path))
    r = run_cli("emel.memory.import_cli", str(path), "--input-shape", "x=1,2,3")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "--input-shape gives input 'x' rank 3" in r.stderr and "input_shapes" not in r.stderr


def test_onnx_external_data_is_not_read(tmp_path):
    model = helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "ext",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 512])],
        [numpy_helper.from_array(np.ones((256, 512), np.float32), "w")]))
    path = tmp_path / "ext.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="ext.onnx.data",
              size_threshold=0)
    os.remove(tmp_path / "ext.onnx.data")          # the weights are gone; shapes are not
    g = mm.from_onnx(str(path))
    w = next(t for t in g.tensors if t["id"] == "w")
    assert w["shape"] == [256, 512] and w["role"] == "parameter"
    r = run_cli("emel.memory.cli", str(path))
    assert r.returncode == 0, r.stderr


def test_cli_errors_are_one_line(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage\xff\xff not a protobuf")
    r = run_cli("emel.memory.import_cli", str(bad))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert str(bad) in r.stderr and "re-export" in r.stderr and r.stderr.count("\n") == 1
    r = run_cli("emel.memory.import_cli", str(tmp_path / "absent.onnx"))
    assert r.returncode == 1 and "Traceback" not in r.stderr and "absent.onnx" in r.stderr
    (tmp_path / "factories.py").write_text(
        "import torch\n"
        "def just_model():\n    return torch.nn.Linear(2, 2)\n"
        "def not_a_module():\n    return 'model', torch.randn(2)\n")
    for fn, expected in [("just_model", "must return (model, example_inputs)"),
                         ("not_a_module", "must be a torch.nn.Module")]:
        r = run_cli("emel.memory.import_cli", "--torch", f"factories:{fn}", cwd=tmp_path)
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        assert expected in r.stderr and r.stderr.count("\n") == 1


def test_onnx_module_paths_from_exporter_name_scopes():
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="node_relu")], "scoped",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])]))
    prop = model.graph.node[0].metadata_props.add()
    prop.key, prop.value = "pkg.torch.onnx.name_scopes", "['', 'model', 'model.layers.0', 'relu']"
    g = mm.from_onnx(model)
    assert g.nodes[0]["module"] == "model.layers.0"
    assert next(t for t in g.tensors if t["id"] == "y")["module"] == "model.layers.0"


class Branch(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        if y.sum() > 0:               # Python control flow on a tensor's value
            return y * 2
        return y


def test_a_branch_on_a_value_names_the_users_line_and_suggests_control_flow():
    with pytest.raises(mm.PlanError) as e:
        mm.from_torch(Branch(), torch.randn(4, 8))
    message = str(e.value)
    assert f"{__file__}:" in message and "if y.sum() > 0:" in message
    assert "torch.where(cond, a, b)" in message and "torch.cond" in message and "layerdrop" in message


def test_a_model_failing_on_its_inputs_is_one_quiet_plan_error(capfd):
    with pytest.raises(mm.PlanError) as e:
        mm.from_torch(nn.Linear(8, 8), torch.randn(2, 9))
    assert e.value.code == "INVALID_IR_SHAPES"
    assert "failed while tracing on its example inputs" in str(e.value)
    assert "RuntimeError" in str(e.value) and "[2, 9]" in str(e.value)
    captured = capfd.readouterr()
    assert "fake_tensor" not in captured.err and "Traceback" not in captured.err
