"""from_torch: small models built here, checked against an eager run on real tensors.

The oracle (EagerTrace) runs the model for real under a TorchDispatchMode and
records which real storages every ATen call reads and writes (by data
pointer, every result kept alive so no address is reused). From that it
computes, without the importer: the number of tensors, bytes per role and the
lower bound of each arena. The importer instead traces with make_fx on fake
tensors; both must agree.
"""

import math

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_leaves  # noqa: E402

import emel.memory as mm  # noqa: E402


FACTORIES = ("aten.ones", "aten.zeros", "aten.full", "aten.empty")


class EagerTrace(TorchDispatchMode):
    """Every ATen call of an eager run: the storages it reads and the ones it writes."""

    def __init__(self):
        super().__init__()
        self.calls = []      # (name, read storage keys, written storage keys, [result tensors])
        self.keep = []       # results kept alive: no storage address is reused
        self.nbytes = {}     # storage key -> bytes

    def key(self, t):
        storage = t.untyped_storage()
        k = (storage.data_ptr(), storage.nbytes()) if storage.nbytes() else ("empty", id(storage))
        self.nbytes.setdefault(k, storage.nbytes())
        return k

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        ins = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        self.keep.extend(ins + outs)
        if func is torch.ops.aten.detach.default and self.calls and self.calls[-1][0].startswith(
                FACTORIES) and self.key(ins[0]) in self.calls[-1][2]:
            # Eager autograd detaches a tensor it has just created (grad_outputs);
            # make_fx does not record that detach.
            return out
        self.calls.append((str(func), [self.key(t) for t in ins], [self.key(t) for t in outs], outs))
        return out


def lower_bound(calls, storages, born_at_start, lives_to_end):
    """Max over steps of the bytes of ``storages`` live at that step (the plan's definition)."""
    n = len(calls)
    birth, death = {}, {}
    for s in born_at_start:
        birth[s] = death[s] = 0
    for step, (_, reads, writes, _) in enumerate(calls):
        for s in writes:
            birth.setdefault(s, step)
            death[s] = step
        for s in reads:
            death[s] = step
    for s in lives_to_end:
        death[s] = n - 1
    live = [0] * n
    for s, size in storages.items():
        if s in birth:
            for step in range(birth[s], death[s] + 1):
                live[step] += size
    return max(live, default=0)


def storage_keys(trace, tensors):
    return [trace.key(t) for t in tensors]


def role_bytes(graph):
    out = {}
    for t in graph.tensors:
        if "view_of" not in t:
            out[t["role"]] = out.get(t["role"], 0) + mm.graph.tensor_bytes(t)
    return out


def check_inference(model, inputs):
    """Import, plan, and compare with an eager run of the same model."""
    model.eval()
    graph = mm.from_torch(model, inputs)
    state = list(model.parameters()) + list(model.buffers())
    with torch.no_grad(), EagerTrace() as trace:
        result = model(*inputs)
    results = [t for t in tree_leaves(result) if isinstance(t, torch.Tensor)]
    param_keys = set(storage_keys(trace, state))
    input_keys = storage_keys(trace, [t for t in tree_leaves(inputs) if isinstance(t, torch.Tensor)])
    out_keys = set(storage_keys(trace, results))

    produced = sum(len(writes) for _, _, writes, _ in trace.calls)
    assert len(graph.tensors) == len(state) + len(input_keys) + produced
    assert len(graph.nodes) == len(trace.calls)

    expected = {"parameter": sum(t.untyped_storage().nbytes() for t in state),
                "input": sum(trace.nbytes[k] for k in input_keys)}
    if out_keys - param_keys - set(input_keys):
        expected["output"] = sum(trace.nbytes[k] for k in out_keys - param_keys - set(input_keys))
    new = {k for _, _, writes, _ in trace.calls for k in writes} - param_keys - set(input_keys) - out_keys
    if new:
        expected["activation"] = sum(trace.nbytes[k] for k in new)
    assert role_bytes(graph) == expected

    activations = {k: trace.nbytes[k] for k in trace.nbytes if k not in param_keys}
    plan = mm.plan(graph, mode="inference")
    assert plan.arenas["activations"].peak_live_bytes == lower_bound(
        trace.calls, activations, input_keys, out_keys)
    assert plan.arenas["parameters"].lower_bound == expected["parameter"]
    return graph, plan


class MLP(nn.Module):
    def __init__(self, d_in=32, hidden=64, d_out=16):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(d_in, hidden), nn.GELU(), nn.Linear(hidden, d_out)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class ConvBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(8 * 8 * 8, 10)

    def forward(self, image):
        return self.head(torch.flatten(self.pool(self.relu(self.bn(self.conv(image)))), 1))


class TinyTransformer(nn.Module):
    def __init__(self, vocab=64, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, d)
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.register_buffer("causal", torch.triu(torch.ones(16, 16, dtype=torch.bool), diagonal=1))

    def forward(self, tokens):
        x = self.embed(tokens)
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        y = att.masked_fill(self.causal[:s, :s], float("-inf")).softmax(-1) @ v
        x = x + self.proj(y.transpose(1, 2).reshape(b, s, d))
        x = x + self.down(torch.relu(self.up(self.norm2(x))))
        return self.lm_head(x)


def test_mlp_inference_matches_eager():
    torch.manual_seed(0)
    model = MLP()
    graph, plan = check_inference(model, (torch.randn(8, 32),))
    # By hand: fc1's result and gelu's are the largest pair live together.
    assert plan.arenas["activations"].peak_live_bytes == 2 * 8 * 64 * 4
    by_id = {t["id"]: t for t in graph.tensors}
    assert by_id["gelu"]["can_inplace"] is True
    assert {t["id"] for t in graph.tensors if t["role"] == "input"} == {"x"}
    assert graph.outputs == ["addmm_1"] and by_id["addmm_1"]["role"] == "output"
    # Linear's transposed weight is a view of the parameter, found through its storage.
    assert by_id["t"]["view_of"] == {"base": "fc1.weight", "byte_offset": 0}


def test_conv_block_inference_matches_eager():
    torch.manual_seed(0)
    graph, plan = check_inference(ConvBlock(), (torch.randn(2, 3, 16, 16),))
    by_id = {t["id"]: t for t in graph.tensors}
    # The in-place ReLU writes into batch norm's result: an alias (a view at offset 0).
    relu = by_id["relu_"]
    base = relu["view_of"]["base"]
    assert relu["view_of"]["byte_offset"] == 0 and base.startswith("native_batch_norm")
    assert relu["nbytes"] == 2 * 8 * 16 * 16 * 4
    # Buffers (running stats, the int64 counter) are parameters, of their module.
    assert by_id["bn.num_batches_tracked"] == {"id": "bn.num_batches_tracked", "shape": [],
                                               "dtype": "int64", "role": "parameter",
                                               "module": "bn"}


def test_tiny_transformer_inference_matches_eager():
    torch.manual_seed(0)
    graph, plan = check_inference(TinyTransformer(), (torch.randint(0, 64, (2, 12)),))
    views = [t for t in graph.tensors if "view_of" in t]
    assert views, "split/view/transpose must come out as views"
    # split's second piece starts d elements into each row of the qkv result.
    split = [t for t in views if t["id"].startswith("split") and t["id"].endswith(".1")]
    assert [t["view_of"]["byte_offset"] for t in split] == [32 * 4]
    mm.plan(graph, strategy="auto").verify()


def test_strided_view_offset_and_span():
    class Slice(nn.Module):
        def forward(self, x):
            return (x[:, 2:] * 2.0).sum(0)

    graph = mm.from_torch(Slice(), (torch.randn(4, 10),))
    view = next(t for t in graph.tensors if "view_of" in t)
    # Rows of 8 of 10 floats, from element 2: bytes [8, 8 + ((4-1)*10 + 7 + 1) * 4).
    assert view["view_of"] == {"base": "x", "byte_offset": 8}
    assert view["nbytes"] == (3 * 10 + 7 + 1) * 4
    assert view["shape"] == [4, 8]


def test_training_graph_matches_eager():
    torch.manual_seed(0)
    model = TinyTransformer()
    tokens = torch.randint(0, 64, (2, 12))
    graph = mm.from_torch(model, (tokens,), training=True)
    params = list(model.parameters())

    model.train()
    with EagerTrace() as trace:
        loss = model(tokens).sum()
        forward_calls = len(trace.calls)
        grads = torch.autograd.grad(loss, params)
    param_keys = set(storage_keys(trace, params))
    input_keys = storage_keys(trace, [tokens])
    grad_keys = set(storage_keys(trace, grads))
    loss_key = trace.key(loss)

    produced = sum(len(writes) for _, _, writes, _ in trace.calls)
    buffers = list(model.buffers())
    assert len(graph.tensors) == len(params) + len(buffers) + 1 + produced
    phases = [n["phase"] for n in graph.nodes]
    assert phases == ["forward"] * forward_calls + ["backward"] * (len(trace.calls) - forward_calls)
    param_bytes = sum(p.nbytes for p in params)
    got = role_bytes(graph)
    assert got["parameter"] == param_bytes + sum(b.nbytes for b in buffers)
    assert got["gradient"] == sum(trace.nbytes[k] for k in grad_keys) == param_bytes
    assert got["output"] == 4 and got["input"] == tokens.nbytes
    assert graph.outputs[0] == "sum_1" and len(graph.outputs) == 1 + len(params)

    # Saved for backward: forward storages (and inputs) that a backward call reads.
    forward_made = set(input_keys)
    for _, _, writes, _ in trace.calls[:forward_calls]:
        forward_made.update(writes)
    saved = {k for _, reads, _, _ in trace.calls[forward_calls:] for k in reads} & forward_made
    saved -= param_keys | set(storage_keys(trace, buffers))
    by_id = {t["id"]: t for t in graph.tensors}

    def root(tid):
        while "view_of" in by_id[tid]:
            tid = by_id[tid]["view_of"]["base"]
        return tid
    marked = {root(t["id"]) for t in graph.tensors if t.get("saved_for_backward")}
    assert len(marked) == len(saved)

    plan = mm.plan(graph, mode="backward", arena_layout="separate")  # the oracle bounds each role arena
    persistent = param_keys | grad_keys | set(storage_keys(trace, buffers))
    activations = {k: n for k, n in trace.nbytes.items() if k not in persistent}
    assert plan.arenas["activations"].peak_live_bytes == lower_bound(
        trace.calls, activations, input_keys, {loss_key})
    assert plan.arenas["gradients"].peak_live_bytes == lower_bound(
        trace.calls, {k: trace.nbytes[k] for k in grad_keys}, [], grad_keys)
    plan.verify()


def test_meta_device_model_imports_without_memory():
    with torch.device("meta"):
        model = MLP(1024, 4096, 1024)
        x = torch.empty(16, 1024)
    graph = mm.from_torch(model, (x,))
    plan = mm.plan(graph)
    assert plan.arenas["parameters"].size >= (1024 * 4096 * 2 + 4096 + 1024) * 4
    assert plan.arenas["activations"].peak_live_bytes == 2 * 16 * 4096 * 4


def test_custom_loss_and_errors():
    model = MLP()
    x = torch.randn(4, 32)
    graph = mm.from_torch(model, x, training=True, loss_fn=lambda y: (y ** 2).mean())
    assert sum(1 for t in graph.tensors if t["role"] == "output") == 1
    with pytest.raises(TypeError, match="torch.nn.Module"):
        mm.from_torch(lambda v: v, (x,))
    frozen = MLP()
    for p in frozen.parameters():
        p.requires_grad_(False)
    with pytest.raises(ValueError, match="no parameter that requires grad"):
        mm.from_torch(frozen, (x,), training=True)
    assert model.training  # the model's mode is restored after tracing


def test_emel_import_traces_a_factory(tmp_path, monkeypatch, capsys):
    from emel.memory import import_cli

    (tmp_path / "factory_for_emel.py").write_text(
        "import torch\n"
        "def make():\n"
        "    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU())\n"
        "    return model, (torch.randn(2, 8),)\n")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "step.json"
    assert import_cli.main(["--torch", "factory_for_emel:make", "--training", "-o", str(out)]) == 0
    assert f"written to {out}" in capsys.readouterr().out
    g = mm.load_graph(str(out))
    assert {n["phase"] for n in g.nodes} == {"forward", "backward"}
    assert sum(mm.graph.tensor_bytes(t) for t in g.tensors
               if t["role"] == "gradient" and "view_of" not in t) == (8 * 16 + 16) * 4
    assert import_cli.main(["--torch", "no_colon"]) == 1
    assert "MODULE:FUNCTION" in capsys.readouterr().err


def test_tensor_arguments_keep_their_names_beside_arguments_that_are_not_tensors():
    class Scaled(nn.Module):
        def forward(self, x, scale: int, y):
            return x * scale + y

    g = mm.from_torch(Scaled(), (torch.randn(4), 3, torch.randn(4)))
    assert [t["id"] for t in g.tensors if t["role"] == "input"] == ["x", "y"]


class _KeyCache:
    """A cache object that is not a pytree (as Hugging Face's DynamicCache), updated in place."""

    def __init__(self, keys):
        self.layers = [{"keys": keys}]


def test_an_input_objects_tensors_are_inputs_and_the_object_is_left_as_it_was():
    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(8, 8)

        def forward(self, x, cache):
            layer = cache.layers[0]
            layer["keys"] = torch.cat([layer["keys"], self.proj(x)])   # the cache grows in place
            return layer["keys"].sum(0)

    keys = torch.randn(5, 8)
    cache = _KeyCache(keys)
    g = mm.from_torch(Decoder(), (torch.randn(1, 8), cache))
    by_id = {t["id"]: t for t in g.tensors}
    assert by_id["cache.layers.0.keys"]["role"] == "input" and by_id["cache.layers.0.keys"]["shape"] == [5, 8]
    assert not [i for i in by_id if i.startswith("_tensor_constant")]
    assert cache.layers[0]["keys"] is keys          # not a traced tensor left in the caller's cache
    assert mm.plan(g).tensors["cache.layers.0.keys"].arena == "activations"


def test_an_input_object_that_cannot_be_copied_is_used_as_it_is():
    import threading

    class Decoder(nn.Module):
        def forward(self, x, cache):
            return x + cache.layers[0]["keys"]

    cache = _KeyCache(torch.randn(8))
    cache.lock = threading.Lock()                    # deepcopy refuses a lock
    with pytest.warns(UserWarning, match="'cache' could not be copied"):
        g = mm.from_torch(Decoder(), (torch.randn(8), cache))
    assert {t["id"]: t["role"] for t in g.tensors}["cache.layers.0.keys"] == "input"


def test_tensors_an_output_object_holds_in_slots_are_outputs():
    """A returned object that is not a pytree is read through its attributes, its
    ``__slots__`` as well as its ``__dict__`` (as input objects are): the tensors it holds
    are outputs, live to the end of the plan."""
    class SlottedCache:
        __slots__ = ("keys", "length")

        def __init__(self, keys, length):
            self.keys, self.length = keys, length

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(8, 8)

        def forward(self, x):
            h = self.proj(x)
            return h.sum(0), SlottedCache(h * 2, 1)

    g = mm.from_torch(Decoder(), (torch.randn(3, 8),))
    assert len(g.outputs) == 2                               # the sum, and the cache's keys
    keys = g.outputs[1]
    assert {t["id"]: t for t in g.tensors}[keys]["shape"] == [3, 8]
    p = mm.plan(g)
    assert p.tensors[keys].death == p.steps - 1


def test_constants_and_dict_outputs():
    class WithConstant(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(4))

        def forward(self, x, y):
            return {"sum": x + torch.tensor([1.0, 2.0, 3.0, 4.0]), "same": y, "w": self.w}

    g = mm.from_torch(WithConstant(), (torch.randn(4), torch.randn(4)))
    by_id = {t["id"]: t for t in g.tensors}
    assert by_id["_tensor_constant0"]["role"] == "parameter"   # captured constant data
    assert g.outputs == ["add", "y", "w"]                      # in the result's order
    assert by_id["add"]["role"] == "output" and by_id["y"]["role"] == "input"
    p = mm.plan(g)
    assert p.tensors["y"].death == p.steps - 1                # handed back: lives to the end
