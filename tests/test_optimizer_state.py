"""from_torch(..., training=True, optimizer=...): the optimizer's state is what
the real optimizer allocates, byte for byte, and its step is planned."""

import pytest

torch = pytest.importorskip("torch")

import emel.memory as mm  # noqa: E402
from emel.memory import import_cli  # noqa: E402
from emel.memory.graph import tensor_bytes  # noqa: E402


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))


def state_bytes(graph):
    return sum(tensor_bytes(t) for t in graph.tensors if t["role"] == "optimizer_state")


def real_state_bytes(model, optimizer, x):
    """What the optimizer holds after one real step."""
    model.zero_grad()
    model(x).sum().backward()
    optimizer.step()
    return sum(v.numel() * v.element_size() for st in optimizer.state.values() for v in st.values()
               if torch.is_tensor(v))


MAKERS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1),
    "sgd_momentum_nesterov_decay": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True,
                                                              weight_decay=0.01),
    "adam": lambda ps: torch.optim.Adam(ps),
    "adam_decay": lambda ps: torch.optim.Adam(ps, weight_decay=0.01),
    "adamw_amsgrad": lambda ps: torch.optim.AdamW(ps, amsgrad=True),
}


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_state_bytes_are_what_the_real_optimizer_allocates(kind):
    model, x = mlp(), torch.randn(8, 64)
    optimizer = MAKERS[kind](model.parameters())
    graph = mm.from_torch(model, x, training=True, optimizer=optimizer)
    assert state_bytes(graph) == real_state_bytes(model, optimizer, x)
    plan = mm.plan(graph, mode="backward")
    params = sum(tensor_bytes(t) for t in graph.tensors if t["role"] == "parameter")
    assert plan.arenas["parameters"].size >= params + state_bytes(graph)
    plan.verify()


def test_names_match_the_default_instances():
    model, x = mlp(), torch.randn(8, 64)
    n_params = sum(p.numel() * 4 for p in model.parameters())
    assert state_bytes(mm.from_torch(model, x, training=True, optimizer="sgd")) == 0
    assert state_bytes(mm.from_torch(model, x, training=True, optimizer="sgd_momentum")) == n_params
    # Adam and AdamW: exp_avg and exp_avg_sq, plus a 4-byte step per parameter tensor
    for name in ("adam", "adamw"):
        graph = mm.from_torch(model, x, training=True, optimizer=name)
        assert state_bytes(graph) == 2 * n_params + 4 * len(list(model.parameters()))


def test_only_the_optimized_parameters_get_state():
    model, x = mlp(), torch.randn(8, 64)
    optimizer = torch.optim.Adam(model[2].parameters())          # the last layer only
    graph = mm.from_torch(model, x, training=True, optimizer=optimizer)
    assert state_bytes(graph) == real_state_bytes(model, optimizer, x) == 2 * (256 * 10 + 10) * 4 + 8


def test_the_step_adds_its_temporaries_after_backward():
    """Adam's denominator (sqrt, then the quotient) of the largest parameter
    is live during the step: the activations arena holds at least it."""
    model, x = mlp(), torch.randn(8, 64)
    without = mm.plan(mm.from_torch(model, x, training=True), mode="backward")
    graph = mm.from_torch(model, x, training=True, optimizer="adam")
    step = [n for n in graph.nodes if n["id"].startswith("optimizer.")]
    assert step and all(n["phase"] == "backward" for n in step)
    assert graph.nodes[-len(step):] == step                      # the step runs last
    plan = mm.plan(graph, mode="backward")
    assert plan.arenas["activations"].lower_bound >= 2 * 64 * 256 * 4   # sqrt + quotient of fc1's weight
    assert plan.total_bytes > without.total_bytes


def test_refusals_are_one_line():
    model, x = mlp(), torch.randn(8, 64)
    with pytest.raises(ValueError, match="training=True"):
        mm.from_torch(model, x, optimizer="adam")
    with pytest.raises(ValueError, match="expected one of sgd"):
        mm.from_torch(model, x, training=True, optimizer="lamb")
    with pytest.raises(ValueError, match="Adagrad is not supported"):
        mm.from_torch(model, x, training=True, optimizer=torch.optim.Adagrad(model.parameters()))


def test_emel_import_optimizer_flag(tmp_path, monkeypatch):
    (tmp_path / "models_opt.py").write_text(
        "import torch\n"
        "def make():\n"
        "    torch.manual_seed(0)\n"
        "    return torch.nn.Linear(16, 32), (torch.randn(4, 16),)\n")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "step.json"
    assert import_cli.main(["--torch", "models_opt:make", "--training", "--optimizer", "adamw",
                            "-o", str(out)]) == 0
    graph = mm.load_graph(out)
    assert state_bytes(graph) == 2 * (16 * 32 + 32) * 4 + 2 * 4
