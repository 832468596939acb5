"""A module rewritten by remat() computes what the module computes: the
rewritten graph, run op by op with real tensors (emel.memory.remat_torch),
gives the same loss and gradients as the traced program, on random inputs."""

import pytest

torch = pytest.importorskip("torch")

import emel.memory as mm  # noqa: E402
from emel.memory.remat_torch import compare, run_graph, trace_torch  # noqa: E402


@pytest.fixture(autouse=True)
def one_thread():
    """Small ops on a shared 2-core machine: threads only contend."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.f = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
            torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))

    def forward(self, x):
        return self.f(x)


class WideMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = (torch.nn.Linear(64, 2048), torch.nn.Linear(2048, 2048),
                                  torch.nn.Linear(2048, 64))

    def forward(self, x):
        return self.c(torch.nn.functional.gelu(self.b(torch.relu(self.a(x)))))


def transformer():
    return torch.nn.TransformerEncoderLayer(64, 4, 256, dropout=0.0, batch_first=True)


MODELS = {
    "cnn": (SmallCNN, lambda: torch.randn(8, 3, 32, 32)),
    "mlp": (WideMLP, lambda: torch.randn(32, 64)),
    "transformer": (transformer, lambda: torch.randn(2, 32, 64)),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_remat_keeps_the_outputs(name):
    torch.manual_seed(0)
    make, example = MODELS[name]
    trace = trace_torch(make(), example())
    g = trace.graph
    # Activations apart from gradients, whose peak no recompute lowers.
    before = mm.plan(g, mode="backward", strategy="auto", arena_layout="separate").arenas["activations"].size
    h, p, report = mm.remat(g, before - 1, arena_layout="separate")
    assert report.recompute_nodes and p.arenas["activations"].size < before
    for seed in range(3):
        inputs = trace.random_inputs(seed)
        assert compare(trace, g, inputs) == 0.0       # the interpreter runs the import exactly
        assert compare(trace, h, inputs) == 0.0       # and the rewrite gives the same bits


def test_the_interpreter_notices_a_broken_rewrite():
    torch.manual_seed(0)
    trace = trace_torch(WideMLP(), torch.randn(32, 64))
    g = trace.graph
    before = mm.plan(g, mode="backward", strategy="auto", arena_layout="separate").arenas["activations"].size
    h, _, report = mm.remat(g, before - 1, arena_layout="separate")
    # run the replay after its first reader: the copy is read before it exists
    copies = list(report.recompute_nodes)
    order = [n for n in h.execution_order if n not in copies]
    broken = mm.Graph.from_dict(h.to_dict())
    broken.recompute_of = h.recompute_of
    broken.execution_order = order + copies
    with pytest.raises(KeyError, match="not live"):
        run_graph(trace, broken)
    # replay gelu where relu was recomputed (same shapes): the gradients change
    assert h.recompute_of["relu@remat"] == "relu"
    wrong = mm.Graph.from_dict(h.to_dict())
    wrong.recompute_of = dict(h.recompute_of, **{"relu@remat": "gelu"})
    assert compare(trace, wrong) > 0.0


def test_partitioned_graph_plans_pytorchs_saved_set():
    from emel.memory.remat_torch import partitioned_graph
    torch.manual_seed(0)
    model, x = WideMLP(), torch.randn(32, 64)
    full = partitioned_graph(model, x, None)        # AOTAutograd's default: no recompute
    cut = partitioned_graph(model, x, 0.05)         # min-cut under a 5% budget

    def saved(g):
        return {t["id"] for t in g.tensors if t.get("saved_for_backward") and "view_of" not in t}

    def replayed(g):
        forward_ops = {n["op"] for n in g.nodes if n.get("phase") == "forward"}
        return [n for n in g.nodes if n.get("phase") == "backward" and n["op"] in forward_ops
                and n["op"].startswith(("addmm", "relu", "gelu"))]

    assert not replayed(full) and replayed(cut)
    assert len(saved(cut)) < len(saved(full))
    tensors = {t["id"]: t for t in cut.tensors}
    for n in replayed(cut):   # a replay makes new storage, not an alias of the forward value
        assert all("view_of" not in tensors[o] for o in n["outputs"]), n["id"]
    for g in (full, cut):
        p = mm.plan(g, mode="backward", strategy="auto")
        mm.verify_execution(p, p.allocate())
